"""Behind vllm-router, the replica of each request is read from the replicas' own logs
(``analysis.replica_attribution``) and each replica's KV-cache events are then compared with
the model's blocks for the requests it served (``analysis.fleet_kv``), on a recording.

The recording (``tests/fixtures/kv_events/router_logs/``: the plan, and per case the records,
``fleet.json``, both replicas' ``kv_events.jsonl`` and ``vllm_requests.log``) is of a real run
on two embedded vLLM 0.32.0 replicas of 1 GiB (145 usable blocks of 128 tokens) behind
vllm-router 0.1.17: ``loadgen run bench --replicas 2 --routing
vllm-router:round_robin,vllm-router:cache_aware --requests 8 --concurrency 2 --input-len 300
--output-len 4 --cache 1GiB``.

By hand: as in ``test_bench_fleet_kv``, every prompt is 300 distinct token IDs, so each
request stores exactly 2 blocks of its own and nothing is hit or evicted. The logs' ``Received
request`` lines (``grep`` by eye) name, under ``round_robin``, c2-0001, -0003, -0005 and -0007
on replica 0 and the even ones on replica 1 (the first request went to replica 1, which the
model cannot know), and under ``cache_aware`` c2-0001, -0003, -0004, -0007 on replica 0 and
c2-0000, -0002, -0005, -0006 on replica 1. So each replica served 4 requests and stored 8
blocks, which its 4 ``stored`` events of 2 blocks each must be, prompt by prompt.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from analysis.fleet import FleetData
from analysis.fleet_kv import ReplicaKv, case_kv_comparison, kv_verdict
from analysis.latency import request_frame
from analysis.replica_attribution import FROM_LOGS, read_attribution
from loadgen.runformat.record_files import read_records
from scenarios.registry import plan_from_data

FIXTURE = Path(__file__).parents[1] / "fixtures" / "kv_events" / "router_logs"
CAPACITY = (145, 128)
ODD, EVEN = (
    ["c2-0001", "c2-0003", "c2-0005", "c2-0007"],
    ["c2-0000", "c2-0002", "c2-0004", "c2-0006"],
)
SERVED = {
    "vllm-router-round_robin": (ODD, EVEN),
    "vllm-router-cache_aware": (
        ["c2-0001", "c2-0003", "c2-0004", "c2-0007"], ["c2-0000", "c2-0002", "c2-0005", "c2-0006"]),
}  # fmt: skip


def _compare(cdir: Path, case: str) -> list[ReplicaKv]:
    plan = plan_from_data(json.loads((FIXTURE / "plan.json").read_text()))
    facts = json.loads((cdir / "fleet.json").read_text())
    fleet = FleetData(facts["routing"], tuple(facts["replica_urls"]), ([], []))
    frame = request_frame(read_records(cdir).records)
    return case_kv_comparison(cdir, case, plan, frame, fleet, CAPACITY)


@pytest.mark.parametrize("case", sorted(SERVED))
def test_each_replicas_log_names_the_requests_it_received(case: str) -> None:
    ids = [f"c2-{i:04d}" for i in range(8)]
    found = read_attribution(FIXTURE / "cases" / case, 2, ids)
    zero, one = SERVED[case]
    assert dict(found.replica_of) == {**dict.fromkeys(zero, 0), **dict.fromkeys(one, 1)}
    assert (dict(found.on_several), found.without_log, found.foreign) == ({}, (), 0)


@pytest.mark.parametrize("case", sorted(SERVED))
def test_the_logs_place_every_request_and_its_blocks_match_the_engines(case: str) -> None:
    result = _compare(FIXTURE / "cases" / case, case)
    got = []
    for r in result:
        c = r.comparison
        assert c is not None, r.note
        blocks = (c["stored_matched"], c["stored_predicted"], c["stored_recorded"])
        got.append((r.replica, r.requests, *blocks, c["removed_recorded"], r.stored_match))
        assert r.placed_by == FROM_LOGS
    assert got == [(0, 4, 8, 8, 8, 0, True), (1, 4, 8, 8, 8, 0, True)]
    assert kv_verdict(case, result).passed is True


def test_logs_swapped_between_the_replicas_fail_the_comparison(tmp_path: Path) -> None:
    # The counts stay 4 and 4, but each replica is now given the other's prompts: the
    # comparison is by content, so no stored block matches (no two prompts share a token
    # block) and the check fails.
    case = "vllm-router-cache_aware"
    cdir = tmp_path / case
    shutil.copytree(FIXTURE / "cases" / case, cdir)
    log0, log1 = cdir / "vllm_requests.log", cdir / "replicas/1/vllm_requests.log"
    text0 = log0.read_text()
    log0.write_text(log1.read_text())
    log1.write_text(text0)
    result = _compare(cdir, case)
    assert [(r.requests, r.stored_match) for r in result] == [(4, False), (4, False)]
    assert [r.comparison["stored_matched"] for r in result if r.comparison] == [0, 0]
    assert kv_verdict(case, result).passed is False


def test_a_replica_without_its_log_leaves_the_case_uncompared_saying_why(tmp_path: Path) -> None:
    case = "vllm-router-round_robin"
    cdir = tmp_path / case
    shutil.copytree(FIXTURE / "cases" / case, cdir)
    (cdir / "replicas/1/vllm_requests.log").unlink()
    result = _compare(cdir, case)
    why = "replica 1 has no vllm_requests.log: which requests it served is unknown: not compared"
    assert [(r.comparison, r.note) for r in result] == [(None, why), (None, why)]
    verdict = kv_verdict(case, result)
    assert verdict.passed is None
    assert verdict.detail == f"replica 0: {why}; replica 1: {why}"
