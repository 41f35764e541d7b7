"""metrics.store's files as analysis.load reads them back (samples, scrape index, raw pages
after a crash)."""

from __future__ import annotations

import gzip
import json
import math
from pathlib import Path

import pytest

from loadgen.runformat.metric_files import iter_raw, read_samples, read_scrapes
from metrics.rows import ScrapeTick
from metrics.samples import Sample
from metrics.store import RAW_FILE, SAMPLES_FILE, SCRAPES_FILE, sample_to_json


def test_samples_round_trip_with_sorted_labels(tmp_path: Path) -> None:
    samples = [
        Sample(5, "request_success", (("finished_reason", "length"), ("model_name", "m")), 3.0),
        Sample(5, "kv_cache_usage_perc", (), 0.25),
    ]
    (tmp_path / "metrics").mkdir()
    (tmp_path / SAMPLES_FILE).write_text("".join(sample_to_json(s, 7) + "\n" for s in samples))
    assert json.loads(sample_to_json(samples[0], 7)) == {
        "t_ns": 5,
        "scrape": 7,
        "name": "request_success",
        "labels": {"finished_reason": "length", "model_name": "m"},
        "value": 3.0,
    }
    assert read_samples(tmp_path) == samples


def test_the_scrapers_strict_writer_refuses_non_finite_values() -> None:
    for value in (math.nan, math.inf, -math.inf):
        with pytest.raises(ValueError):
            sample_to_json(Sample(5, "kv_cache_usage_perc", (), value), 7, strict=True)


def test_missing_files_read_as_empty(tmp_path: Path) -> None:
    assert read_samples(tmp_path) == []
    assert read_scrapes(tmp_path) == []
    assert list(iter_raw(tmp_path)) == []


def test_scrape_index_skips_blank_lines(tmp_path: Path) -> None:
    (tmp_path / "metrics").mkdir()
    (tmp_path / SCRAPES_FILE).write_text(
        '{"tick": 0, "deadline_ns": 5, "outcome": "ok"}\n\n'
        '{"tick": 1, "deadline_ns": 9, "outcome": "skipped"}\n'
    )
    assert read_scrapes(tmp_path) == [
        ScrapeTick(tick=0, deadline_ns=5, outcome="ok"),
        ScrapeTick(tick=1, deadline_ns=9, outcome="skipped"),
    ]


def test_raw_pages_cut_short_by_a_crash_keep_every_complete_scrape(tmp_path: Path) -> None:
    (tmp_path / "metrics").mkdir()
    path = tmp_path / RAW_FILE
    ends = []
    with gzip.open(path, "at", encoding="utf-8", compresslevel=3) as fh:
        for i in range(3):
            page = f"vllm:num_requests_running {i}\n" * 2000
            fh.write(json.dumps({"scrape": i, "t_ns": i, "text": page}) + "\n")
            fh.flush()  # what the scraper does after every scrape
            ends.append(path.stat().st_size)
    data = path.read_bytes()
    assert [r.scrape for r in iter_raw(tmp_path)] == [0, 1, 2]
    # Cut inside the third scrape's compressed bytes: the first two survive, nothing raises.
    path.write_bytes(data[: (ends[1] + ends[2]) // 2])
    assert [r.scrape for r in iter_raw(tmp_path)] == [0, 1]
    path.write_bytes(data[: ends[1]])
    assert [r.scrape for r in iter_raw(tmp_path)] == [0, 1]
