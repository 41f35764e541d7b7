"""Files the scraper writes into a case directory, and reading them back.

- ``metrics/samples.jsonl``: one canonical sample per line (t_ns, scrape, name, labels, value).
- ``metrics/scrapes.jsonl``: one line per scrape tick, every tick accounted for (format in
  ``metrics.scraper``).
- ``metrics/raw.jsonl.gz``: the raw exposition text of every scrape (gzip, flushed per scrape).
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from metrics.samples import Sample

SAMPLES_FILE = "metrics/samples.jsonl"
SCRAPES_FILE = "metrics/scrapes.jsonl"
RAW_FILE = "metrics/raw.jsonl.gz"


def sample_to_json(sample: Sample, scrape: int, *, strict: bool = False) -> str:
    """One ``samples.jsonl`` line (no newline).

    The scraper writes with ``strict=True`` (its parser already drops non-finite values);
    ``strict=False`` lets tests fabricate a corrupt file for the validator to catch.

    Raises:
        ValueError: ``strict`` and the value is NaN or ±Inf.
    """
    return json.dumps(
        {
            "t_ns": sample.t_ns,
            "scrape": scrape,
            "name": sample.name,
            "labels": dict(sample.labels),
            "value": sample.value,
        },
        separators=(",", ":"),
        allow_nan=not strict,
    )


def read_samples(case_dir: Path) -> list[Sample]:
    """All samples of a case, in file (time) order; a missing file gives an empty list."""
    path = case_dir / SAMPLES_FILE
    if not path.exists():
        return []
    out: list[Sample] = []
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            if line.strip():
                d = json.loads(line)
                labels = tuple(sorted(d["labels"].items()))
                out.append(Sample(int(d["t_ns"]), d["name"], labels, float(d["value"])))
    return out


def read_scrapes(case_dir: Path) -> list[dict[str, Any]]:
    """The scrape index of a case (one dict per tick)."""
    path = case_dir / SCRAPES_FILE
    if not path.exists():
        return []
    with open(path, encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


def iter_raw(case_dir: Path) -> Iterator[dict[str, Any]]:
    """Raw scrapes (``{"scrape", "t_ns", "text"}``); tolerates a file cut short by a crash."""
    path = case_dir / RAW_FILE
    if not path.exists():
        return
    with gzip.open(path, "rt", encoding="utf-8") as fh:
        try:
            for line in fh:
                if line.strip():
                    yield json.loads(line)
        except (EOFError, gzip.BadGzipFile):
            return
