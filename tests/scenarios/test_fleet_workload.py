"""The built-in fleet workload (scenarios.fleet.workload) and what the fleet model predicts
for it on 2 replicas of the embedded model's 1 GiB (146 blocks of 128 tokens, 145 usable),
requests one after another, derived by hand:

- 35 groups × 5 blocks = 175 blocks > 145: one replica cannot hold every group, two can;
- request k is of group k mod 35 and (round-robin) goes to replica k mod 2. 35 is odd, so
  replica 0 serves groups 0, 2, …, 34, 1, 3, …: every group, each visit 34 other groups
  (170 blocks) after the last one: LRU has evicted it. Round-robin hits nothing: 0;
- prefix-hash keeps a group on one replica; each replica holds its share (26 groups at most
  here, 130 blocks + the running request's own block ≤ 145), so every request after its
  group's first (70 of 105) hits the group's 5 blocks: 70 × 640 ÷ (105 × 704) = 0.60606;
- one cache of 290 blocks (pooled) holds everything: the same 0.60606; one replica alone
  (single) sees every group cyclically: 0;
- vllm-router's ``cache_aware`` keys a request by its tokens; its group's 640 of 704 (0.91)
  match the worker that served the group, a new group matches nothing (0.3 or less) and goes
  to the least-loaded worker. One at a time every load ties at 0, so every group goes to the
  router's first worker, which cannot hold them: 0. Two at a time (a closed loop of 2),
  request k ≥ 2 of the first round starts while k − 1 runs: the other replica, k mod 2;
  later rounds follow their group. Even groups (18, 90 blocks) on one replica, odd ones (17,
  85 blocks) on the other: both fit, and every repeat hits: 0.60606 again, 54 / 51 requests;
- vllm-router's ``kv_aware`` costs a replica (n + its pending prefill tokens) × (its requests
  in flight + 1), n = 704 for a prompt found nowhere, 64 for one whose group's 640 tokens it
  holds. One at a time every new group ties at 704 and goes to the first worker, which
  cannot hold them all, so no repeat finds its group: 0, 105 / 0 requests. Two at a time (a
  closed loop, no first tokens: a prompt is pending until its request ends), request k
  starts while k − 1 runs on one replica, costing there at least (64 + 704) × 2 = 1536,
  above the idle replica's 704 at most: request k goes to the other replica, k mod 2, as
  round-robin: every group on both replicas in turn, 0.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from scenarios.fleet import workload
from scenarios.fleet.model import predict_fleet
from scenarios.fleet.requests import closed_loop_events, trace_fleet_requests
from scenarios.prefix_cache_model import capacity_blocks_for_tokens
from scenarios.traces import load_trace

ONE_GIB_TOKENS = 18_688  # the embedded model's 1 GiB cache, as vLLM reports it
POLICIES = ["round-robin", "least-loaded", "prefix-hash", "vllm-router:round_robin"]


def test_the_workload_is_35_groups_visited_in_turn_three_times() -> None:
    lines = [json.loads(x) for x in workload.fleet_workload_jsonl().splitlines()]
    assert len(lines) == 105
    assert lines[0] == {"timestamp": 0, "input_length": 704, "output_length": 4,
                        "hash_ids": [0, 1, 2, 3, 4, 1_000_000]}  # fmt: skip
    assert lines[36]["hash_ids"][:5] == [5, 6, 7, 8, 9]  # request 36: group 1 again
    assert lines[104]["timestamp"] == 62_400
    groups = {tuple(x["hash_ids"][:5]) for x in lines}
    assert len(groups) == 35 and len({b for g in groups for b in g}) == 175
    trace = workload.fleet_workload_trace()
    assert trace.path == workload.BUILTIN_FLEET_WORKLOAD and trace.block_tokens == 128
    assert len(trace.requests) == 105


def test_the_builtin_trace_is_what_the_trace_parser_reads_of_its_text(tmp_path: Path) -> None:
    path = tmp_path / "fleet.jsonl"
    path.write_text(workload.fleet_workload_jsonl())
    read = load_trace(path, block_tokens=workload.BLOCK_TOKENS)
    assert dataclasses.replace(read, path=workload.BUILTIN_FLEET_WORKLOAD) == (
        workload.fleet_workload_trace()
    )


def test_round_robin_thrashes_and_prefix_hash_keeps_every_group_warm() -> None:
    capacity = capacity_blocks_for_tokens(ONE_GIB_TOKENS, 128)
    assert capacity == 145
    requests = trace_fleet_requests(workload.fleet_workload_trace(), 128)
    events = closed_loop_events(len(requests), 1)
    model = predict_fleet(requests, 2, capacity, 128, POLICIES, events)
    rates = {p.policy: p.low.hit_rate for p in model.policies}
    hand = 70 * 640 / (105 * 704)
    assert rates == {
        "round-robin": 0.0,
        "least-loaded": 0.0,  # one request at a time: ties broken by rotation, as round-robin
        "prefix-hash": pytest.approx(hand),
        "vllm-router:round_robin": 0.0,
    }
    assert model.pooled == pytest.approx(hand)
    assert (model.single, model.spread.hit_rate) == (0.0, 0.0)
    rr = next(p for p in model.policies if p.policy == "round-robin").low
    assert rr.requests_per_replica() == [53, 52]
    ph = next(p for p in model.policies if p.policy == "prefix-hash").low
    assert max(ph.requests_per_replica()) <= 26 * 3  # no replica holds more than 26 groups


def test_cache_aware_keeps_groups_apart_only_when_requests_overlap() -> None:
    capacity = capacity_blocks_for_tokens(ONE_GIB_TOKENS, 128)
    requests = trace_fleet_requests(workload.fleet_workload_trace(), 128)
    policy = ["vllm-router:cache_aware"]
    alone = predict_fleet(requests, 2, capacity, 128, policy, closed_loop_events(105, 1))
    ca = alone.policies[0]
    assert (ca.low.hit_rate, ca.high.hit_rate) == (0.0, 0.0)
    assert sorted(ca.low.requests_per_replica()) == [0, 105]
    pairs = predict_fleet(requests, 2, capacity, 128, policy, closed_loop_events(105, 2))
    ca = pairs.policies[0]
    assert ca.low.hit_rate == ca.high.hit_rate == pytest.approx(70 * 640 / (105 * 704))
    assert ca.low.requests_per_replica() == [54, 51]
    assert ca.high.requests_per_replica() == [51, 54]  # ties the other way: the mirror


def test_kv_aware_thrashes_when_its_load_term_always_decides() -> None:
    capacity = capacity_blocks_for_tokens(ONE_GIB_TOKENS, 128)
    requests = trace_fleet_requests(workload.fleet_workload_trace(), 128)
    policy = ["vllm-router:kv_aware"]
    alone = predict_fleet(requests, 2, capacity, 128, policy, closed_loop_events(105, 1))
    (kv,) = alone.policies
    assert kv.exact and kv.hit_rate == 0.0
    assert kv.low.requests_per_replica() == [105, 0]
    pairs = predict_fleet(requests, 2, capacity, 128, policy, closed_loop_events(105, 2))
    (kv,) = pairs.policies
    assert kv.exact and kv.hit_rate == 0.0
    assert kv.low.placement == tuple(k % 2 for k in range(105))
