"""A client disconnect closes the upstream at once, unless propagation is switched off."""

from __future__ import annotations

import asyncio
import time

import aiohttp
import pytest

from gateway.app import running_gateway
from tests.support.gateway_fakes import fake_upstream, gateway_config, metric_value

pytestmark = [pytest.mark.asyncio, pytest.mark.timeout(30)]

STREAM = {"model": "m", "prompt": [1, 2], "max_tokens": 20, "stream": True}
PLAIN = {"model": "m", "prompt": [1, 2], "max_tokens": 20}


async def scrape(client: aiohttp.ClientSession, url: str) -> str:
    async with client.get(url + "/metrics") as resp:
        return await resp.text()


async def read_one_chunk_then_hang_up(client: aiohttp.ClientSession, url: str) -> float:
    """Start a stream, read its first chunk, close the connection; return the close time."""
    resp = await client.post(url + "/v1/completions", json=STREAM)
    assert resp.status == 200
    first = await asyncio.wait_for(resp.content.readany(), 5.0)
    assert first.startswith(b"data: ")
    resp.close()  # drops the TCP connection, like a client that gave up
    return time.monotonic()


async def test_disconnect_mid_stream_closes_upstream_within_half_a_second() -> None:
    fake = fake_upstream(tokens=20, itl_s=0.2)
    async with fake.serve():
        config = gateway_config(fake.url)
        async with running_gateway(config) as url, aiohttp.ClientSession() as client:
            closed_at = await read_one_chunk_then_hang_up(client, url)
            await fake.wait_for(lambda: fake.seen[0].disconnected_at_s is not None, 2.0)
            seen = fake.seen[0]
            assert seen.disconnected_at_s is not None
            assert seen.disconnected_at_s - closed_at < 0.5
            assert not seen.completed
            assert seen.chunks_sent < 5
            await asyncio.sleep(0.05)
            text = await scrape(client, url)
    assert metric_value(text, "gateway_client_disconnects_total", {"route": "/v1/completions"}) == 1
    assert (
        metric_value(
            text,
            "gateway_upstream_aborts_total",
            {"upstream": fake.url, "reason": "client_disconnect"},
        )
        == 1
    )
    assert metric_value(text, "gateway_requests_total", {"status": "499"}) == 1
    assert metric_value(text, "gateway_in_flight") == 0


async def test_disconnect_while_waiting_for_non_streaming_answer_closes_upstream() -> None:
    fake = fake_upstream(ttft_s=3.0)
    async with fake.serve():
        config = gateway_config(fake.url)
        async with running_gateway(config) as url, aiohttp.ClientSession() as client:
            request = asyncio.ensure_future(client.post(url + "/v1/completions", json=PLAIN))
            await fake.wait_for(lambda: fake.served == 1, 2.0)
            request.cancel()  # the client gives up: its connection is closed
            closed_at = time.monotonic()
            with pytest.raises(asyncio.CancelledError):
                await request
            await fake.wait_for(lambda: fake.seen[0].disconnected_at_s is not None, 2.0)
            disconnected_at = fake.seen[0].disconnected_at_s
            assert disconnected_at is not None
            assert disconnected_at - closed_at < 0.5
            assert not fake.seen[0].completed
            text = await scrape(client, url)
    assert metric_value(text, "gateway_client_disconnects_total") == 1
    assert metric_value(text, "gateway_upstream_aborts_total", {"reason": "client_disconnect"}) == 1


async def test_without_propagation_upstream_runs_to_the_end() -> None:
    fake = fake_upstream(tokens=8, itl_s=0.1)
    async with fake.serve():
        config = gateway_config(fake.url, propagate_cancellation=False)
        async with running_gateway(config) as url, aiohttp.ClientSession() as client:
            closed_at = await read_one_chunk_then_hang_up(client, url)
            await fake.wait_for(lambda: fake.seen[0].completed, 5.0)
            seen = fake.seen[0]
            finished_at = time.monotonic()
            text = await scrape(client, url)
    assert seen.disconnected_at_s is None  # the upstream never noticed the client left
    assert seen.chunks_sent == 8
    assert finished_at - closed_at >= 0.5  # it kept generating for the remaining ~0.7 s
    assert metric_value(text, "gateway_client_disconnects_total") == 1
    assert (
        metric_value(text, "gateway_orphaned_upstream_requests_total", {"upstream": fake.url}) == 1
    )
    assert metric_value(text, "gateway_upstream_aborts_total") == 0


async def test_without_propagation_non_streaming_upstream_also_completes() -> None:
    fake = fake_upstream(ttft_s=0.8)
    async with fake.serve():
        config = gateway_config(fake.url, propagate_cancellation=False)
        async with running_gateway(config) as url, aiohttp.ClientSession() as client:
            request = asyncio.ensure_future(client.post(url + "/v1/completions", json=PLAIN))
            await fake.wait_for(lambda: fake.served == 1, 2.0)
            request.cancel()
            with pytest.raises(asyncio.CancelledError):
                await request
            await fake.wait_for(lambda: fake.seen[0].completed, 5.0)
    assert fake.seen[0].disconnected_at_s is None
