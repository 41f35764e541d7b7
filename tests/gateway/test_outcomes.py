"""What counts as an upstream failure, end to end through the gateway, against fake upstreams.

Each test sets the breaker's consecutive-failure threshold and counts by hand which requests
fail: once the count reaches the threshold, the next request meets an open breaker (503, and
the upstream never sees it).
"""

from __future__ import annotations

import json

import aiohttp
import pytest

from gateway.app import running_gateway
from gateway.outcomes import Verdict, is_admission_rejection, is_error_body, status_verdict
from tests.support.gateway_fakes import fake_upstream, gateway_config, metric_value, sse_events

pytestmark = pytest.mark.timeout(30)

STREAM = {"model": "m", "prompt": [1, 2], "max_tokens": 4, "stream": True}
PLAIN = {"model": "m", "prompt": [1, 2], "max_tokens": 4}
TOKEN = b'data: {"choices":[{"index":0,"text":"tok0 "}]}\n\n'
ERROR = b'data: {"error":{"message":"x","code":500}}\n\n'
DONE = b"data: [DONE]\n\n"


@pytest.mark.parametrize(
    ("status", "verdict"),
    [
        (200, Verdict.SUCCESS),
        (307, Verdict.SUCCESS),
        (400, Verdict.SUCCESS),
        (404, Verdict.SUCCESS),
        (429, Verdict.NO_VERDICT),
        (500, Verdict.FAILURE),
        (501, Verdict.SUCCESS),  # request-dependent (vLLM's NotImplementedError)
        (502, Verdict.FAILURE),
        (503, Verdict.FAILURE),
        (504, Verdict.FAILURE),
        (505, Verdict.SUCCESS),
        (599, Verdict.FAILURE),
    ],
)
def test_status_verdicts(status: int, verdict: Verdict) -> None:
    assert status_verdict(status) is verdict


def test_error_body() -> None:
    assert is_error_body(b'{"error": {"message": "x", "code": 500}}')
    assert not is_error_body(b'{"choices": [{"text": "\\"error\\""}]}')
    assert not is_error_body(b'{"error": null, "choices": []}')
    assert not is_error_body(b"not json")


async def _send(
    client: aiohttp.ClientSession, url: str, payload: dict
) -> tuple[int, bytes, str | None]:
    async with client.post(url + "/v1/completions", json=payload) as resp:
        return resp.status, await resp.read(), resp.headers.get("Content-Type")


async def _metrics(client: aiohttp.ClientSession, url: str) -> str:
    async with client.get(url + "/metrics") as resp:
        return await resp.text()


@pytest.mark.asyncio
async def test_an_error_event_inside_a_200_stream_opens_the_breaker() -> None:
    fake = fake_upstream(raw_writes=(TOKEN, ERROR, DONE))
    async with fake.serve():
        config = gateway_config(fake.url, breaker={"consecutive_failures": 2, "cooldown_s": 30})
        async with running_gateway(config) as url, aiohttp.ClientSession() as client:
            first = await _send(client, url, STREAM)  # failure 1 of 2
            second = await _send(client, url, STREAM)  # failure 2 of 2: opens
            third = await _send(client, url, STREAM)  # meets the open breaker
            metrics = await _metrics(client, url)
    for status, body, _ in (first, second):
        assert status == 200
        assert body == TOKEN + ERROR + DONE  # relayed unchanged
    assert third[0] == 503
    assert json.loads(third[1])["error"]["type"] == "no_upstream"
    assert fake.served == 2
    up = {"upstream": fake.url}
    assert metric_value(metrics, "gateway_breaker_state", up) == 1
    assert (
        metric_value(metrics, "gateway_upstream_errors_total", {**up, "kind": "error_event"}) == 2
    )


@pytest.mark.asyncio
@pytest.mark.parametrize(
    "writes",
    [
        (TOKEN, ERROR[:17], ERROR[17:], DONE),  # the error event split across two reads
        (TOKEN, b"event: error\ndata: upstream trouble\n\n", DONE),  # named error event
        (TOKEN, b"event: error\r\n", b'data: {"oops": 1}\r\n\r\n', DONE),  # CRLF, split
    ],
)
async def test_error_events_are_found_however_they_arrive(writes: tuple[bytes, ...]) -> None:
    # A 50 ms gap between writes puts each write in its own read on the gateway side.
    fake = fake_upstream(raw_writes=writes, itl_s=0.05)
    async with fake.serve():
        config = gateway_config(fake.url, breaker={"consecutive_failures": 1, "cooldown_s": 30})
        async with running_gateway(config) as url, aiohttp.ClientSession() as client:
            status, body, _ = await _send(client, url, STREAM)  # failure 1 of 1: opens
            after = await _send(client, url, STREAM)
    assert status == 200
    assert body == b"".join(writes)
    assert after[0] == 503
    assert fake.served == 1


@pytest.mark.asyncio
async def test_healthy_streams_keep_the_breaker_closed() -> None:
    fake = fake_upstream(tokens=2)
    async with fake.serve():
        config = gateway_config(fake.url, breaker={"consecutive_failures": 1})
        async with running_gateway(config) as url, aiohttp.ClientSession() as client:
            answers = [await _send(client, url, STREAM) for _ in range(3)]
            metrics = await _metrics(client, url)
    assert [status for status, _, _ in answers] == [200, 200, 200]
    assert fake.served == 3
    assert metric_value(metrics, "gateway_breaker_state", {"upstream": fake.url}) == 0


@pytest.mark.asyncio
async def test_a_stream_that_ends_without_done_fails_and_the_client_is_told() -> None:
    fake = fake_upstream(tokens=2, send_done=False)
    async with fake.serve():
        config = gateway_config(fake.url, breaker={"consecutive_failures": 1, "cooldown_s": 30})
        async with running_gateway(config) as url, aiohttp.ClientSession() as client:
            status, body, _ = await _send(client, url, STREAM)
            after = await _send(client, url, STREAM)
    assert status == 200
    events = sse_events(body)
    assert [json.loads(e)["choices"][0]["text"] for e in events[:2]] == ["tok0 ", "tok1 "]
    error = json.loads(events[2])["error"]
    assert (error["code"], error["message"]) == (502, "the upstream stream ended before [DONE]")
    assert len(events) == 3
    assert after[0] == 503


@pytest.mark.asyncio
async def test_a_streaming_request_answered_without_an_event_stream_is_a_502() -> None:
    fake = fake_upstream(content_type="application/json")
    async with fake.serve():
        config = gateway_config(fake.url, breaker={"consecutive_failures": 1, "cooldown_s": 30})
        async with running_gateway(config) as url, aiohttp.ClientSession() as client:
            status, body, _ = await _send(client, url, STREAM)
            after = await _send(client, url, STREAM)
    assert status == 502
    message = json.loads(body)["error"]["message"]
    assert message == "the upstream answered a streaming request without an event stream"
    assert after[0] == 503


@pytest.mark.asyncio
async def test_a_200_json_error_body_is_relayed_and_counted_as_a_failure() -> None:
    error = b'{"error": {"message": "engine dead", "code": 500}}'
    fake = fake_upstream(json_body=error)
    async with fake.serve():
        config = gateway_config(fake.url, breaker={"consecutive_failures": 1, "cooldown_s": 30})
        async with running_gateway(config) as url, aiohttp.ClientSession() as client:
            status, body, _ = await _send(client, url, PLAIN)
            after = await _send(client, url, PLAIN)
    assert (status, body) == (200, error)
    assert after[0] == 503


@pytest.mark.asyncio
@pytest.mark.parametrize(("status", "opens"), [(400, False), (501, False), (500, True)])
async def test_client_errors_and_501_do_not_count_5xx_do(status: int, opens: bool) -> None:
    fake = fake_upstream(status=status)
    async with fake.serve():
        config = gateway_config(fake.url, breaker={"consecutive_failures": 1, "cooldown_s": 30})
        async with running_gateway(config) as url, aiohttp.ClientSession() as client:
            statuses = [(await _send(client, url, PLAIN))[0] for _ in range(2)]
    # Threshold 1: a counted failure opens the breaker, so the second request gets 503.
    assert statuses == ([status, 503] if opens else [status, status])
    assert fake.served == (1 if opens else 2)


@pytest.mark.asyncio
async def test_an_oversized_response_is_a_502_failure() -> None:
    fake = fake_upstream(json_body=b'{"choices": [{"text": "' + b"x" * 4096 + b'"}]}')
    async with fake.serve():
        config = gateway_config(
            fake.url,
            max_response_bytes=1024,
            breaker={"consecutive_failures": 1, "cooldown_s": 30},
        )
        async with running_gateway(config) as url, aiohttp.ClientSession() as client:
            status, body, _ = await _send(client, url, PLAIN)
            after = await _send(client, url, PLAIN)
    assert status == 502
    assert json.loads(body)["error"]["message"] == (
        "the upstream response is larger than 1024 bytes"
    )
    assert after[0] == 503


# vLLM's admission rejection (--max-num-queued-reqs / --max-num-queued-tokens): a 503 typed
# "Service Unavailable", no Retry-After; a failing engine's retryable 503 is typed otherwise.
ADMISSION = b'{"error": {"message": "busy", "type": "Service Unavailable", "code": 503}}'


@pytest.mark.parametrize(
    ("status", "body", "rejection"),
    [
        (503, ADMISSION, True),
        (503, b'{"error": {"type": "ServiceUnavailableError", "code": 503}}', False),
        (503, b"<html>down</html>", False),
        (500, ADMISSION, False),
        (429, ADMISSION, False),  # already no verdict by its status
    ],
)
def test_admission_rejection_rule(status: int, body: bytes, rejection: bool) -> None:
    assert is_admission_rejection(status, body) is rejection


@pytest.mark.asyncio
@pytest.mark.parametrize(
    ("error_type", "headers", "opens"),
    [
        ("Service Unavailable", {}, False),  # vLLM's admission 503, no Retry-After
        ("Service Unavailable", {"Retry-After": "soon"}, False),  # a bad wait: still one
        ("X", {"Retry-After": "2"}, True),  # a 503 with a wait, untyped: maintenance, say
        ("X", {}, True),  # a plain 503: the upstream failed
    ],
)
async def test_admission_rejections_never_open_the_breaker(
    error_type: str, headers: dict[str, str], opens: bool
) -> None:
    """Three 503s against a threshold of 2 consecutive failures: counted as failures, the
    third request meets the open breaker (the upstream sees 2); as admission rejections all
    three reach the upstream and the breaker stays closed."""
    fake = fake_upstream(status=503, error_type=error_type, headers=headers)
    async with fake.serve():
        config = gateway_config(fake.url, breaker={"consecutive_failures": 2, "cooldown_s": 30})
        async with running_gateway(config) as url, aiohttp.ClientSession() as client:
            answers = [await _send(client, url, STREAM) for _ in range(3)]
            metrics = await _metrics(client, url)
    assert [status for status, _, _ in answers] == [503, 503, 503]
    assert fake.served == (2 if opens else 3)
    opened = metric_value(metrics, "gateway_breaker_transitions_total", {"to": "open"})
    assert opened == (1 if opens else 0)
    rejections = metric_value(metrics, "gateway_upstream_rejections_total")
    assert rejections == (0 if opens else 3)


@pytest.mark.asyncio
async def test_an_admission_refusal_inside_a_200_stream_leaves_the_breaker_closed() -> None:
    """vLLM 0.32 under load sends its admission refusal as an error event once the stream
    has begun: three of them against a threshold of 2 all reach the upstream."""
    refusal = (
        b'data: {"error": {"message": "busy", "type": "Service Unavailable", "code": 503}}\n\n'
    )
    fake = fake_upstream(raw_writes=(refusal, DONE))
    async with fake.serve():
        config = gateway_config(fake.url, breaker={"consecutive_failures": 2, "cooldown_s": 30})
        async with running_gateway(config) as url, aiohttp.ClientSession() as client:
            answers = [await _send(client, url, STREAM) for _ in range(3)]
            metrics = await _metrics(client, url)
    assert [(status, body) for status, body, _ in answers] == [(200, refusal + DONE)] * 3
    assert fake.served == 3
    assert metric_value(metrics, "gateway_breaker_transitions_total", {"to": "open"}) == 0
