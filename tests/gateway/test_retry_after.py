"""Retry-After: parsing (pure), what reaches the client, and the 503 of an open breaker."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from email.utils import format_datetime

import aiohttp
import pytest

from gateway.app import running_gateway
from gateway.breaker import BreakerState
from gateway.config import BreakerConfig
from gateway.retry_after import MAX_RETRY_AFTER_S, format_retry_after, parse_retry_after
from gateway.upstream_choice import Router
from gateway.upstreams import UpstreamPool
from tests.support.gateway_fakes import fake_upstream, gateway_config, metric_value

pytestmark = pytest.mark.timeout(30)

NOW = datetime(2026, 11, 30, 12, 0, 0, tzinfo=UTC)


def http_date(when: datetime) -> str:
    return format_datetime(when, usegmt=True)  # IMF-fixdate, e.g. "Mon, 30 Nov 2026 12:00:30 GMT"


@pytest.mark.parametrize(
    ("value", "expected_s"),
    [
        ("120", 120.0),
        (http_date(NOW + timedelta(seconds=30)), 30.0),
        (http_date(NOW - timedelta(hours=1)), 0.0),  # past date: retry now
        ("abc", None),
        ("-5", None),
        (" 7 ", 7.0),  # optional whitespace around a field value
        ("0", 0.0),
        ("+5", None),
        ("1.5", None),  # delay-seconds is 1*DIGIT
        ("", None),
        ("Mon, 31 Nov 2026 12:00:00 GMT", None),  # no 31 November
        ("Monday, 30-Nov-26 12:01:00 GMT", 60.0),  # obsolete RFC 850 form, 60 s ahead
        ("Mon Nov 30 12:02:00 2026", 120.0),  # asctime form (no zone: GMT), 120 s ahead
        ("9" * 400, MAX_RETRY_AFTER_S),  # absurd but well-formed: capped, no overflow
    ],
)
def test_parse_retry_after_table(value: str, expected_s: float | None) -> None:
    assert parse_retry_after(value, NOW) == expected_s


def test_format_rounds_up_to_whole_seconds() -> None:
    assert format_retry_after(29.2) == "30"
    assert format_retry_after(0.0) == "0"
    assert format_retry_after(0.0, minimum_s=1) == "1"


def test_seconds_until_retry_is_the_longer_of_cool_down_and_the_upstream_request() -> None:
    pool = UpstreamPool.from_urls(["a"], BreakerConfig(consecutive_failures=1, cooldown_s=30.0))
    router = Router(pool)
    upstream = pool.upstreams[0]
    lease = router.choose(100.0)
    assert lease is not None
    upstream.note_retry_after(100.0, 120.0)  # asks for 120 s at t=100: until t=220
    upstream.breaker.record_failure(lease.attempt, 100.0)  # open until t=130
    pool.release(lease)
    assert pool.seconds_until_retry(110.0) == pytest.approx(110.0)  # max(20, 110)
    upstream.note_retry_after(110.0, 5.0)  # the last valid request wins: until t=115
    assert pool.seconds_until_retry(110.0) == pytest.approx(20.0)  # max(20, 5)


async def _post(client: aiohttp.ClientSession, url: str) -> tuple[int, str | None, dict]:
    async with client.post(url + "/v1/completions", json={"prompt": "x"}) as resp:
        return resp.status, resp.headers.get("Retry-After"), await resp.json()


@pytest.mark.asyncio
async def test_upstream_429s_pass_through_and_leave_the_breaker_closed() -> None:
    busy = fake_upstream(status=429, headers={"Retry-After": "120"})
    async with busy.serve():
        config = gateway_config(busy.url, breaker={"consecutive_failures": 2})
        async with running_gateway(config) as url, aiohttp.ClientSession() as client:
            answers = [await _post(client, url) for _ in range(3)]
            async with client.get(url + "/metrics") as resp:
                metrics = await resp.text()
    # Three 429s against a threshold of 2 consecutive failures: had they counted, the third
    # request would have met an open breaker (503, no upstream call). All three reached it.
    assert [(status, retry_after) for status, retry_after, _ in answers] == [(429, "120")] * 3
    assert busy.served == 3
    state = metric_value(metrics, "gateway_breaker_state", {"upstream": busy.url})
    assert state == BreakerState.CLOSED
    assert metric_value(metrics, "gateway_breaker_transitions_total") == 0


@pytest.mark.asyncio
@pytest.mark.parametrize(
    ("sent", "forwarded"),
    [
        ("abc", None),
        ("-5", None),
        ("Mon, 01 Jan 2001 00:00:00 GMT", "0"),  # a past date: retry now
        ("in an hour", {"3599", "3600"}),
    ],
)
async def test_invalid_retry_after_is_dropped_and_a_date_becomes_seconds(
    sent: str, forwarded: str | set[str] | None
) -> None:
    if sent == "in an hour":  # made here, not at collection: the test may run seconds later
        sent = http_date(datetime.now(UTC) + timedelta(seconds=3600))
    busy = fake_upstream(status=429, headers={"Retry-After": sent})
    async with (
        busy.serve(),
        running_gateway(gateway_config(busy.url)) as url,
        aiohttp.ClientSession() as client,
    ):
        status, retry_after, _ = await _post(client, url)
    assert status == 429
    if isinstance(forwarded, set):  # the date is whole seconds, the gateway's now is not
        assert retry_after in forwarded
    else:
        assert retry_after == forwarded


@pytest.mark.asyncio
@pytest.mark.parametrize(
    ("upstream_asks", "cooldown_s", "expected"),
    [
        ("120", 30.0, "120"),  # the upstream's 120 s beats the 30 s cool-down
        ("5", 30.0, "30"),  # the cool-down beats the upstream's 5 s
    ],
)
async def test_503_of_an_open_breaker_carries_the_longer_wait(
    upstream_asks: str, cooldown_s: float, expected: str
) -> None:
    down = fake_upstream(status=503, headers={"Retry-After": upstream_asks})
    async with down.serve():
        config = gateway_config(
            down.url, breaker={"consecutive_failures": 1, "cooldown_s": cooldown_s}
        )
        async with running_gateway(config) as url, aiohttp.ClientSession() as client:
            first = await _post(client, url)  # the upstream's own 503: opens the breaker
            second = await _post(client, url)  # the gateway's 503: nobody takes traffic
    assert first[:2] == (503, upstream_asks)
    status, retry_after, body = second
    assert (status, body["error"]["type"]) == (503, "no_upstream")
    # Rounded up to whole seconds: ceil(120 - e) = 120 and ceil(30 - e) = 30 for the few ms e
    # between the two requests.
    assert retry_after == expected
    assert down.served == 1
