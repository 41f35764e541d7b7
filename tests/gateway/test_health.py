"""``/health``: live checks of the upstreams; ok only when one takes traffic and answers."""

from __future__ import annotations

import aiohttp
import pytest

from gateway.app import running_gateway
from tests.support.gateway_fakes import (
    closed_port,
    fake_upstream,
    gateway_config,
    unaccepting_listener,
)

pytestmark = pytest.mark.timeout(30)


async def health(client: aiohttp.ClientSession, url: str) -> tuple[int, dict]:
    async with client.get(url + "/health") as resp:
        return resp.status, await resp.json()


@pytest.mark.asyncio
async def test_a_gateway_whose_only_upstream_was_never_reached_is_not_healthy() -> None:
    dead = f"http://127.0.0.1:{closed_port()}"
    async with (
        running_gateway(gateway_config(dead)) as url,
        aiohttp.ClientSession() as client,
    ):
        status, body = await health(client, url)
    assert status == 503
    assert body["status"] == "no_upstream"
    (upstream,) = body["upstreams"]
    assert upstream["url"] == dead
    assert upstream["breaker"] == "closed"  # no traffic yet: the breaker alone would say ok
    assert upstream["reached"] is False
    # The cause named: nothing listens on the port, so the connect was refused.
    assert upstream["check"] == {
        "ok": False,
        "detail": "cannot connect: ConnectError: All connection attempts failed (ECONNREFUSED)",
    }
    assert upstream["last_success_age_s"] is None


@pytest.mark.asyncio
async def test_an_upstream_that_does_not_answer_in_time_is_not_healthy() -> None:
    with unaccepting_listener() as port:
        config = gateway_config(f"http://127.0.0.1:{port}", health_check_timeout_s=0.3)
        async with running_gateway(config) as url, aiohttp.ClientSession() as client:
            status, body = await health(client, url)
    assert status == 503
    assert body["upstreams"][0]["check"] == {"ok": False, "detail": "no answer within 0.3 s"}


@pytest.mark.asyncio
async def test_an_upstream_whose_health_fails_is_not_healthy() -> None:
    sick = fake_upstream(health_status=503)  # e.g. vLLM with a dead engine
    async with (
        sick.serve(),
        running_gateway(gateway_config(sick.url)) as url,
        aiohttp.ClientSession() as client,
    ):
        status, body = await health(client, url)
    assert status == 503
    assert body["upstreams"][0]["check"] == {"ok": False, "detail": "HTTP 503"}
    assert body["upstreams"][0]["reached"] is False


@pytest.mark.asyncio
async def test_one_live_upstream_of_two_is_enough() -> None:
    dead = f"http://127.0.0.1:{closed_port()}"
    live = fake_upstream()
    async with (
        live.serve(),
        running_gateway(gateway_config(dead, live.url)) as url,
        aiohttp.ClientSession() as client,
    ):
        status, body = await health(client, url)
    assert status == 200
    assert [(u["url"], u["reached"]) for u in body["upstreams"]] == [
        (dead, False),
        (live.url, True),
    ]


@pytest.mark.asyncio
async def test_an_open_breaker_is_not_healthy_even_if_the_upstream_answers_its_health() -> None:
    failing = fake_upstream(status=500, headers={"Retry-After": "60"})
    async with failing.serve():
        config = gateway_config(failing.url, breaker={"consecutive_failures": 1, "cooldown_s": 30})
        async with running_gateway(config) as url, aiohttp.ClientSession() as client:
            async with client.post(url + "/v1/completions", json={"prompt": "x"}) as resp:
                assert resp.status == 500  # failure 1 of 1: open
            status, body = await health(client, url)
    assert status == 503
    (upstream,) = body["upstreams"]
    assert upstream["breaker"] == "open"
    assert upstream["check"]["ok"] is True
    assert upstream["reached"] is True  # by the live check; the exchange itself failed
    assert upstream["last_failure"] == "status_500"
    assert upstream["last_failure_age_s"] >= 0
    assert upstream["last_success_age_s"] is None
    assert upstream["retry_after_s"] == 0.0  # a 500's Retry-After means nothing (RFC 9110)


@pytest.mark.asyncio
async def test_a_successful_exchange_is_reported() -> None:
    fake = fake_upstream()
    async with (
        fake.serve(),
        running_gateway(gateway_config(fake.url)) as url,
        aiohttp.ClientSession() as client,
    ):
        async with client.post(url + "/v1/completions", json={"prompt": "x"}) as resp:
            assert resp.status == 200
        status, body = await health(client, url)
    assert status == 200
    assert body["upstreams"][0]["last_success_age_s"] >= 0
    assert body["upstreams"][0]["last_failure"] is None
