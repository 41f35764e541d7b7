"""The circuit breaker as a pure state machine, driven by fake timestamps (seconds)."""

from __future__ import annotations

import logging

import pytest

from gateway.breaker import BreakerState, CircuitBreaker, Transition
from gateway.config import BreakerConfig

pytestmark = pytest.mark.timeout(10)


def make(**overrides: object) -> tuple[CircuitBreaker, list[Transition]]:
    seen: list[Transition] = []
    defaults: dict[str, object] = {
        "consecutive_failures": 3,
        "error_rate": 0.5,
        "window_s": 10.0,
        "min_requests": 100,
        "cooldown_s": 5.0,
        "half_open_probes": 1,
    }
    config = BreakerConfig.model_validate({**defaults, **overrides})
    return CircuitBreaker(config, "up", on_transition=seen.append), seen


def fail(breaker: CircuitBreaker, now_s: float) -> None:
    attempt = breaker.try_acquire(now_s)
    assert attempt is not None
    breaker.record_failure(attempt, now_s)


def succeed(breaker: CircuitBreaker, now_s: float, first_token_s: float | None = None) -> None:
    attempt = breaker.try_acquire(now_s)
    assert attempt is not None
    breaker.record_success(attempt, now_s, first_token_s)


def test_opens_after_consecutive_failures_and_a_success_resets_the_count() -> None:
    breaker, seen = make(consecutive_failures=3)
    fail(breaker, 1.0)
    fail(breaker, 2.0)
    succeed(breaker, 3.0)
    fail(breaker, 4.0)
    fail(breaker, 5.0)
    assert breaker.state is BreakerState.CLOSED
    fail(breaker, 6.0)
    assert breaker.state is BreakerState.OPEN
    assert [(t.from_state, t.to_state, t.at_s) for t in seen] == [
        (BreakerState.CLOSED, BreakerState.OPEN, 6.0)
    ]
    assert "3 consecutive failures" in seen[0].reason


def test_open_rejects_until_cool_down_then_half_open_admits_limited_probes() -> None:
    breaker, seen = make(consecutive_failures=1, cooldown_s=5.0, half_open_probes=2)
    fail(breaker, 10.0)
    assert not breaker.admits(14.999)
    assert breaker.try_acquire(14.999) is None
    assert breaker.seconds_until_retry(12.0) == pytest.approx(3.0)
    first = breaker.try_acquire(15.0)
    second = breaker.try_acquire(15.1)
    third = breaker.try_acquire(15.2)
    assert breaker.state is BreakerState.HALF_OPEN
    assert first is not None and first.probe
    assert second is not None and second.probe
    assert third is None
    assert breaker.probes_in_flight == 2
    assert seen[-1].to_state is BreakerState.HALF_OPEN
    assert seen[-1].at_s == 15.0


def test_probe_success_closes() -> None:
    breaker, seen = make(consecutive_failures=1, cooldown_s=5.0)
    fail(breaker, 0.0)
    probe = breaker.try_acquire(5.0)
    assert probe is not None
    assert breaker.try_acquire(5.0) is None  # one probe at a time
    breaker.record_success(probe, 6.0)
    assert breaker.state is BreakerState.CLOSED
    assert [t.to_state for t in seen] == [
        BreakerState.OPEN,
        BreakerState.HALF_OPEN,
        BreakerState.CLOSED,
    ]
    # Closed again: admits freely, and the old failure is forgotten.
    assert breaker.try_acquire(6.0) is not None
    assert breaker.try_acquire(6.0) is not None


def test_probe_failure_reopens_for_a_fresh_cool_down() -> None:
    breaker, seen = make(consecutive_failures=1, cooldown_s=5.0)
    fail(breaker, 0.0)
    probe = breaker.try_acquire(5.0)
    assert probe is not None
    breaker.record_failure(probe, 7.0, "HTTP 503")
    assert breaker.state is BreakerState.OPEN
    assert seen[-1].from_state is BreakerState.HALF_OPEN
    assert "probe failed" in seen[-1].reason
    assert not breaker.admits(11.9)  # cool-down counts from the probe failure at 7.0
    assert breaker.admits(12.0)
    assert breaker.state is BreakerState.HALF_OPEN


def test_cancelled_probe_frees_its_slot_without_a_verdict() -> None:
    breaker, _ = make(consecutive_failures=1, cooldown_s=1.0)
    fail(breaker, 0.0)
    probe = breaker.try_acquire(1.0)
    assert probe is not None
    assert not breaker.admits(1.5)
    breaker.record_no_verdict(probe, 1.5)
    assert breaker.state is BreakerState.HALF_OPEN
    assert breaker.admits(1.5)


def test_stale_verdicts_do_not_move_a_half_open_breaker() -> None:
    breaker, _ = make(consecutive_failures=1, cooldown_s=1.0)
    old = breaker.try_acquire(0.0)  # admitted while closed, finishes much later
    fail(breaker, 0.5)
    probe = breaker.try_acquire(2.0)
    assert old is not None and probe is not None
    breaker.record_failure(old, 2.5)
    assert breaker.state is BreakerState.HALF_OPEN
    breaker.record_success(probe, 3.0)
    assert breaker.state is BreakerState.CLOSED


def test_error_rate_over_window_opens_once_min_requests_reached() -> None:
    breaker, seen = make(consecutive_failures=100, error_rate=0.5, window_s=10.0, min_requests=4)
    fail(breaker, 1.0)
    succeed(breaker, 2.0)
    fail(breaker, 3.0)
    assert breaker.state is BreakerState.CLOSED  # 2/3 failed but below min_requests
    succeed(breaker, 4.0)
    assert breaker.state is BreakerState.CLOSED  # a success never opens it
    fail(breaker, 5.0)  # 3 of 5 failed = 0.6 >= 0.5
    assert breaker.state is BreakerState.OPEN
    assert "error rate 0.60 over 5 requests" in seen[0].reason


def test_error_rate_forgets_results_older_than_the_window() -> None:
    breaker, _ = make(consecutive_failures=100, error_rate=0.5, window_s=10.0, min_requests=4)
    fail(breaker, 0.0)
    fail(breaker, 1.0)
    succeed(breaker, 12.0)  # the two failures are now out of the window
    succeed(breaker, 13.0)
    fail(breaker, 14.0)
    assert breaker.error_rate(14.0) == (3, pytest.approx(1 / 3))
    assert breaker.state is BreakerState.CLOSED
    fail(breaker, 15.0)  # 2 of 4 in window
    assert breaker.state is BreakerState.OPEN


def test_slow_first_tokens_count_as_failures() -> None:
    breaker, seen = make(consecutive_failures=2, slow_first_token_s=1.0)
    succeed(breaker, 1.0, first_token_s=0.4)
    succeed(breaker, 2.0, first_token_s=1.5)
    assert breaker.state is BreakerState.CLOSED
    succeed(breaker, 3.0, first_token_s=0.9)  # fast again: resets the run
    succeed(breaker, 4.0, first_token_s=2.0)
    succeed(breaker, 5.0, first_token_s=3.0)
    assert breaker.state is BreakerState.OPEN
    assert "slow first token 3.000 s" in seen[0].reason


def test_slow_first_token_fails_a_probe() -> None:
    breaker, _ = make(consecutive_failures=1, cooldown_s=1.0, slow_first_token_s=1.0)
    fail(breaker, 0.0)
    probe = breaker.try_acquire(1.0)
    assert probe is not None
    breaker.record_success(probe, 3.0, first_token_s=2.0)
    assert breaker.state is BreakerState.OPEN


def test_every_transition_is_logged(caplog: pytest.LogCaptureFixture) -> None:
    breaker, _ = make(consecutive_failures=1, cooldown_s=1.0)
    with caplog.at_level(logging.INFO, logger="gateway.breaker"):
        fail(breaker, 0.0)
        probe = breaker.try_acquire(1.0)
        assert probe is not None
        breaker.record_success(probe, 1.5)
    messages = [r.getMessage() for r in caplog.records if r.name == "gateway.breaker"]
    assert messages == [
        "breaker up: closed -> open at 0.000 s (1 consecutive failures (failure))",
        "breaker up: open -> half_open at 1.000 s (cool-down elapsed)",
        "breaker up: half_open -> closed at 1.500 s (probe succeeded)",
    ]


def test_half_open_is_stamped_when_the_cool_down_ended_not_when_asked() -> None:
    breaker, seen = make(consecutive_failures=1, cooldown_s=5.0)
    fail(breaker, 10.0)
    assert breaker.poll(40.0) is BreakerState.HALF_OPEN  # first asked 25 s after it elapsed
    assert (seen[-1].to_state, seen[-1].at_s) == (BreakerState.HALF_OPEN, 15.0)  # 10 + 5


def test_stream_verdict_waits_for_the_end_but_a_slow_first_token_is_a_failure_at_once() -> None:
    breaker, seen = make(consecutive_failures=1, slow_first_token_s=1.0)
    stream = breaker.try_acquire(0.0)
    assert stream is not None
    same = breaker.record_first_token(stream, 0.5, first_token_s=0.5)
    assert same == stream  # closed and fast: nothing decided until the stream ends
    assert breaker.state is BreakerState.CLOSED
    slow = breaker.try_acquire(1.0)
    assert slow is not None
    assert breaker.record_first_token(slow, 3.0, first_token_s=2.0) is None  # the verdict
    assert breaker.state is BreakerState.OPEN
    assert "slow first token 2.000 s" in seen[0].reason


def test_a_probes_first_token_closes_the_breaker_and_its_later_failure_reopens_at_once() -> None:
    # Threshold 3 in the closed state; the probe is on probation, so 1 failure re-opens.
    breaker, seen = make(consecutive_failures=3, cooldown_s=5.0)
    for t in (0.0, 0.1, 0.2):
        fail(breaker, t)
    probe = breaker.try_acquire(5.2)
    assert probe is not None and probe.probe
    probation = breaker.record_first_token(probe, 5.5, first_token_s=0.3)
    assert probation is not None and probation.probation and not probation.probe
    assert breaker.state is BreakerState.CLOSED  # closed before the (long) stream ends
    other = breaker.try_acquire(5.6)  # and admits freely again
    assert other is not None
    breaker.record_failure(probation, 9.0, "error_event")
    assert breaker.state is BreakerState.OPEN
    assert [(t.from_state.name, t.to_state.name, t.at_s) for t in seen] == [
        ("CLOSED", "OPEN", 0.2),
        ("OPEN", "HALF_OPEN", 5.2),
        ("HALF_OPEN", "CLOSED", 5.5),
        ("CLOSED", "OPEN", 9.0),
    ]
    assert seen[2].reason == "probe's first token arrived"
    assert seen[3].reason == "probe failed after its first token: error_event"


def test_a_probation_verdict_after_another_transition_is_only_statistics() -> None:
    breaker, _ = make(consecutive_failures=1, cooldown_s=5.0)
    fail(breaker, 0.0)
    probe = breaker.try_acquire(5.0)
    assert probe is not None
    probation = breaker.record_first_token(probe, 5.1, first_token_s=0.1)
    assert probation is not None
    fail(breaker, 6.0)  # another request fails: open again (epoch moves on)
    probe2 = breaker.try_acquire(11.0)
    assert probe2 is not None and breaker.state is BreakerState.HALF_OPEN
    breaker.record_failure(probation, 11.5, "no_done")  # stale: must not touch the probe
    assert breaker.state is BreakerState.HALF_OPEN
    assert breaker.probes_in_flight == 1
