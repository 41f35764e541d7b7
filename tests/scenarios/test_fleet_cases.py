"""A fleet run's cases: one per routing policy, N replicas behind each policy's router,
sharing one start, starting cold, scraping every replica; bad policy lists are refused."""

from __future__ import annotations

from pathlib import Path

import pytest

from scenarios.fleet_cases import (
    FleetHitRateGain,
    FleetKillAccounted,
    FleetKvEventsMatch,
    FleetParams,
    FleetTtftLower,
    fleet_cases,
    fleet_checks,
    fleet_comparisons,
    parse_kill,
    parse_routing,
)
from scenarios.plan import PhaseSpec
from scenarios.trace_replay import TraceReplayParams
from server.config import ServerConfig

SAMPLE = Path(__file__).parents[1] / "fixtures/traces/mooncake_fast25_synthetic_trace.jsonl"


def test_routing_lists_become_cases_in_order_with_their_routers() -> None:
    params = FleetParams(replicas=2, routing="prefix-hash,vllm-router:cache_aware,round-robin")
    server = ServerConfig(model="m", kv_cache_bytes=2**30)
    cases = fleet_cases(params, server, "", "cache 1GiB")
    assert [c.name for c in cases] == ["prefix-hash", "vllm-router-cache_aware", "round-robin"]
    assert [c.gateway.routing if c.gateway else None for c in cases] == [
        "prefix-hash", None, "round-robin",
    ]  # fmt: skip
    assert cases[1].proxy is not None and cases[1].proxy.policy == "cache_aware"
    assert {(c.replicas, c.scrape_replicas, c.reset_prefix_cache) for c in cases} == {
        (2, True, True)
    }
    # One server config for all: the executor starts the replicas once for every policy.
    assert len({c.model_dump_json(include={"server"}) for c in cases}) == 1
    assert cases[0].server is not None and cases[0].server.env["VLLM_SERVER_DEV_MODE"] == "1"
    assert cases[2].label == "cache 1GiB, 2 replicas, round-robin"


def test_a_fleet_without_routing_runs_the_gateways_three_policies() -> None:
    names = [c.case_name for c in FleetParams(replicas=3).routing_choices()]
    assert names == ["round-robin", "least-loaded", "prefix-hash"]


@pytest.mark.parametrize(
    ("routing", "message"),
    [
        ("", "no routing policy given"),
        ("random", "unknown routing policy 'random'"),
        ("prefix-hash,prefix-hash", "routing policy given twice: prefix-hash"),
    ],
)
def test_bad_routing_lists_are_refused(routing: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_routing(routing)


def test_routing_needs_two_replicas() -> None:
    with pytest.raises(ValueError, match="needs --replicas 2"):
        FleetParams(replicas=1, routing="round-robin")


def test_a_kill_is_k_at_t_on_a_replica_that_exists_behind_the_gateway() -> None:
    kill = parse_kill("1@12.5")
    assert (kill.replica, kill.at_s, kill.restart) == (1, 12.5, False)
    for bad in ("1", "x@3", "1@0", "0@3"):
        with pytest.raises(ValueError, match="expected K@T"):
            parse_kill(bad)
    with pytest.raises(ValueError, match="there is no replica 2"):
        TraceReplayParams(trace=str(SAMPLE), replicas=2, kill_replica="2@5")


@pytest.mark.parametrize(
    ("replicas", "kill", "why"),
    [
        (1, "1@5", "--kill-replica 1@5: with --replicas 1 no replica can be killed (replica 0 "
         "never is; give --replicas 2 or more)"),
        (2, "2@5", "--kill-replica 2@5: there is no replica 2; with --replicas 2 only replica 1 "
         "can be killed"),
        (4, "4@5", "--kill-replica 4@5: there is no replica 4; with --replicas 4 only a replica "
         "from 1 to 3 can be killed"),
    ],
)  # fmt: skip
def test_a_kill_of_a_replica_that_is_not_there_says_which_can_be_killed(
    replicas: int, kill: str, why: str
) -> None:
    with pytest.raises(ValueError) as info:
        TraceReplayParams(trace=str(SAMPLE), replicas=replicas, kill_replica=kill)
    assert why in str(info.value)
    with pytest.raises(ValueError, match="needs a gateway policy in --routing"):
        TraceReplayParams(trace=str(SAMPLE), replicas=2, routing="vllm-router:random",
                          kill_replica="1@5")  # fmt: skip


def test_a_kill_adds_a_failover_case_after_the_policies() -> None:
    routing = "round-robin,prefix-hash,vllm-router:cache_aware"
    params = TraceReplayParams(trace=str(SAMPLE), replicas=2, kill_replica="1@5", routing=routing)
    first = PhaseSpec.model_construct(name="speedup-1x", faults=())
    second = PhaseSpec.model_construct(name="speedup-2x", faults=())
    server = ServerConfig(model="m", kv_cache_bytes=2**30)
    cases = params.with_kill_case(fleet_cases(params, server, "", "c"), (first, second))
    # The last gateway policy once more, its first phase killing replica 1 at 5 s.
    names = ["round-robin", "prefix-hash", "vllm-router-cache_aware", "prefix-hash-killed"]
    assert [c.name for c in cases] == names
    failover = cases[-1]
    assert failover.gateway is not None and failover.gateway.routing == "prefix-hash"
    assert [p.faults for p in failover.phases] == [(parse_kill("1@5"),), ()]
    assert failover.label == "c, 2 replicas, prefix-hash, replica 1 killed at 5 s"
    # Its server and replicas are the others': the executor keeps them for it.
    assert len({c.model_dump_json(include={"server"}) for c in cases}) == 1
    # The failover case is judged on its accounting, the others on their KV events.
    assert fleet_checks(cases) == [
        *(FleetKvEventsMatch(case=n) for n in names[:3]),
        FleetKillAccounted(case="prefix-hash-killed", phase="speedup-1x"),
    ]


def test_prefix_hash_is_compared_with_round_robin_when_both_run() -> None:
    both = FleetParams(replicas=2, routing="round-robin,vllm-router:random,prefix-hash")
    checks = fleet_comparisons(both, "", ["speedup-1x"])
    assert [(type(c), c.case, c.baseline, c.phase) for c in checks] == [
        (FleetHitRateGain, "prefix-hash", "round-robin", "speedup-1x"),
        (FleetTtftLower, "prefix-hash", "round-robin", "speedup-1x"),
    ]
    assert isinstance(checks[0], FleetHitRateGain) and checks[0].min_gain == 0.2
    # Several cache sizes: each size's own pair, by the cases' prefix.
    assert {c.case for c in fleet_comparisons(both, "4GiB", ["p"])} == {"4GiB-prefix-hash"}
    # Without one of the two there is nothing to compare.
    assert fleet_comparisons(FleetParams(replicas=2, routing="prefix-hash"), "", ["p"]) == []
    assert fleet_comparisons(FleetParams(replicas=1), "", ["p"]) == []
