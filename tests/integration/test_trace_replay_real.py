"""trace-replay on the real embedded vLLM: a slice of the Mooncake FAST'25 sample replayed on
the session's shared 1 GiB server (``--url``, no server start of its own).

The slice: the first 80 requests of the default window (960 s to 1,023 s of trace time) at
the default token scale 1/32 (19.2 s of trace), sped up 0.5× (38 s of sending); 5 of them
are longer than the 2,048-token context and skipped (75 sent). The model predicts 0.315 at
145 usable blocks one request at a time, 0.343 unbounded. Its blocks are drawn under seed 7,
so nothing another test left in the shared cache matches them, and the shared server's
cached blocks of earlier tests sit in the free queue before any of this run's blocks (freed
earlier), so they are evicted first: the model's empty starting pool is equivalent.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from tests.support.page_checks import check_report_page
from tests.support.vllm_fixtures import SharedServer, loadgen, read_report, run_scenario

pytestmark = pytest.mark.vllm

SAMPLE = Path(__file__).parents[1] / "fixtures/traces/mooncake_fast25_synthetic_trace.jsonl"


@pytest.fixture(scope="module")
def trace_run(server_1gib: SharedServer, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return run_scenario(
        tmp_path_factory, "trace-replay", "--trace", str(SAMPLE), "--url", server_1gib.url,
        "--max-requests", "80", "--speedup", "0.5", "--seed", "7", "--settle-s", "0.6",
    )  # fmt: skip


def test_every_verdict_on_what_was_sent_and_cached_passes(trace_run: Path) -> None:
    report = read_report(trace_run)
    verdicts = {v["check"]: v for v in report["verdicts"]}
    assert len(verdicts) == 3 and all(v["passed"] is not None for v in verdicts.values())
    for check in ("hit rate within 0.05 of the prediction", "achieved rate within 1% of"):
        (verdict,) = [v for name, v in verdicts.items() if check in name]
        assert verdict["passed"] is True, json.dumps(verdict, indent=2)


def test_the_send_lateness_verdict_is_the_records_own_p99(trace_run: Path) -> None:
    # Send lateness depends on how busy these 2 cores are (CI saw a p99 of 5.3 ms against
    # the 5 ms limit once): the test pins the figure and its verdict to the raw records, not
    # the machine's speed; the benchmarks measure the sender's accuracy.
    records = [
        json.loads(line)
        for line in (trace_run / "cases/attached/requests.jsonl").read_text().splitlines()
    ]
    lateness_ms = [(r["sent_ns"] - r["scheduled_ns"]) / 1e6 for r in records]
    assert len(lateness_ms) == 75 and min(lateness_ms) >= 0
    report = read_report(trace_run)
    phase = report["details"]["cases"]["attached"]["phases"]["speedup-0.5x"]
    p99 = float(np.percentile(lateness_ms, 99))
    assert phase["lateness_ms"]["p99"] == pytest.approx(p99, abs=1e-6)
    (verdict,) = [v for v in report["verdicts"] if "send lateness p99 < 5 ms" in v["check"]]
    assert verdict["passed"] is (p99 < 5.0)
    assert f"p99 {p99:.3f} ms over 75 sends" in verdict["detail"]


def test_the_prediction_agrees_with_the_counters_within_the_tolerance(trace_run: Path) -> None:
    report = read_report(trace_run)
    phase = report["details"]["cases"]["attached"]["phases"]["speedup-0.5x"]
    tolerance = report["details"]["hit_rate_tolerance"]
    assert phase["sent"] == 75  # 80 in the slice, 5 longer than 2,048 tokens skipped
    assert abs(phase["hit_rate_counters"] - phase["predicted_hit_rate"]) <= tolerance
    # The trace shares prefixes here: the cache hits something, below the unbounded maximum.
    assert phase["predicted_hit_rate"] > 0.05
    assert phase["predicted_hit_rate"] <= phase["max_hit_rate"] + 1e-12
    # The counters and the requests' own cached tokens are two sources of one figure.
    assert phase["hit_rate_requests"] == pytest.approx(phase["hit_rate_counters"], abs=0.01)


def test_validate_and_an_identical_rebuild(trace_run: Path) -> None:
    assert loadgen("validate", str(trace_run), timeout=120).returncode == 0
    names = ("report.md", "report.json", "report.html")
    before = [(trace_run / name).read_bytes() for name in names]
    assert loadgen("report", str(trace_run), timeout=300).returncode == 0
    assert [(trace_run / name).read_bytes() for name in names] == before


def test_the_report_page_opens_offline_with_every_verdict_and_figure(
    trace_run: Path, tmp_path: Path
) -> None:
    check_report_page(trace_run, tmp_path)
