"""A fleet run on the real embedded vLLM: 2 replicas of 1 GiB started once, the Mooncake
sample's first 40 requests (38 sent, 2 longer than the context) replayed through the gateway's
round-robin and prefix-hash and through vllm-router's cache_aware and kv_aware (subscribed to
both replicas' KV-cache events, passed on by the run's recorders), each policy starting with
empty caches, then prefix-hash once more with replica 1 killed 8 s in. Every replica is
scraped and records its KV-cache events; each policy's fleet hit rate (both replicas'
counters summed) must agree with the fleet model's prediction for that policy, prefix-hash
keeps each prefix group on one replica, so it beats round-robin, each replica's stored blocks
are the model's, and the kill loses no request and moves replica 1's keys.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.fleet_checks import check_funnels, check_replicas_started_once
from tests.support.vllm_fixtures import loadgen, read_report, run_scenario

pytestmark = pytest.mark.vllm

SAMPLE = Path(__file__).parents[1] / "fixtures/traces/mooncake_fast25_synthetic_trace.jsonl"
POLICIES = ("round-robin", "prefix-hash", "vllm-router-cache_aware", "vllm-router-kv_aware")


@pytest.fixture(scope="module")
def fleet_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return run_scenario(
        tmp_path_factory, "trace-replay", "--trace", str(SAMPLE), "--replicas", "2",
        "--routing", "round-robin,prefix-hash,vllm-router:cache_aware,vllm-router:kv_aware",
        "--max-requests", "40",
        "--speedup", "0.5", "--seed", "7", "--settle-s", "0.6", "--kill-replica", "1@8",
    )  # fmt: skip


def test_each_policys_fleet_hit_rate_agrees_with_its_prediction(fleet_run: Path) -> None:
    report = read_report(fleet_run)
    check_funnels(report, POLICIES, "speedup-0.5x", 38)
    cases = report["details"]["cases"]
    rr = cases["round-robin"]["phases"]["speedup-0.5x"]["hit_rate_counters"]
    ph = cases["prefix-hash"]["phases"]["speedup-0.5x"]["hit_rate_counters"]
    assert ph > rr


def test_the_replicas_started_once_and_every_policy_started_cold(fleet_run: Path) -> None:
    check_replicas_started_once(fleet_run, POLICIES, 38)


def test_each_replicas_kv_events_are_the_models_blocks(fleet_run: Path) -> None:
    # Behind the gateway each response names its replica; behind vllm-router each replica's
    # own request log does. Either way each replica's recorded events are compared with the
    # model's blocks for its own requests, and match them.
    verdicts = {
        v["case"]: v for v in read_report(fleet_run)["verdicts"] if "KV events" in v["check"]
    }
    assert set(verdicts) == set(POLICIES)
    for name in POLICIES:
        assert verdicts[name]["passed"] is True, verdicts[name]
    for name in ("round-robin", "prefix-hash"):
        for k in (0, 1):
            rows = (
                (fleet_run / "cases" / name / ("replicas/1" if k else ""))
                .joinpath("kv_events.jsonl")
                .read_text()
                .splitlines()
            )
            assert json.loads(rows[0])["event"] == "cleared"  # the reset opens each file
    kv = read_report(fleet_run)["details"]["cases"]["prefix-hash"]["kv_events"]
    assert sum(r["requests"] for r in kv) == 38


def test_a_replica_killed_mid_run_moves_its_keys_and_loses_no_request(fleet_run: Path) -> None:
    # The failover case (prefix-hash once more, replica 1 stopped 8 s in): every planned
    # request ends once, and the gateway's open breaker moved replica 1's keys to replica 0.
    report = read_report(fleet_run)
    (verdict,) = [v for v in report["verdicts"] if v["case"] == "prefix-hash-killed"
                  and "killed" in v["check"]]  # fmt: skip
    assert verdict["passed"] is True, verdict
    kill = report["details"]["cases"]["prefix-hash-killed"]["kill"]
    assert kill["replica"] == 1 and kill["lost"] == [] and kill["counted_twice"] == []
    assert kill["completed"] + kill["failed"] + kill["not_sent"] == kill["planned"]
    assert kill["remapped_keys"] and all(
        (k["home"], k["moved_to"]) == (1, [0]) for k in kill["remapped_keys"]
    )
    decisions = [
        json.loads(line)
        for line in (fleet_run / "cases/prefix-hash-killed/routing_decisions.jsonl")
        .read_text()
        .splitlines()
    ]
    moved = {d["key"] for d in decisions if d["why"] == "passed-on-breaker"}
    assert moved == {k["key"] for k in kill["remapped_keys"]}
    assert "keys remapped" in (fleet_run / "report.md").read_text()


def test_validate_accepts_the_fleet_run(fleet_run: Path) -> None:
    assert loadgen("validate", str(fleet_run), timeout=120).returncode in (0, 4)
