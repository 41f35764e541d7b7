"""``validate`` (and the report's data quality) warn when scrapes were dropped for size."""

from __future__ import annotations

from pathlib import Path

import msgspec

from analysis.report import build_report
from analysis.validate import validate_run
from loadgen.runformat.layout import case_dir
from loadgen.runformat.manifest import write_manifest
from loadgen.runformat.metric_files import read_scrapes
from metrics.rows import ScrapeTick
from metrics.store import SCRAPES_FILE
from tests.support.synthetic_run import TEST_CASE, build_run


def test_a_scrape_dropped_for_size_is_a_validate_warning(tmp_path: Path) -> None:
    build_run(tmp_path)
    cdir = case_dir(tmp_path, TEST_CASE)
    ticks = read_scrapes(cdir)
    last = ticks[-1]
    # One more tick after the last: a failed scrape whose answer passed the 4 MiB limit.
    dropped = ScrapeTick(
        tick=last.tick + 1, deadline_ns=last.deadline_ns + 250_000_000, outcome="failed",
        scrape=(last.scrape or 0) + 1, start_ns=last.deadline_ns + 250_000_000,
        end_ns=last.deadline_ns + 260_000_000, late=False,
        error="answer larger than 4194304 bytes", too_large=True,
    )  # fmt: skip
    with open(cdir / SCRAPES_FILE, "ab") as fh:
        fh.write(msgspec.json.encode(dropped) + b"\n")
    build_report(tmp_path)
    write_manifest(tmp_path, "ok", ["loadgen", "run"])  # sealed as a finished run is
    result = validate_run(tmp_path)
    assert result.problems == []
    assert [w for w in result.warnings if "size limit" in w] == [
        f"{TEST_CASE}: 1 /metrics answer(s) larger than the scraper's size limit dropped (failed "
        "scrapes, pages not kept; raise --metrics-max-bytes if the server's page is that big)"
    ]
