"""A fleet run on the real embedded vLLM: 2 replicas of 1 GiB started once, the Mooncake
sample's first 40 requests (38 sent, 2 longer than the context) replayed through the gateway's
round-robin and prefix-hash and through vllm-router's cache_aware, each policy starting with
empty caches. Every replica is scraped; each policy's fleet hit rate (both replicas' counters
summed) must agree with the fleet model's prediction for that policy, and prefix-hash keeps
each prefix group on one replica, so it beats round-robin.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.vllm_fixtures import loadgen, read_report, run_scenario

pytestmark = pytest.mark.vllm

SAMPLE = Path(__file__).parents[1] / "fixtures/traces/mooncake_fast25_synthetic_trace.jsonl"
POLICIES = ("round-robin", "prefix-hash", "vllm-router-cache_aware")


@pytest.fixture(scope="module")
def fleet_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return run_scenario(
        tmp_path_factory, "trace-replay", "--trace", str(SAMPLE), "--replicas", "2",
        "--routing", "round-robin,prefix-hash,vllm-router:cache_aware", "--max-requests", "40",
        "--speedup", "0.5", "--seed", "7", "--settle-s", "0.6",
    )  # fmt: skip


def test_each_policys_fleet_hit_rate_agrees_with_its_prediction(fleet_run: Path) -> None:
    report = read_report(fleet_run)
    verdicts = [v for v in report["verdicts"] if "hit rate within" in v["check"]]
    assert [v["case"] for v in verdicts] == list(POLICIES)
    assert all(v["passed"] is True for v in verdicts), json.dumps(verdicts, indent=2)
    cases = report["details"]["cases"]
    for name in POLICIES:
        phase = cases[name]["phases"]["speedup-0.5x"]
        funnel = phase["fleet"]
        assert funnel["replicas"] == 2 and phase["sent"] == 38
        # The counters of both replicas and the requests' own cached tokens agree.
        assert phase["hit_rate_requests"] == pytest.approx(phase["hit_rate_counters"], abs=0.01)
        assert sum(funnel["requests_per_replica"]) == 38
    rr = cases["round-robin"]["phases"]["speedup-0.5x"]["hit_rate_counters"]
    ph = cases["prefix-hash"]["phases"]["speedup-0.5x"]["hit_rate_counters"]
    assert ph > rr


def test_the_replicas_started_once_and_every_policy_started_cold(fleet_run: Path) -> None:
    cases = fleet_run / "cases"
    started = sorted(p.parent.name for p in cases.glob("*/server-replica-1"))
    assert started == ["round-robin"]  # the first policy's case started them; the rest reused
    for name in POLICIES:
        fleet = json.loads((cases / name / "fleet.json").read_text())
        assert len(fleet["replica_urls"]) == 2
        assert (cases / name / "replicas/1/metrics/samples.jsonl").stat().st_size > 0
    decisions = (cases / "prefix-hash/routing_decisions.jsonl").read_text().splitlines()
    assert len(decisions) == 38
    assert {json.loads(d)["policy"] for d in decisions} == {"prefix-hash"}


def test_validate_accepts_the_fleet_run(fleet_run: Path) -> None:
    assert loadgen("validate", str(fleet_run), timeout=120).returncode in (0, 4)
