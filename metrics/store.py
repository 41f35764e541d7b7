"""Files the scraper writes into a case directory (``analysis.load`` reads them back).

- ``metrics/samples.jsonl``: one canonical sample per line (t_ns, scrape, name, labels, value).
- ``metrics/scrapes.jsonl``: one line per scrape tick, every tick accounted for (format in
  ``metrics.scraper``).
- ``metrics/raw.jsonl.gz``: the raw exposition text of every scrape (gzip, flushed per scrape).
"""

from __future__ import annotations

import json

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
