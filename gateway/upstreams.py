"""Upstream pool: the configured upstreams, their breakers, in-flight counts and what was seen.

Owns routing: :meth:`UpstreamPool.choose` picks, among upstreams whose breaker admits traffic,
the one with the fewest requests in flight (ties rotate), and reserves it. Only configured
upstreams exist; nothing in a request can add one. Each upstream also remembers what the
gateway learnt about it (:class:`Observations`: last success and failure, live checks, the
last wait it asked for with ``Retry-After``) for ``/health`` and for the ``Retry-After`` of
the gateway's own 503. Timestamps are seconds on the caller's monotonic clock.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from gateway.breaker import Attempt, CircuitBreaker, Transition
from gateway.config import BreakerConfig


@dataclass
class Observations:
    """What the gateway has seen of one upstream; times are monotonic seconds, ``None`` = never.

    ``retry_until_s`` is the deadline from the upstream's last valid ``Retry-After``
    (0.0 when it never sent one). ``last_check_ok`` is the result of the latest live
    ``/health`` check (``None`` before the first), ``last_check_detail`` why it failed.
    ``reached`` says whether the upstream ever answered properly: a successful exchange or a
    successful live check.
    """

    last_success_s: float | None = None
    last_failure_s: float | None = None
    last_failure_kind: str | None = None
    last_check_s: float | None = None
    last_check_ok: bool | None = None
    last_check_detail: str | None = None
    retry_until_s: float = 0.0
    reached: bool = False


@dataclass(eq=False)
class Upstream:
    """One upstream: base URL (also its metric label), breaker, in-flight count, observations."""

    url: str
    breaker: CircuitBreaker
    in_flight: int = 0
    seen: Observations = field(default_factory=Observations)

    def note_success(self, now_s: float) -> None:
        """An exchange with this upstream succeeded at ``now_s``."""
        self.seen.last_success_s = now_s
        self.seen.reached = True

    def note_failure(self, now_s: float, kind: str) -> None:
        """An exchange with this upstream failed at ``now_s`` (``kind`` as in the metrics)."""
        self.seen.last_failure_s = now_s
        self.seen.last_failure_kind = kind

    def note_check(self, now_s: float, ok: bool, detail: str | None = None) -> None:
        """A live ``/health`` check ended at ``now_s``; ``detail`` says why it failed."""
        self.seen.last_check_s = now_s
        self.seen.last_check_ok = ok
        self.seen.last_check_detail = None if ok else detail
        self.seen.reached |= ok

    def note_retry_after(self, now_s: float, wait_s: float) -> None:
        """The upstream asked (valid ``Retry-After``) not to be retried for ``wait_s`` seconds."""
        self.seen.retry_until_s = now_s + wait_s

    def seconds_until_retry(self, now_s: float) -> float:
        """Seconds (>= 0) until this upstream may take traffic: the longer of its breaker's
        remaining cool-down and the remaining wait it asked for itself."""
        requested_s = max(0.0, self.seen.retry_until_s - now_s)
        return max(self.breaker.seconds_until_retry(now_s), requested_s)


@dataclass(frozen=True, slots=True)
class Lease:
    """A reservation of one upstream for one request; give it back with ``release``."""

    upstream: Upstream
    attempt: Attempt


@dataclass
class UpstreamPool:
    """Least-in-flight selection over breaker-admitted upstreams."""

    upstreams: list[Upstream]
    on_in_flight: Callable[[str, int], None] | None = None
    _rotation: int = field(default=0, init=False)

    @classmethod
    def from_urls(
        cls,
        urls: tuple[str, ...] | list[str],
        breaker_config: BreakerConfig,
        on_transition: Callable[[Transition], None] | None = None,
        on_in_flight: Callable[[str, int], None] | None = None,
    ) -> UpstreamPool:
        """Build a pool with one breaker per URL; listeners feed logging/metrics."""
        ups = [Upstream(u, CircuitBreaker(breaker_config, u, on_transition)) for u in urls]
        return cls(ups, on_in_flight)

    def choose(self, now_s: float, exclude: frozenset[str] = frozenset()) -> Lease | None:
        """Reserve the admitted upstream with the fewest in flight, or ``None`` if none admits.

        ``exclude`` names upstream URLs not to pick (already tried for this request).
        """
        n = len(self.upstreams)
        start = self._rotation % n
        rotated = [self.upstreams[(start + i) % n] for i in range(n)]  # ties: round robin
        admitted = [u for u in rotated if u.url not in exclude and u.breaker.admits(now_s)]
        if not admitted:
            return None
        chosen = min(admitted, key=lambda u: u.in_flight)  # first of the tied in rotated order
        self._rotation = self.upstreams.index(chosen) + 1
        attempt = chosen.breaker.try_acquire(now_s)
        assert attempt is not None  # admits() was true in this same synchronous step
        chosen.in_flight += 1
        self._notify(chosen)
        return Lease(chosen, attempt)

    def release(self, lease: Lease) -> None:
        """Give back the in-flight reservation (breaker verdicts are recorded separately)."""
        lease.upstream.in_flight -= 1
        self._notify(lease.upstream)

    def seconds_until_retry(self, now_s: float) -> float:
        """Seconds (>= 0) until some upstream may take traffic again (see
        :meth:`Upstream.seconds_until_retry`): the ``Retry-After`` of a 503 for "no upstream"."""
        return min(u.seconds_until_retry(now_s) for u in self.upstreams)

    def _notify(self, upstream: Upstream) -> None:
        if self.on_in_flight is not None:
            self.on_in_flight(upstream.url, upstream.in_flight)
