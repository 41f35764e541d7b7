"""The routing seam: a policy sees the request and every upstream, and picks among the
breaker-admitted ones the request has not tried; the pool reserves what it picks."""

from __future__ import annotations

import json
from collections.abc import Sequence

import aiohttp
import pytest

from gateway.app import create_app, running_app
from gateway.config import BreakerConfig
from gateway.routing import Decision
from gateway.routing import Router as PolicyRouter
from gateway.state import STATE_KEY
from gateway.upstream_choice import Pick, PolicyRouting, Router, RouteRequest
from gateway.upstreams import Upstream, UpstreamPool
from tests.support.gateway_fakes import closed_port, fake_upstream, gateway_config

pytestmark = pytest.mark.timeout(30)


class LastAdmitted:
    """Picks the last admitted upstream and remembers what it was offered."""

    def __init__(self) -> None:
        self.offers: list[tuple[RouteRequest, list[str], list[str]]] = []

    def choose(
        self, request: RouteRequest, upstreams: Sequence[Upstream], admitted: Sequence[Upstream]
    ) -> Pick:
        self.offers.append((request, [u.url for u in upstreams], [u.url for u in admitted]))
        chosen = admitted[-1]
        return Pick(chosen, Decision(list(upstreams).index(chosen), "last", None, "matched"))


def test_the_policy_is_offered_only_admitted_untried_upstreams_and_its_pick_is_reserved() -> None:
    policy = LastAdmitted()
    pool = UpstreamPool.from_urls(["a", "b", "c"], BreakerConfig(consecutive_failures=1))
    router = Router(pool, policy)
    lease = router.choose(0.0, RouteRequest("POST", "/v1/completions", b"{}"))
    assert lease is not None and lease.upstream.url == "c"
    assert [u.in_flight for u in pool.upstreams] == [0, 0, 1]
    lease.upstream.breaker.record_failure(lease.attempt, 0.0)  # c's breaker opens
    pool.release(lease)
    second = router.choose(1.0, RouteRequest(tried=frozenset({"b"})))
    assert second is not None and second.upstream.url == "a"
    assert policy.offers[1][1:] == (["a", "b", "c"], ["a"])
    assert router.choose(1.0, RouteRequest(tried=frozenset({"a", "b"}))) is None
    assert len(policy.offers) == 2  # nothing admitted: the policy is not asked


def test_least_loaded_breaks_ties_round_robin_after_the_last_pick() -> None:
    ups = [Upstream(url, None) for url in ("a", "b", "c")]  # type: ignore[arg-type]
    policy = PolicyRouting(PolicyRouter("least-loaded", 3))
    request = RouteRequest()

    def pick(admitted: list[Upstream]) -> str:
        return policy.choose(request, ups, admitted).upstream.url

    assert [pick(ups) for _ in range(4)] == ["a", "b", "c", "a"]
    ups[2].in_flight = 1  # c is busier: skipped although it is next in turn
    assert [pick(ups) for _ in range(2)] == ["b", "a"]
    assert pick([ups[2]]) == "c"  # only c admitted


@pytest.mark.asyncio
async def test_the_handler_routes_with_the_request_and_retries_with_the_refused_one_tried() -> None:
    dead = f"http://127.0.0.1:{closed_port()}"
    live = fake_upstream()
    body = {"model": "m", "prompt": [1, 2, 3], "max_tokens": 2}
    async with live.serve():
        # live first, dead last: the policy picks dead, is refused, then offered live only.
        app = create_app(gateway_config(live.url, dead))
        policy = LastAdmitted()
        app[STATE_KEY].router.policy = policy
        async with (
            running_app(app) as url,
            aiohttp.ClientSession() as client,
            client.post(f"{url}/v1/completions?x=1", json=body) as resp,
        ):
            await resp.read()
            assert resp.status == 200
    first, retry = policy.offers
    assert (first[0].method, first[0].path, json.loads(first[0].body)) == (
        "POST",
        "/v1/completions?x=1",
        body,
    )
    assert first[0].tried == frozenset() and first[2] == [live.url, dead]
    assert retry[0].tried == frozenset({dead}) and retry[2] == [live.url]
