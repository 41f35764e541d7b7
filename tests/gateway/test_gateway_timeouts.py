"""Layered timeouts: connect, first token, idle, total -> 504 JSON or an SSE error event."""

from __future__ import annotations

import json
import time

import aiohttp
import pytest

from gateway.app import running_gateway
from tests.support.gateway_fakes import (
    closed_port,
    fake_upstream,
    gateway_config,
    sse_events,
    unaccepting_listener,
)

pytestmark = [pytest.mark.asyncio, pytest.mark.timeout(30)]

STREAM = {"model": "m", "prompt": [1, 2], "max_tokens": 8, "stream": True}
PLAIN = {"model": "m", "prompt": [1, 2], "max_tokens": 8}


async def post(client: aiohttp.ClientSession, url: str, payload: dict) -> tuple[int, bytes, float]:
    started = time.monotonic()
    async with client.post(url + "/v1/completions", json=payload) as resp:
        body = await resp.read()
        return resp.status, body, time.monotonic() - started


async def test_connect_timeout_answers_504() -> None:
    with unaccepting_listener() as port:
        config = gateway_config(f"http://127.0.0.1:{port}", timeouts={"connect_s": 0.3})
        async with running_gateway(config) as url, aiohttp.ClientSession() as client:
            status, body, elapsed_s = await post(client, url, STREAM)
    assert status == 504
    error = json.loads(body)["error"]
    assert error["type"] == "gateway_timeout"
    assert error["timeout"] == "connect"
    assert error["message"] == "connect timeout after 0.3 s"
    assert 0.25 <= elapsed_s < 2.0


async def test_connection_refused_on_closed_port_answers_502_at_once() -> None:
    config = gateway_config(f"http://127.0.0.1:{closed_port()}")
    async with running_gateway(config) as url, aiohttp.ClientSession() as client:
        status, body, elapsed_s = await post(client, url, PLAIN)
    assert status == 502
    assert json.loads(body)["error"]["type"] == "bad_gateway"
    assert json.loads(body)["error"]["message"] == "cannot connect to the upstream"
    assert elapsed_s < 1.0


async def test_first_token_timeout_answers_504_and_cancels_upstream() -> None:
    fake = fake_upstream(ttft_s=5.0)
    async with fake.serve():
        config = gateway_config(fake.url, timeouts={"first_token_s": 0.3})
        async with running_gateway(config) as url, aiohttp.ClientSession() as client:
            status, body, elapsed_s = await post(client, url, STREAM)
            await fake.wait_for(lambda: fake.seen[0].disconnected_at_s is not None, 2.0)
    assert status == 504
    error = json.loads(body)["error"]
    assert error["timeout"] == "first_token"
    assert error["message"] == "first_token timeout after 0.3 s"
    assert 0.25 <= elapsed_s < 1.5
    assert not fake.seen[0].completed
    assert fake.seen[0].chunks_sent == 0


async def test_idle_timeout_mid_stream_sends_sse_error_event() -> None:
    fake = fake_upstream(tokens=3, itl_s=3.0)
    async with fake.serve():
        config = gateway_config(fake.url, timeouts={"idle_s": 0.3})
        async with running_gateway(config) as url, aiohttp.ClientSession() as client:
            status, body, elapsed_s = await post(client, url, STREAM)
            await fake.wait_for(lambda: fake.seen[0].disconnected_at_s is not None, 2.0)
    assert status == 200  # headers were already sent when the stream stalled
    events = sse_events(body)
    assert json.loads(events[0])["choices"][0]["text"] == "tok0 "
    error = json.loads(events[-1])["error"]
    assert error["timeout"] == "idle"
    assert error["code"] == 504
    assert len(events) == 2
    assert body.endswith(b"\n\n")
    assert 0.25 <= elapsed_s < 1.5
    assert fake.seen[0].chunks_sent == 1


async def test_total_deadline_mid_stream_sends_sse_error_event() -> None:
    fake = fake_upstream(tokens=50, itl_s=0.1)
    async with fake.serve():
        config = gateway_config(fake.url, timeouts={"idle_s": 1.0, "total_s": 0.55})
        async with running_gateway(config) as url, aiohttp.ClientSession() as client:
            status, body, elapsed_s = await post(client, url, STREAM)
            await fake.wait_for(lambda: fake.seen[0].disconnected_at_s is not None, 2.0)
    assert status == 200
    events = sse_events(body)
    error = json.loads(events[-1])["error"]
    assert error["timeout"] == "total"
    assert error["message"] == "total timeout after 0.55 s"
    assert 3 <= len(events) - 1 <= 7  # about five chunks made it before the deadline
    assert 0.5 <= elapsed_s < 1.5
    assert not fake.seen[0].completed


async def test_total_deadline_before_any_answer_gives_504() -> None:
    fake = fake_upstream(ttft_s=5.0)
    async with fake.serve():
        config = gateway_config(fake.url, timeouts={"total_s": 0.4})
        async with running_gateway(config) as url, aiohttp.ClientSession() as client:
            status, body, elapsed_s = await post(client, url, PLAIN)
            await fake.wait_for(lambda: fake.seen[0].disconnected_at_s is not None, 2.0)
    assert status == 504
    assert json.loads(body)["error"]["timeout"] == "total"
    assert 0.35 <= elapsed_s < 1.5


async def test_non_streaming_request_is_not_cut_by_the_first_token_limit() -> None:
    fake = fake_upstream(ttft_s=0.6)
    async with fake.serve():
        config = gateway_config(fake.url, timeouts={"first_token_s": 0.2})
        async with running_gateway(config) as url, aiohttp.ClientSession() as client:
            status, body, _ = await post(client, url, PLAIN)
    assert status == 200
    assert json.loads(body)["choices"][0]["text"] == "tok0 tok1 tok2 "
