"""A refused connection is retried once on another upstream (it never reached the first)."""

from __future__ import annotations

import aiohttp
import pytest

from gateway.app import running_gateway
from tests.support.gateway_fakes import closed_port, fake_upstream, gateway_config, metric_value

pytestmark = pytest.mark.timeout(30)

BODY = {"model": "m", "prompt": [1, 2, 3], "max_tokens": 2}


async def _post(url: str) -> tuple[int, str | None]:
    async with (
        aiohttp.ClientSession() as client,
        client.post(f"{url}/v1/completions", json=BODY) as resp,
    ):
        await resp.read()
        return resp.status, resp.headers.get("X-Gateway-Upstream")


@pytest.mark.asyncio
async def test_a_refused_connection_is_retried_on_the_healthy_upstream() -> None:
    dead = f"http://127.0.0.1:{closed_port()}"
    live = fake_upstream()
    # The dead upstream is listed first, so the first pick (round robin) goes to it.
    async with live.serve(), running_gateway(gateway_config(dead, live.url)) as url:
        status, upstream = await _post(url)
        async with aiohttp.ClientSession() as client:
            metrics = await (await client.get(f"{url}/metrics")).text()
    assert (status, upstream) == (200, live.url)
    assert metric_value(metrics, "gateway_connect_retries_total", {"upstream": live.url}) == 1
    assert metric_value(metrics, "gateway_upstream_errors_total", {"upstream": dead}) == 1


@pytest.mark.asyncio
async def test_without_retries_the_client_sees_the_502() -> None:
    dead = f"http://127.0.0.1:{closed_port()}"
    live = fake_upstream()
    async with live.serve():
        config = gateway_config(dead, live.url, connect_retries=0)
        async with running_gateway(config) as url:
            status, _ = await _post(url)
    assert status == 502


@pytest.mark.asyncio
async def test_with_only_dead_upstreams_the_last_502_is_returned() -> None:
    dead = [f"http://127.0.0.1:{closed_port()}" for _ in range(2)]
    async with running_gateway(gateway_config(*dead)) as url:
        status, _ = await _post(url)
    assert status == 502
