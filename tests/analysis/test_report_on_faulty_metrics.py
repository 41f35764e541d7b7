"""The report and ``validate`` agree on what a faulty ``/metrics`` did to a run.

The real scraper process scrapes a fake ``/metrics`` (slow, HTML, NaN answers); a one-case,
one-phase run directory is written around what it recorded, and the report and ``validate``
are built from it. Hand-derived expectations are beside each assertion.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import time
from pathlib import Path

import pytest

from analysis.report import build_report
from analysis.validate import validate_run
from loadgen.runformat.layout import (
    CASE_FILE,
    PHASES_FILE,
    PLAN_FILE,
    REQUESTS_FILE,
    RUN_FILE,
    write_json,
)
from loadgen.runformat.manifest import write_manifest
from metrics.scraper import ScraperProcess
from scenarios.arrivals import AllAtOnce
from scenarios.plan import CaseSpec, PhaseSpec, Plan
from scenarios.workloads import UniquePrompts
from tests.support.fake_metrics_server import Answer, FakeMetricsServer

pytestmark = [pytest.mark.asyncio, pytest.mark.timeout(60)]

S = 1_000_000_000
MS = 1_000_000


def _plan() -> Plan:
    phase = PhaseSpec(
        name="p",
        workload=UniquePrompts(prompt_tokens=8, requests=5, output_tokens=10),
        arrival=AllAtOnce(),
    )
    case = CaseSpec(name="c", url="http://127.0.0.1:1", phases=(phase,))
    return Plan(scenario="faulty-metrics", description="test", params={}, cases=(case,),
                phases=())  # fmt: skip


def _write_run(run_dir: Path, scrapes_dir: Path, start_ns: int, last_end_ns: int,
               end_ns: int) -> None:  # fmt: skip
    """A run whose 5 requests (10 tokens each, 50 in all) ran in [start, last_end]."""
    cdir = run_dir / "cases" / "c"
    shutil.copytree(scrapes_dir / "metrics", cdir / "metrics")
    write_json(run_dir / PLAN_FILE, _plan().model_dump(mode="json"))
    write_json(run_dir / RUN_FILE, {"command": ["test"], "status": "ok"})
    write_json(cdir / CASE_FILE, {"status": "ok", "failed_requests": 0, "server": {}})
    step = (last_end_ns - start_ns) // 10
    with open(cdir / REQUESTS_FILE, "w") as fh:
        for i in range(5):
            chunks = [start_ns + (k + 1) * step for k in range(10)]
            fh.write(json.dumps({
                "request_id": f"p-{i:04d}", "case": "c", "phase": "p", "index": i,
                "group": None, "prompt_tokens_sent": 8, "max_tokens": 10,
                "scheduled_ns": start_ns, "sent_ns": start_ns, "chunk_ns": chunks,
                "chunk_tokens": [1] * 10, "end_ns": chunks[-1], "http_status": 200,
                "status": "ok", "usage_completion_tokens": 10,
            }) + "\n")  # fmt: skip
    phase = {"phase": "p", "start_ns": start_ns, "last_end_ns": last_end_ns, "end_ns": end_ns,
             "settle_s": 0.5, "requests": 5}  # fmt: skip
    (cdir / PHASES_FILE).write_text(json.dumps(phase) + "\n")


async def _scrape(tmp: Path, server: FakeMetricsServer, phase_s: float) -> tuple[int, int, int]:
    """Scrape ``server`` while a 'phase' generates 50 tokens ending ``phase_s`` after start;
    return (start, last end, when a scrape that started after the last end landed)."""
    url = await server.start()
    scraper = ScraperProcess(url, tmp, interval_s=0.25)
    try:
        scraper.start()
        # The phase starts once the second scrape has landed, not when it reaches the server:
        # a scrape in flight at the start would end inside the window (seen: 0.4 ms after it)
        # and be the window's reading, which the slow-page case must not have.
        await server.wait_requests(1)
        after_first = time.monotonic_ns()
        second = await scraper.wait_scrape_started_at_or_after(after_first, scraper.landing_bound_s)
        assert second is not None
        start_ns = time.monotonic_ns()
        await asyncio.sleep(phase_s)
        server.tokens = 50.0
        last_end_ns = time.monotonic_ns()
        post = await scraper.wait_scrape_started_at_or_after(last_end_ns, scraper.landing_bound_s)
        assert post is not None
        await asyncio.sleep(0.6)  # let the landed scrape end and one more tick pass
    finally:
        await asyncio.to_thread(scraper.stop)
        await server.stop()
    return start_ns, last_end_ns, time.monotonic_ns()


async def test_a_slow_metrics_page_either_gives_the_right_delta_or_a_flagged_one(
    tmp_path: Path,
) -> None:
    # Request 2 takes 2.5 s: it starts inside the phase (0.3 s long) and ends after it.
    server = FakeMetricsServer([Answer(), Answer(), Answer(delay_s=2.5)])
    start, last_end, landed = await _scrape(tmp_path / "scrapes", server, 0.3)

    waited = tmp_path / "waited"  # the phase ends after a fresh scrape: the full 50 tokens
    _write_run(waited, tmp_path / "scrapes", start, last_end, landed)
    report = build_report(waited).as_dict()
    phase = report["cases"]["c"]["phases"]["p"]
    assert phase["counter_deltas"]["generation_tokens"] == 50.0
    assert phase["deltas_flag"] is None
    ticks = report["cases"]["c"]["scrapes"]
    assert ticks["ticks"] == ticks["ok"] + ticks["failed"] + ticks["skipped"]
    assert ticks["skipped"] >= 8  # the 2.5 s scrape overran ≥ 8 deadlines of 0.25 s
    write_manifest(waited, "ok", ["test"])
    assert validate_run(waited).problems == validate_run(waited).warnings == []

    early = tmp_path / "early"  # the phase ends 0.5 s after its last request: no fresh scrape
    _write_run(early, tmp_path / "scrapes", start, last_end, last_end + S // 2)
    report = build_report(early).as_dict()
    phase = report["cases"]["c"]["phases"]["p"]
    # The only scrape started in the window is the 2.5 s one, which ends after it: the window
    # has no reading of its own, so the delta is unknown (it used to read a made-up 0).
    assert phase["counter_deltas"]["generation_tokens"] is None
    flag = phase["deltas_flag"]
    assert flag is not None and "no successful scrape ended inside the phase window" in flag
    assert f"phase p: {flag}" in report["cases"]["c"]["data_quality"]
    write_manifest(early, "ok", ["test"])
    result = validate_run(early)
    assert result.problems == []
    assert result.warnings == [f"c: phase p: {flag}"]  # the same finding as the report's


async def test_html_and_nan_answers_are_counted_in_the_report_and_valid(tmp_path: Path) -> None:
    # Scrapes 2 and 4 answer HTML (failed); 1, 3 and 5 carry a NaN KV usage (dropped).
    script = [Answer(), Answer(nan=True), Answer(kind="html"), Answer(nan=True),
              Answer(kind="html"), Answer(nan=True)]  # fmt: skip
    server = FakeMetricsServer(script)
    start, last_end, landed = await _scrape(tmp_path / "scrapes", server, 1.0)
    run = tmp_path / "run"
    _write_run(run, tmp_path / "scrapes", start, last_end, landed)
    report = build_report(run).as_dict()
    ticks = report["cases"]["c"]["scrapes"]
    assert (ticks["failed"], ticks["nan_dropped"]) == (2, 3)
    # The KV peak is engine 1's 0.7 (engine 0 reads 0.6 or NaN), never a sum.
    assert report["cases"]["c"]["phases"]["p"]["gauge_peaks"]["kv_cache_usage_perc"] == 0.7
    assert report["cases"]["c"]["phases"]["p"]["counter_deltas"]["generation_tokens"] == 50.0
    write_manifest(run, "ok", ["test"])
    assert validate_run(run).problems == []
    md = (run / "report.md").read_text()
    assert "failed 2, skipped" in md
