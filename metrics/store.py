"""Files the scraper writes into a case directory (``loadgen.runformat.metric_files`` reads them
back).

- ``metrics/samples.jsonl``: one canonical sample per line (``metrics.rows.SampleRow``).
- ``metrics/scrapes.jsonl``: one line per scrape tick, every tick accounted for
  (``metrics.rows.ScrapeTick``; outcomes in ``metrics.scraper``).
- ``metrics/raw.jsonl.gz``: the raw exposition text of every scrape (gzip, flushed per scrape).
"""

from __future__ import annotations

import json
import math

import msgspec

from metrics.rows import SampleRow
from metrics.samples import Sample

#: The scraper's directory in a case directory, and its three files (paths relative to the case).
METRICS_DIR = "metrics"
SAMPLES_FILE = f"{METRICS_DIR}/samples.jsonl"
SCRAPES_FILE = f"{METRICS_DIR}/scrapes.jsonl"
RAW_FILE = f"{METRICS_DIR}/raw.jsonl.gz"


_ENCODER = msgspec.json.Encoder()


def sample_row(sample: Sample, scrape: int) -> SampleRow:
    """The ``samples.jsonl`` row of ``sample``, read at scrape number ``scrape``."""
    return SampleRow(
        t_ns=sample.t_ns, scrape=scrape, name=sample.name, labels=dict(sample.labels),
        value=sample.value,
    )  # fmt: skip


def sample_to_json(sample: Sample, scrape: int, *, strict: bool = False) -> str:
    """One ``samples.jsonl`` line (no newline).

    The scraper writes with ``strict=True`` (its parser already drops non-finite values);
    ``strict=False`` lets tests fabricate a corrupt file (a ``NaN`` value) for the validator
    to catch.

    Raises:
        ValueError: ``strict`` and the value is NaN or ±Inf.
    """
    if math.isfinite(sample.value):
        return _ENCODER.encode(sample_row(sample, scrape)).decode()
    if strict:
        raise ValueError(f"{sample.name}: non-finite value {sample.value!r} in a sample row")
    return json.dumps(msgspec.to_builtins(sample_row(sample, scrape)), separators=(",", ":"))
