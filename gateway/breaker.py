"""Per-upstream circuit breaker: a pure state machine fed timestamps.

Owns the closed → open → half-open → closed/open life cycle. It never reads a clock: every
method takes ``now_s`` (seconds on a monotonic clock chosen by the caller; the gateway passes
``time.monotonic()``). Transitions are logged through :mod:`logging` (one human line each) and
handed to an optional listener (the gateway exports metrics and writes its events file).
What counts as a failure is decided outside, in :mod:`gateway.outcomes`.

Rules:

- closed → open after ``consecutive_failures`` failures in a row, or when the results of the
  last ``window_s`` seconds number at least ``min_requests`` and their failure fraction is at
  least ``error_rate``. A first token slower than ``slow_first_token_s`` counts as a failure.
- open → half-open once ``cooldown_s`` has passed; the breaker is lazy (applied whenever it
  is asked), but the transition is stamped with the moment the cool-down ended.
- half-open admits at most ``half_open_probes`` concurrent probes; a probe failure re-opens
  the breaker for another cool-down, a probe success closes it.

Each admitted request is an :class:`Attempt`; it gets at most one verdict
(:meth:`CircuitBreaker.record_success`, :meth:`CircuitBreaker.record_failure`) or is given
back without one (:meth:`CircuitBreaker.record_no_verdict`: the client went away, or the
upstream pushed back with 429). Verdicts on attempts admitted before the latest transition
only feed the window statistics.

Streams get their verdict at the end, because an upstream can fail inside a 200 stream long
after its first token. The first token is reported on its own
(:meth:`CircuitBreaker.record_first_token`): a slow one is the attempt's failure at once; for
a half-open probe, a timely first token closes the breaker right away (the upstream is
generating again, and a long stream must not keep a recovered upstream on one probe's worth of
traffic), and the probe continues *on probation*: if its stream then fails before the breaker
changes state again, the breaker re-opens at once instead of waiting for
``consecutive_failures``. So an upstream that fails inside its streams is held to about one
probe per cool-down, like one that fails outright.

See docs/gateway.md.
"""

from __future__ import annotations

import enum
import logging
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from gateway.config import BreakerConfig

logger = logging.getLogger(__name__)


class BreakerState(enum.IntEnum):
    """Breaker states; the value is what the ``gateway_breaker_state`` gauge exports."""

    CLOSED = 0
    OPEN = 1
    HALF_OPEN = 2


@dataclass(frozen=True, slots=True)
class Transition:
    """One state change: ``at_s`` is the caller's timestamp (s), ``reason`` is human-readable."""

    name: str
    from_state: BreakerState
    to_state: BreakerState
    at_s: float
    reason: str


@dataclass(frozen=True, slots=True)
class Attempt:
    """A request admitted by the breaker; ``epoch`` identifies the state period it started in.

    ``probation`` marks a half-open probe whose first token closed the breaker (its failure
    re-opens the breaker at once while that closed period lasts).
    """

    epoch: int
    probe: bool
    probation: bool = False


TransitionListener = Callable[[Transition], None]


class CircuitBreaker:
    """Circuit breaker for one upstream; pure apart from logging and the listener call."""

    def __init__(
        self,
        config: BreakerConfig,
        name: str = "",
        on_transition: TransitionListener | None = None,
    ) -> None:
        self._config = config
        self.name = name
        self._on_transition = on_transition
        self._state = BreakerState.CLOSED
        self._epoch = 0
        self._opened_at_s = 0.0
        self._consecutive_failures = 0
        self._probes_in_flight = 0
        # (timestamp s, failed) of verdicts inside the sliding window, oldest first.
        self._window: deque[tuple[float, bool]] = deque()

    @property
    def state(self) -> BreakerState:
        """State as of the last call; call :meth:`poll` first to apply an elapsed cool-down."""
        return self._state

    @property
    def probes_in_flight(self) -> int:
        """Half-open probes admitted and not yet resolved."""
        return self._probes_in_flight

    def poll(self, now_s: float) -> BreakerState:
        """Apply time-based transitions (open → half-open after the cool-down); return state."""
        reopen_at_s = self._opened_at_s + self._config.cooldown_s
        if self._state is BreakerState.OPEN and now_s >= reopen_at_s:
            self._transition(BreakerState.HALF_OPEN, reopen_at_s, "cool-down elapsed")
        return self._state

    def admits(self, now_s: float) -> bool:
        """Whether :meth:`try_acquire` would admit a request now (does not reserve anything)."""
        state = self.poll(now_s)
        if state is BreakerState.CLOSED:
            return True
        if state is BreakerState.HALF_OPEN:
            return self._probes_in_flight < self._config.half_open_probes
        return False

    def seconds_until_retry(self, now_s: float) -> float:
        """Seconds (>= 0) until the breaker may admit again; 0 if it admits now."""
        if self.admits(now_s):
            return 0.0
        if self._state is BreakerState.OPEN:
            return max(0.0, self._opened_at_s + self._config.cooldown_s - now_s)
        return 0.0  # half-open with all probe slots taken: unknown, a probe may end any time

    def try_acquire(self, now_s: float) -> Attempt | None:
        """Admit one request (reserving a probe slot when half-open) or return ``None``."""
        if not self.admits(now_s):
            return None
        probe = self._state is BreakerState.HALF_OPEN
        if probe:
            self._probes_in_flight += 1
        return Attempt(epoch=self._epoch, probe=probe)

    def record_first_token(
        self, attempt: Attempt, now_s: float, first_token_s: float
    ) -> Attempt | None:
        """A stream's first body chunk arrived ``first_token_s`` (s) after the request was sent.

        Returns the attempt to give the end-of-stream verdict on, or ``None`` when this was
        the verdict (a first token slower than ``slow_first_token_s``: a failure). A half-open
        probe's timely first token closes the breaker and comes back as a new attempt of the
        closed period, on probation (see the module docstring); any other attempt comes back
        unchanged.
        """
        if self._is_slow(first_token_s):
            reason = f"slow first token {first_token_s:.3f} s"
            self._record(attempt, now_s, failed=True, reason=reason)
            return None
        if not self._is_current_probe(attempt):
            return attempt
        self._transition(BreakerState.CLOSED, now_s, "probe's first token arrived")
        return Attempt(epoch=self._epoch, probe=False, probation=True)

    def record_success(
        self, attempt: Attempt, now_s: float, first_token_s: float | None = None
    ) -> None:
        """Record a healthy answer; ``first_token_s`` (s) over the slow threshold is a failure."""
        if first_token_s is not None and self._is_slow(first_token_s):
            self._record(
                attempt, now_s, failed=True, reason=f"slow first token {first_token_s:.3f} s"
            )
        else:
            self._record(attempt, now_s, failed=False, reason="success")

    def record_failure(self, attempt: Attempt, now_s: float, reason: str = "failure") -> None:
        """Record a failed attempt (see :mod:`gateway.outcomes` for what fails)."""
        self._record(attempt, now_s, failed=True, reason=reason)

    def record_no_verdict(self, attempt: Attempt, now_s: float) -> None:
        """Give an attempt back without a verdict (client gone, 429); frees its probe slot."""
        if self._is_current_probe(attempt):
            self._probes_in_flight -= 1
        self._prune(now_s)

    def error_rate(self, now_s: float) -> tuple[int, float]:
        """(verdicts in the window, failure fraction 0-1) as of ``now_s``."""
        self._prune(now_s)
        total = len(self._window)
        failed = sum(1 for _, f in self._window if f)
        return total, (failed / total if total else 0.0)

    # -- internals ---------------------------------------------------------------------------

    def _is_slow(self, first_token_s: float) -> bool:
        slow = self._config.slow_first_token_s
        return slow is not None and first_token_s > slow

    def _is_current_probe(self, attempt: Attempt) -> bool:
        return (
            attempt.probe and attempt.epoch == self._epoch and self._state is BreakerState.HALF_OPEN
        )

    def _record(self, attempt: Attempt, now_s: float, *, failed: bool, reason: str) -> None:
        self._window.append((now_s, failed))
        self._prune(now_s)
        if self._is_current_probe(attempt):
            self._probes_in_flight -= 1
            if failed:
                self._open(now_s, f"probe failed: {reason}")
            else:
                self._transition(BreakerState.CLOSED, now_s, "probe succeeded")
            return
        if self._state is not BreakerState.CLOSED or attempt.epoch != self._epoch:
            return  # stale verdict: statistics only
        if not failed:
            self._consecutive_failures = 0
            return
        if attempt.probation:
            self._open(now_s, f"probe failed after its first token: {reason}")
            return
        self._consecutive_failures += 1
        cfg = self._config
        if self._consecutive_failures >= cfg.consecutive_failures:
            self._open(now_s, f"{self._consecutive_failures} consecutive failures ({reason})")
            return
        total, rate = self.error_rate(now_s)
        if total >= cfg.min_requests and rate >= cfg.error_rate:
            self._open(now_s, f"error rate {rate:.2f} over {total} requests in {cfg.window_s} s")

    def _open(self, now_s: float, reason: str) -> None:
        self._opened_at_s = now_s
        self._transition(BreakerState.OPEN, now_s, reason)

    def _prune(self, now_s: float) -> None:
        horizon = now_s - self._config.window_s
        while self._window and self._window[0][0] <= horizon:
            self._window.popleft()

    def _transition(self, to_state: BreakerState, now_s: float, reason: str) -> None:
        transition = Transition(self.name, self._state, to_state, now_s, reason)
        self._state = to_state
        self._epoch += 1
        self._probes_in_flight = 0
        if to_state is BreakerState.CLOSED:
            self._consecutive_failures = 0
            self._window.clear()
        logger.log(
            logging.WARNING if to_state is BreakerState.OPEN else logging.INFO,
            "breaker %s: %s -> %s at %.3f s (%s)",
            self.name,
            transition.from_state.name.lower(),
            to_state.name.lower(),
            now_s,
            reason,
        )
        if self._on_transition is not None:
            self._on_transition(transition)
