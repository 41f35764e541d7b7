"""Safe defaults: loopback bind, only proxied routes, body-size limit, hop-by-hop stripping."""

from __future__ import annotations

import aiohttp
import pytest
from multidict import CIMultiDict

from gateway.config import GatewayConfig
from gateway.headers import (
    client_response_headers,
    strip_hop_by_hop,
    upstream_request_headers,
)
from tests.support.gateway_fakes import fake_upstream, gateway_config

pytestmark = pytest.mark.timeout(30)


def test_default_bind_is_loopback() -> None:
    assert GatewayConfig(upstreams=("http://127.0.0.1:8000",)).host == "127.0.0.1"


def test_strip_hop_by_hop_removes_fixed_list_proxy_star_and_connection_named() -> None:
    headers = CIMultiDict(
        [
            ("Connection", "keep-alive, X-Secret"),
            ("Connection", "x-other"),
            ("Keep-Alive", "timeout=5"),
            ("Proxy-Authorization", "Basic abc"),
            ("Proxy-Whatever", "1"),
            ("TE", "trailers"),
            ("Trailer", "X-Checksum"),
            ("Transfer-Encoding", "chunked"),
            ("Upgrade", "h2c"),
            ("X-Secret", "s"),
            ("X-Other", "o"),
            ("Content-Type", "application/json"),
            ("X-Repeat", "1"),
            ("X-Repeat", "2"),
        ]
    )
    assert list(strip_hop_by_hop(headers).items()) == [
        ("Content-Type", "application/json"),
        ("X-Repeat", "1"),
        ("X-Repeat", "2"),
    ]


def test_request_and_response_header_rewrites() -> None:
    request = CIMultiDict(
        [
            ("Host", "gateway:1"),
            ("Content-Length", "12"),
            ("Accept-Encoding", "gzip"),
            ("X-Forwarded-For", "10.0.0.1"),
            ("Authorization", "Bearer t"),
        ]
    )
    assert dict(upstream_request_headers(request, "127.0.0.1")) == {
        "Authorization": "Bearer t",
        "Accept-Encoding": "identity",
        "X-Forwarded-For": "10.0.0.1, 127.0.0.1",
    }
    response = CIMultiDict([("Content-Length", "3"), ("Content-Type", "a/b"), ("TE", "x")])
    assert dict(client_response_headers(response)) == {"Content-Type": "a/b"}


@pytest.mark.asyncio
async def test_hop_by_hop_headers_are_stripped_in_both_directions() -> None:
    from gateway.app import running_gateway

    hop_response_headers = {
        "Connection": "X-Upstream-Hop",
        "X-Upstream-Hop": "must not reach the client",
        "Proxy-Authenticate": "Basic",
        "Keep-Alive": "timeout=9",
        "X-Kept": "yes",
    }
    fake = fake_upstream(headers=hop_response_headers)
    async with fake.serve():
        config = gateway_config(fake.url)
        async with running_gateway(config) as url, aiohttp.ClientSession() as client:
            request_headers = {
                "Connection": "X-Client-Hop",
                "X-Client-Hop": "must not reach the upstream",
                "Keep-Alive": "timeout=5",
                "Proxy-Authorization": "Basic abc",
                "TE": "trailers",
                "Trailer": "X-Checksum",
                "X-Request-Id": "r-1",
            }
            async with client.post(
                url + "/v1/completions", json={"prompt": "x"}, headers=request_headers
            ) as resp:
                assert resp.status == 200
                got = {k.lower(): v for k, v in resp.headers.items()}
                await resp.read()
    seen = fake.seen[0].headers
    for name in ("x-client-hop", "keep-alive", "proxy-authorization", "te", "trailer"):
        assert name not in seen, name
    assert seen.get("connection", "keep-alive").lower() in ("keep-alive", "close")
    assert seen["x-request-id"] == "r-1"
    assert seen["x-forwarded-for"] == "127.0.0.1"
    for name in ("x-upstream-hop", "proxy-authenticate", "keep-alive"):
        assert name not in got, name
    assert "x-upstream-hop" not in got.get("connection", "").lower()
    assert got["x-kept"] == "yes"


@pytest.mark.asyncio
async def test_oversized_body_answers_413_and_never_reaches_upstream() -> None:
    from gateway.app import running_gateway

    fake = fake_upstream()
    async with fake.serve():
        config = gateway_config(fake.url, max_body_bytes=1024)
        async with running_gateway(config) as url, aiohttp.ClientSession() as client:
            big = b'{"prompt": "' + b"x" * 2048 + b'"}'
            async with client.post(url + "/v1/completions", data=big) as resp:
                assert resp.status == 413
                assert (await resp.json())["error"]["type"] == "request_too_large"

            async def chunked():  # no Content-Length: the limit is enforced while reading
                for _ in range(4):
                    yield b"y" * 512

            async with client.post(url + "/v1/completions", data=chunked()) as resp:
                assert resp.status == 413
            small = b'{"prompt": "' + b"x" * 100 + b'"}'
            async with client.post(url + "/v1/completions", data=small) as resp:
                assert resp.status == 200
    assert fake.served == 1


@pytest.mark.asyncio
async def test_only_proxied_routes_and_methods_exist() -> None:
    from gateway.app import running_gateway

    fake = fake_upstream()
    async with (
        fake.serve(),
        running_gateway(gateway_config(fake.url)) as url,
        aiohttp.ClientSession() as client,
    ):
        async with client.post(url + "/v1/embeddings", json={}) as resp:
            assert resp.status == 404
        async with client.get(url + "/v1/completions") as resp:
            assert resp.status == 405
        async with client.get(url + "/v1/models") as resp:
            assert resp.status == 200
    assert [s.path for s in fake.seen] == ["/v1/models"]


def test_forwarding_headers_a_client_sets_never_pass_as_given() -> None:
    request = CIMultiDict(
        [
            ("Host", "gateway.example:8080"),
            ("X-Forwarded-For", "10.0.0.1"),
            ("X-Forwarded-Host", "evil.example"),
            ("X-Forwarded-Proto", "https"),
            ("X-Forwarded-Port", "443"),
            ("X-Real-IP", "10.9.9.9"),
            ("Forwarded", "for=10.9.9.9;host=evil.example"),
        ]
    )
    # The peer 127.0.0.1 is appended; the host is the Host received; the claims are dropped.
    assert dict(upstream_request_headers(request, "127.0.0.1", "gateway.example:8080", "http")) == {
        "Accept-Encoding": "identity",
        "X-Forwarded-For": "10.0.0.1, 127.0.0.1",
        "X-Forwarded-Host": "gateway.example:8080",
        "X-Forwarded-Proto": "http",
    }
    # No known peer and no host: nothing vouches for the client's list, so nothing is sent.
    assert dict(upstream_request_headers(request, None)) == {"Accept-Encoding": "identity"}


@pytest.mark.asyncio
async def test_the_upstream_sees_the_peer_appended_and_the_host_the_gateway_received() -> None:
    from gateway.app import running_gateway

    fake = fake_upstream()
    async with (
        fake.serve(),
        running_gateway(gateway_config(fake.url)) as url,
        aiohttp.ClientSession() as client,
    ):
        headers = {
            "X-Forwarded-For": "10.0.0.1",
            "X-Forwarded-Host": "evil.example",
            "X-Real-IP": "10.9.9.9",
            "Forwarded": "for=10.9.9.9",
        }
        async with client.post(
            f"{url}/v1/completions", json={"prompt": "x", "max_tokens": 1}, headers=headers
        ) as response:
            assert response.status == 200
            await response.read()
    seen = {k.lower(): v for k, v in fake.seen[-1].headers.items()}
    gateway_host = url.removeprefix("http://")  # the Host aiohttp sent to the gateway
    assert seen["x-forwarded-for"] == "10.0.0.1, 127.0.0.1"
    assert seen["x-forwarded-host"] == gateway_host
    assert seen["x-forwarded-proto"] == "http"
    assert "x-real-ip" not in seen and "forwarded" not in seen


def test_gateway_log_lines_mask_url_passwords() -> None:
    import logging

    from gateway.cli import _RedactingFormatter

    record = logging.LogRecord(
        "gateway.proxy", logging.WARNING, __file__, 1, "cannot connect to %s", ("http://u:pw@h:1",),
        None,
    )  # fmt: skip
    assert _RedactingFormatter("%(message)s").format(record) == "cannot connect to http://u:***@h:1"
