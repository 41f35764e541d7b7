"""/metrics: per-app registry, request counters by route/upstream/status, gauges, histogram."""

from __future__ import annotations

import aiohttp
import pytest
from prometheus_client import REGISTRY

from gateway.app import create_app, running_gateway
from gateway.state import STATE_KEY
from tests.support.gateway_fakes import fake_upstream, gateway_config, metric_value

pytestmark = [pytest.mark.asyncio, pytest.mark.timeout(30)]


async def test_metrics_expose_request_counters_gauges_and_first_token_histogram() -> None:
    fake = fake_upstream(ttft_s=0.2, tokens=2)
    async with (
        fake.serve(),
        running_gateway(gateway_config(fake.url)) as url,
        aiohttp.ClientSession() as client,
    ):
        async with client.get(url + "/metrics") as resp:
            assert resp.status == 200
            assert resp.headers["Content-Type"].startswith("text/plain")
            before = await resp.text()
        for payload in ({"prompt": "a", "stream": True}, {"prompt": "b"}):
            async with client.post(url + "/v1/completions", json=payload) as resp:
                assert resp.status == 200
                await resp.read()
        async with client.post(url + "/v1/chat/completions", json={"messages": []}) as resp:
            await resp.read()
        async with client.get(url + "/metrics") as resp:
            after = await resp.text()
    up = {"upstream": fake.url}
    assert metric_value(before, "gateway_breaker_state", up) == 0
    assert "gateway_breaker_state{" in before  # exported before any traffic
    assert metric_value(before, "gateway_requests_total") == 0
    completions = {"route": "/v1/completions", "upstream": fake.url, "status": "200"}
    chat = {"route": "/v1/chat/completions", "upstream": fake.url, "status": "200"}
    assert metric_value(after, "gateway_requests_total", completions) == 2
    assert metric_value(after, "gateway_requests_total", chat) == 1
    assert metric_value(after, "gateway_first_token_seconds_count", up) == 1  # streaming only
    assert 0.2 <= metric_value(after, "gateway_first_token_seconds_sum", up) < 1.0
    assert metric_value(after, "gateway_first_token_seconds_bucket", {**up, "le": "0.1"}) == 0
    assert metric_value(after, "gateway_first_token_seconds_bucket", {**up, "le": "0.5"}) == 1
    assert metric_value(after, "gateway_in_flight") == 0
    assert metric_value(after, "gateway_queue_depth") == 0
    assert metric_value(after, "gateway_upstream_in_flight", up) == 0
    assert metric_value(after, "gateway_client_disconnects_total") == 0


async def test_each_gateway_has_its_own_registry() -> None:
    first = create_app(gateway_config("http://127.0.0.1:9"))
    second = create_app(gateway_config("http://127.0.0.1:9"))
    first[STATE_KEY].metrics.requests.labels(route="r", upstream="u", status="200").inc()
    text_first = first[STATE_KEY].metrics.exposition().decode()
    text_second = second[STATE_KEY].metrics.exposition().decode()
    assert metric_value(text_first, "gateway_requests_total", {"route": "r"}) == 1
    assert metric_value(text_second, "gateway_requests_total", {"route": "r"}) == 0
    assert REGISTRY.get_sample_value("gateway_in_flight") is None  # global registry untouched
