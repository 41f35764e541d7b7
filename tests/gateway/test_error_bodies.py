"""The gateway's own error bodies (502/504 JSON, SSE error events) name no upstream address."""

from __future__ import annotations

import json
from urllib.parse import urlsplit

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

pytestmark = pytest.mark.timeout(30)

STREAM = {"model": "m", "prompt": [1, 2], "max_tokens": 4, "stream": True}
PLAIN = {"model": "m", "prompt": [1, 2], "max_tokens": 4}


def assert_no_address(text: str, upstream: str) -> None:
    parts = urlsplit(upstream)
    for leak in (upstream, str(parts.hostname), str(parts.port), "http://", "Errno"):
        assert leak not in text, (leak, text)


async def post(url: str, payload: dict) -> tuple[int, str]:
    async with (
        aiohttp.ClientSession() as client,
        client.post(url + "/v1/completions", json=payload) as resp,
    ):
        return resp.status, await resp.text()


@pytest.mark.asyncio
async def test_a_refused_connection_502_names_no_address() -> None:
    dead = f"http://127.0.0.1:{closed_port()}"
    async with running_gateway(gateway_config(dead)) as url:
        status, text = await post(url, PLAIN)
    assert status == 502
    assert json.loads(text)["error"]["message"] == "cannot connect to the upstream"
    assert_no_address(text, dead)


@pytest.mark.asyncio
async def test_a_connect_timeout_504_names_no_address() -> None:
    with unaccepting_listener() as port:
        upstream = f"http://127.0.0.1:{port}"
        async with running_gateway(gateway_config(upstream, timeouts={"connect_s": 0.3})) as url:
            status, text = await post(url, PLAIN)
    assert status == 504
    assert_no_address(text, upstream)


@pytest.mark.asyncio
async def test_an_unparseable_upstream_answer_is_a_502_that_names_no_address() -> None:
    # A response header beyond aiohttp's 8190-byte limit: the client raises an error whose
    # repr carries the request URL; none of it may reach the client.
    fake = fake_upstream(headers={"X-Huge": "x" * 10_000})
    async with fake.serve(), running_gateway(gateway_config(fake.url)) as url:
        status, text = await post(url, PLAIN)
    assert status == 502
    assert json.loads(text)["error"]["message"] == "the upstream request failed"
    assert_no_address(text, fake.url)


@pytest.mark.asyncio
async def test_a_stream_that_breaks_off_ends_with_an_error_event_naming_no_address() -> None:
    fake = fake_upstream(tokens=2, drop_after_chunks=2)
    async with fake.serve(), running_gateway(gateway_config(fake.url)) as url:
        status, text = await post(url, STREAM)
    assert status == 200  # the headers went out with the first token
    events = sse_events(text.encode())
    error = json.loads(events[-1])["error"]
    assert (error["code"], error["message"]) == (502, "the upstream stream broke off")
    assert len(events) == 3  # two tokens, then the gateway's error event
    assert_no_address(text, fake.url)
