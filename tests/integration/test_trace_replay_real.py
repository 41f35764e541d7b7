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

import pytest

from tests.support.vllm_fixtures import SharedServer, loadgen, read_report, run_scenario

pytestmark = pytest.mark.vllm

SAMPLE = Path(__file__).parents[1] / "fixtures/traces/mooncake_fast25_synthetic_trace.jsonl"


@pytest.fixture(scope="module")
def trace_run(server_1gib: SharedServer, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return run_scenario(
        tmp_path_factory, "trace-replay", "--trace", str(SAMPLE), "--url", server_1gib.url,
        "--max-requests", "80", "--speedup", "0.5", "--seed", "7", "--settle-s", "0.6",
    )  # fmt: skip


def test_every_verdict_passes(trace_run: Path) -> None:
    report = read_report(trace_run)
    failed = [v for v in report["verdicts"] if v["passed"] is not True]
    assert not failed, json.dumps(failed, indent=2)
    assert report["verdict_summary"] == {"passed": 3, "failed": 0, "undecided": 0}


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
    before = (trace_run / "report.md").read_bytes(), (trace_run / "report.json").read_bytes()
    assert loadgen("report", str(trace_run), timeout=300).returncode == 0
    after = (trace_run / "report.md").read_bytes(), (trace_run / "report.json").read_bytes()
    assert before == after
