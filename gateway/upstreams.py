"""Upstream pool: the configured upstreams, their breakers and in-flight counts.

Owns routing: :meth:`UpstreamPool.choose` picks, among upstreams whose breaker admits traffic,
the one with the fewest requests in flight (ties rotate), and reserves it. Only configured
upstreams exist; nothing in a request can add one. Timestamps are seconds on the caller's
monotonic clock.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from gateway.breaker import Attempt, CircuitBreaker, Transition
from gateway.config import BreakerConfig


@dataclass(eq=False)
class Upstream:
    """One upstream: base URL (also its metric label), breaker and in-flight count."""

    url: str
    breaker: CircuitBreaker
    in_flight: int = 0


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
        """Seconds (>= 0) until some upstream's breaker may admit again."""
        return min(u.breaker.seconds_until_retry(now_s) for u in self.upstreams)

    def _notify(self, upstream: Upstream) -> None:
        if self.on_in_flight is not None:
            self.on_in_flight(upstream.url, upstream.in_flight)
