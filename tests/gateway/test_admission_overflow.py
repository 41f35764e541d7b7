"""Admission control: bounded in-flight and queue; overflow is 429 with Retry-After."""

from __future__ import annotations

import asyncio

import aiohttp
import pytest

from gateway.admission import AdmissionController, AdmissionRejected
from gateway.app import running_gateway
from tests.support.gateway_fakes import fake_upstream, gateway_config, metric_value

pytestmark = [pytest.mark.asyncio, pytest.mark.timeout(30)]

PLAIN = {"model": "m", "prompt": [1], "max_tokens": 1}


async def test_queue_hands_slots_over_in_fifo_order_and_rejects_overflow() -> None:
    changes: list[tuple[int, int]] = []
    adm = AdmissionController(1, 2, 5.0, on_change=lambda i, q: changes.append((i, q)))
    await adm.acquire()
    order: list[str] = []

    async def waiter(name: str) -> None:
        await adm.acquire()
        order.append(name)

    first = asyncio.ensure_future(waiter("a"))
    second = asyncio.ensure_future(waiter("b"))
    await asyncio.sleep(0)
    assert (adm.in_flight, adm.queued) == (1, 2)
    with pytest.raises(AdmissionRejected) as rejected:
        await adm.acquire()
    assert rejected.value.reason == "queue_full"
    adm.release()
    await asyncio.wait_for(first, 1.0)
    assert order == ["a"]
    assert (adm.in_flight, adm.queued) == (1, 1)
    adm.release()
    await asyncio.wait_for(second, 1.0)
    adm.release()
    assert order == ["a", "b"]
    assert (adm.in_flight, adm.queued) == (0, 0)
    assert changes[-1] == (0, 0)


async def test_queue_wait_times_out_and_cancelled_waiters_leave_the_queue() -> None:
    adm = AdmissionController(1, 5, 0.1)
    await adm.acquire()
    with pytest.raises(AdmissionRejected) as rejected:
        await adm.acquire()
    assert rejected.value.reason == "queue_timeout"
    assert adm.queued == 0
    task = asyncio.ensure_future(adm.acquire())
    await asyncio.sleep(0.01)
    assert adm.queued == 1
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert adm.queued == 0
    adm.release()
    assert adm.in_flight == 0


async def test_overflow_answers_429_with_retry_after() -> None:
    fake = fake_upstream(ttft_s=0.6)
    async with fake.serve():
        config = gateway_config(
            fake.url, admission={"max_in_flight": 1, "max_queue": 1, "retry_after_s": 3}
        )
        async with running_gateway(config) as url, aiohttp.ClientSession() as client:

            async def send() -> tuple[int, str | None, dict]:
                async with client.post(url + "/v1/completions", json=PLAIN) as resp:
                    return resp.status, resp.headers.get("Retry-After"), await resp.json()

            running = asyncio.ensure_future(send())
            await fake.wait_for(lambda: fake.served == 1, 2.0)
            queued = asyncio.ensure_future(send())
            await asyncio.sleep(0.1)
            async with client.get(url + "/metrics") as resp:
                during = await resp.text()
            status, retry_after, body = await send()
            assert status == 429
            assert retry_after == "3"
            assert body["error"]["type"] == "overloaded"
            assert (await running)[0] == 200
            assert (await queued)[0] == 200
            async with client.get(url + "/metrics") as resp:
                after = await resp.text()
    assert fake.served == 2
    assert metric_value(during, "gateway_in_flight") == 1
    assert metric_value(during, "gateway_queue_depth") == 1
    assert metric_value(after, "gateway_rejections_total", {"reason": "queue_full"}) == 1
    assert metric_value(after, "gateway_requests_total", {"status": "429", "upstream": ""}) == 1
    assert metric_value(after, "gateway_queue_depth") == 0


async def test_queue_timeout_answers_429() -> None:
    fake = fake_upstream(ttft_s=1.0)
    async with fake.serve():
        config = gateway_config(
            fake.url, admission={"max_in_flight": 1, "max_queue": 4, "queue_timeout_s": 0.2}
        )
        async with running_gateway(config) as url, aiohttp.ClientSession() as client:
            running = asyncio.ensure_future(client.post(url + "/v1/completions", json=PLAIN))
            await fake.wait_for(lambda: fake.served == 1, 2.0)
            async with client.post(url + "/v1/completions", json=PLAIN) as resp:
                assert resp.status == 429
                assert resp.headers["Retry-After"] == "1"
                assert "queue_timeout" in (await resp.json())["error"]["message"]
            first = await running
            assert first.status == 200
            first.release()
