"""A fleet run's cases: one per routing policy, N replicas behind each policy's router,
sharing one start, starting cold, scraping every replica; bad policy lists are refused."""

from __future__ import annotations

import pytest

from scenarios.fleet_cases import FleetParams, fleet_cases, parse_routing
from server.config import ServerConfig


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
        ("vllm-router:kv_aware", "cannot run here yet: the router needs each replica's KV"),
        ("prefix-hash,prefix-hash", "routing policy given twice: prefix-hash"),
    ],
)
def test_bad_routing_lists_are_refused(routing: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_routing(routing)


def test_routing_needs_two_replicas() -> None:
    with pytest.raises(ValueError, match="needs --replicas 2"):
        FleetParams(replicas=1, routing="round-robin")
