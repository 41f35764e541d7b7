"""Reading a case's metrics files back (``metrics/``: written by the scraper, ``metrics.store``).

Metric samples whose value is not finite (a corrupt file: the scraper writes none) are dropped
and counted, and so is a series repeated at one scrape, so no statistic ever sees them
(:func:`read_sample_file`). ``raw.jsonl.gz`` is read as far as it is whole (:func:`iter_raw`)
and checked as a whole (:func:`gzip_jsonl_problem`).
"""

from __future__ import annotations

import gzip
import json
import math
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import msgspec

from loadgen.runformat.reading import JsonlFile, read_jsonl
from metrics.rows import RawScrape, SampleRow, ScrapeTick
from metrics.samples import Sample
from metrics.store import RAW_FILE, SAMPLES_FILE, SCRAPES_FILE


@dataclass(frozen=True)
class SampleFile:
    """What ``metrics/samples.jsonl`` held.

    Attributes:
        samples: the finite samples, one per series and scrape, in file order.
        nonfinite: samples dropped because their value was not finite.
        duplicates: samples dropped because their series (name, labels) was already read at
            the same scrape.
        file: the file as read (its problems: torn tail, bad lines).
    """

    samples: list[Sample]
    nonfinite: int
    duplicates: int
    file: JsonlFile[SampleRow]


def read_sample_file(path: Path) -> SampleFile:
    """The samples of ``path`` (module docstring). A series repeated at one scrape is read
    once, its first line, as ``metrics.parse`` does: summed, it would double a counter."""
    raw = read_jsonl(path, SampleRow)
    out: list[Sample] = []
    nonfinite = duplicates = 0
    seen: set[tuple[int, str, tuple[tuple[str, str], ...]]] = set()
    for d in raw.rows:
        key = (d.t_ns, d.name, tuple(sorted(d.labels.items())))
        if key in seen:
            duplicates += 1
            continue
        seen.add(key)
        if not math.isfinite(d.value):
            nonfinite += 1
            continue
        out.append(Sample(*key, d.value))
    return SampleFile(out, nonfinite, duplicates, raw)


def read_samples(case_dir: Path) -> list[Sample]:
    """The finite metric samples of a case directory (``metrics/samples.jsonl``), in order."""
    return read_sample_file(case_dir / SAMPLES_FILE).samples


def read_scrapes(case_dir: Path) -> list[ScrapeTick]:
    """The scrape index of a case directory (``metrics/scrapes.jsonl``), one row per tick."""
    return read_jsonl(case_dir / SCRAPES_FILE, ScrapeTick).rows


def iter_raw(case_dir: Path) -> Iterator[RawScrape]:
    """The raw scrapes of ``metrics/raw.jsonl.gz``; a file cut short by a crash (gzip stream
    or last line) ends the iteration, like a torn JSONL tail; a line that is not a raw scrape
    is skipped."""
    path = case_dir / RAW_FILE
    if not path.exists():
        return
    with gzip.open(path, "rt", encoding="utf-8") as fh:
        try:
            for line in fh:
                if line.strip():
                    try:
                        obj = json.loads(line)
                    except json.JSONDecodeError:
                        return  # only the cut-short last line can fail to parse
                    try:
                        yield msgspec.convert(obj, RawScrape, strict=True)
                    except msgspec.ValidationError:
                        continue
        except (EOFError, OSError, zlib.error):  # gzip.BadGzipFile is an OSError
            return


def gzip_jsonl_problem(path: Path) -> str | None:
    """Why the file at ``path`` is not what a ``.jsonl.gz`` name says (one complete gzip
    stream of JSON objects, one a line), or ``None`` when it is: ``is not gzip``, ``is cut
    short``, ``line N is not a JSON object``. Reads the whole stream (its CRC is checked at
    the end)."""
    try:
        with gzip.open(path, "rt", encoding="utf-8") as fh:
            for lineno, line in enumerate(fh, 1):
                if not line.strip():
                    continue
                try:
                    obj = json.loads(line)
                except json.JSONDecodeError:
                    obj = None
                if not isinstance(obj, dict):
                    return f"line {lineno} is not a JSON object"
    except gzip.BadGzipFile as exc:
        return f"is not gzip ({exc})"
    except EOFError:
        return "is cut short (the gzip stream ends early)"
    except (OSError, zlib.error, UnicodeDecodeError) as exc:
        return f"cannot be read as gzip ({type(exc).__name__}: {exc})"
    return None
