"""The happy path: streaming and non-streaming completions, /v1/models, /health."""

from __future__ import annotations

import json
import time

import aiohttp
import pytest

from gateway.app import running_gateway
from tests.support.gateway_fakes import fake_upstream, gateway_config, sse_events

pytestmark = [pytest.mark.asyncio, pytest.mark.timeout(30)]


async def test_streaming_completion_is_relayed_chunk_by_chunk() -> None:
    fake = fake_upstream(tokens=4, itl_s=0.15)
    async with (
        fake.serve(),
        running_gateway(gateway_config(fake.url)) as url,
        aiohttp.ClientSession() as client,
    ):
        payload = {"model": "m", "prompt": [1, 2, 3], "max_tokens": 4, "stream": True}
        started = time.monotonic()
        async with client.post(url + "/v1/completions", json=payload) as resp:
            assert resp.status == 200
            assert resp.headers["Content-Type"].startswith("text/event-stream")
            assert resp.headers["X-Gateway-Upstream"] == fake.url
            arrivals: list[float] = []
            body = b""
            async for chunk in resp.content.iter_any():
                arrivals.append(time.monotonic() - started)
                body += chunk
    events = sse_events(body)
    assert events[-1] == "[DONE]"
    assert [json.loads(e)["choices"][0]["text"] for e in events[:-1]] == [
        "tok0 ",
        "tok1 ",
        "tok2 ",
        "tok3 ",
    ]
    # Chunks arrive spread out (not buffered): first one well before the last.
    assert arrivals[-1] - arrivals[0] >= 0.3
    assert fake.seen[0].body == payload
    assert fake.seen[0].completed


async def test_non_streaming_chat_completion_is_relayed() -> None:
    fake = fake_upstream(tokens=2)
    async with (
        fake.serve(),
        running_gateway(gateway_config(fake.url)) as url,
        aiohttp.ClientSession() as client,
    ):
        payload = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
        async with client.post(url + "/v1/chat/completions", json=payload) as resp:
            assert resp.status == 200
            message = {"role": "assistant", "content": "tok0 tok1 "}  # the fake's, as vLLM's
            assert await resp.json() == {"choices": [{"message": message}]}
    assert fake.seen[0].path == "/v1/chat/completions"


async def test_models_and_upstream_errors_pass_through() -> None:
    fake = fake_upstream()
    async with (
        fake.serve(),
        running_gateway(gateway_config(fake.url)) as url,
        aiohttp.ClientSession() as client,
    ):
        async with client.get(url + "/v1/models") as resp:
            assert resp.status == 200
            assert (await resp.json())["data"][0]["id"] == "m"
        fake.script.status = 400
        async with client.post(url + "/v1/completions", json={"prompt": "x"}) as resp:
            assert resp.status == 400
            assert (await resp.json())["error"]["code"] == 400


async def test_health_checks_the_upstream_and_reports_it() -> None:
    fake = fake_upstream()
    async with (
        fake.serve(),
        running_gateway(gateway_config(fake.url)) as url,
        aiohttp.ClientSession() as client,
    ):
        assert url.startswith("http://127.0.0.1:")
        async with client.get(url + "/health") as resp:
            assert resp.status == 200
            body = await resp.json()
    assert fake.health_checks == 1  # the gateway's /health asked the upstream's, live
    assert body == {
        "status": "ok",
        "in_flight": 0,
        "queued": 0,
        "upstreams": [
            {
                "url": fake.url,
                "breaker": "closed",
                "in_flight": 0,
                "reached": True,  # by the live check; no request was proxied yet
                "check": {"ok": True, "detail": None},
                "last_success_age_s": None,
                "last_failure_age_s": None,
                "last_failure": None,
                "retry_after_s": 0.0,
            }
        ],
    }


async def test_upstream_cookies_are_not_replayed_to_later_requests() -> None:
    # The upstream sets a cookie on a host-named URL (aiohttp's jar ignores cookies from bare
    # IP addresses, so "localhost" is what would expose a jar). A proxy serving many clients
    # must not keep it: the second request reaches the upstream with no Cookie header, while
    # a cookie the client sends itself passes through unchanged.
    fake = fake_upstream(headers={"Set-Cookie": "session=abc; Path=/"})
    async with fake.serve():
        upstream = fake.url.replace("127.0.0.1", "localhost")
        async with (
            running_gateway(gateway_config(upstream)) as url,
            aiohttp.ClientSession(cookie_jar=aiohttp.DummyCookieJar()) as client,
        ):
            payload = {"model": "m", "prompt": [1], "max_tokens": 1}
            for headers in ({}, {}, {"Cookie": "mine=1"}):
                async with client.post(
                    url + "/v1/completions", json=payload, headers=headers
                ) as resp:
                    assert resp.status == 200
                    assert resp.headers["Set-Cookie"] == "session=abc; Path=/"
    assert [seen.headers.get("cookie") for seen in fake.seen] == [None, None, "mine=1"]
