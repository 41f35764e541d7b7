"""Routing: least in-flight among admitted upstreams; traffic leaves an open breaker."""

from __future__ import annotations

import asyncio
from collections import Counter

import aiohttp
import pytest

from gateway.app import running_gateway
from gateway.breaker import BreakerState
from gateway.config import BreakerConfig
from gateway.upstream_choice import Router
from gateway.upstreams import UpstreamPool
from tests.support.gateway_fakes import fake_upstream, gateway_config, metric_value

pytestmark = pytest.mark.timeout(30)


def test_pool_picks_least_in_flight_and_skips_open_breakers() -> None:
    pool = UpstreamPool.from_urls(["a", "b", "c"], BreakerConfig(consecutive_failures=1))
    router = Router(pool)
    leases = [router.choose(0.0) for _ in range(3)]
    assert [lease.upstream.url for lease in leases if lease] == ["a", "b", "c"]
    assert leases[1] is not None
    pool.release(leases[1])  # b now has fewest in flight
    b_lease = router.choose(0.0)
    assert b_lease is not None and b_lease.upstream.url == "b"
    # Open c's breaker: it gets no traffic although it will have the fewest in flight.
    c = pool.upstreams[2]
    assert leases[2] is not None
    c.breaker.record_failure(leases[2].attempt, 1.0)
    pool.release(leases[2])
    assert c.breaker.state is BreakerState.OPEN
    picks = Counter()
    for _ in range(4):
        lease = router.choose(2.0)
        assert lease is not None
        picks[lease.upstream.url] += 1
    assert picks == {"a": 2, "b": 2}
    assert pool.seconds_until_retry(2.0) == 0.0


def test_pool_returns_none_when_every_breaker_is_open() -> None:
    pool = UpstreamPool.from_urls(["a"], BreakerConfig(consecutive_failures=1, cooldown_s=4.0))
    router = Router(pool)
    lease = router.choose(0.0)
    assert lease is not None
    lease.upstream.breaker.record_failure(lease.attempt, 0.0)
    pool.release(lease)
    assert router.choose(1.0) is None
    assert pool.seconds_until_retry(1.0) == pytest.approx(3.0)


@pytest.mark.asyncio
async def test_requests_go_to_the_upstream_with_fewest_in_flight() -> None:
    a, b = fake_upstream(), fake_upstream()
    async with a.serve(), b.serve():
        config = gateway_config(a.url, b.url)
        async with running_gateway(config) as url, aiohttp.ClientSession() as client:

            async def send(delay_s: float) -> str:
                payload = {"prompt": "x", "fake_delay_s": delay_s}
                async with client.post(url + "/v1/completions", json=payload) as resp:
                    assert resp.status == 200
                    await resp.read()
                    return resp.headers["X-Gateway-Upstream"]

            slow = asyncio.ensure_future(send(1.0))
            await asyncio.sleep(0.2)
            busy = next(f.url for f in (a, b) if f.active == 1)
            quick = [await send(0.0) for _ in range(4)]
            assert await slow == busy
            other = b.url if busy == a.url else a.url
            assert quick == [other] * 4

            # Concurrent long requests spread evenly.
            spread = Counter(await asyncio.gather(*(send(0.3) for _ in range(6))))
    assert spread == {a.url: 3, b.url: 3}


@pytest.mark.asyncio
async def test_traffic_moves_off_an_upstream_whose_breaker_opened_and_returns_after_probe() -> None:
    bad, good = fake_upstream(status=500), fake_upstream()
    async with bad.serve(), good.serve():
        config = gateway_config(
            bad.url, good.url, breaker={"consecutive_failures": 2, "cooldown_s": 0.5}
        )
        async with running_gateway(config) as url, aiohttp.ClientSession() as client:

            async def send() -> int:
                async with client.post(url + "/v1/completions", json={"prompt": "x"}) as resp:
                    await resp.read()
                    return resp.status

            statuses = [await send() for _ in range(8)]
            async with client.get(url + "/metrics") as resp:
                opened = await resp.text()
            assert bad.served == 2  # alternated until its breaker opened
            assert good.served == 6
            assert statuses.count(500) == 2
            assert statuses.count(200) == 6

            bad.script.status = 200  # it recovers; after the cool-down a probe closes it
            await asyncio.sleep(0.6)
            for _ in range(4):
                assert await send() == 200
            async with client.get(url + "/metrics") as resp:
                closed = await resp.text()
    assert bad.served >= 3
    assert metric_value(opened, "gateway_breaker_state", {"upstream": bad.url}) == 1
    assert metric_value(opened, "gateway_breaker_state", {"upstream": good.url}) == 0
    assert metric_value(closed, "gateway_breaker_state", {"upstream": bad.url}) == 0
    transitions = [
        ("closed", "open"),
        ("open", "half_open"),
        ("half_open", "closed"),
    ]
    for frm, to in transitions:
        labels = {"upstream": bad.url, "from": frm, "to": to}
        assert metric_value(closed, "gateway_breaker_transitions_total", labels) == 1
    errors = {"upstream": bad.url, "kind": "status_500"}
    assert metric_value(closed, "gateway_upstream_errors_total", errors) == 2


@pytest.mark.asyncio
async def test_all_breakers_open_answers_503_with_retry_after() -> None:
    bad = fake_upstream(status=503)
    async with bad.serve():
        config = gateway_config(bad.url, breaker={"consecutive_failures": 1, "cooldown_s": 30})
        async with running_gateway(config) as url, aiohttp.ClientSession() as client:
            async with client.post(url + "/v1/completions", json={"prompt": "x"}) as resp:
                assert resp.status == 503  # the upstream's own 503, forwarded
            async with client.post(url + "/v1/completions", json={"prompt": "x"}) as resp:
                assert resp.status == 503
                assert (await resp.json())["error"]["type"] == "no_upstream"
                assert 29 <= int(resp.headers["Retry-After"]) <= 31
            async with client.get(url + "/health") as resp:
                assert resp.status == 503
                assert (await resp.json())["upstreams"][0]["breaker"] == "open"
    assert bad.served == 1


@pytest.mark.asyncio
async def test_slow_first_tokens_open_the_breaker_end_to_end() -> None:
    slow = fake_upstream(ttft_s=0.3, tokens=1)
    async with slow.serve():
        config = gateway_config(
            slow.url,
            breaker={"consecutive_failures": 2, "slow_first_token_s": 0.1, "cooldown_s": 30},
        )
        async with running_gateway(config) as url, aiohttp.ClientSession() as client:
            payload = {"prompt": "x", "stream": True}
            for _ in range(2):
                async with client.post(url + "/v1/completions", json=payload) as resp:
                    assert resp.status == 200
                    await resp.read()
            async with client.post(url + "/v1/completions", json=payload) as resp:
                assert resp.status == 503
            async with client.get(url + "/metrics") as resp:
                text = await resp.text()
    assert slow.served == 2
    hist = {"upstream": slow.url}
    assert metric_value(text, "gateway_first_token_seconds_count", hist) == 2
    assert metric_value(text, "gateway_first_token_seconds_sum", hist) >= 0.55
