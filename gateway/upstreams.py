"""Upstream pool: the configured upstreams, their breakers, in-flight counts and what was seen.

The pool says which upstreams take traffic now (:meth:`UpstreamPool.admitted`) and reserves
one for a request (:meth:`UpstreamPool.reserve`); which one is :mod:`gateway.upstream_choice`'s
decision. Only configured upstreams exist; nothing in a request can add one. Each upstream
also remembers what the gateway learnt about it (:class:`Observations`: last success and
failure, live checks, the last wait it asked for with ``Retry-After``) for ``/health`` and
for the ``Retry-After`` of the gateway's own 503. Timestamps are seconds on the caller's
monotonic clock.
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
    """The configured upstreams, which of them admit traffic, and their reservations."""

    upstreams: list[Upstream]
    on_in_flight: Callable[[str, int], None] | None = None

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

    def admitted(self, now_s: float, exclude: frozenset[str] = frozenset()) -> list[Upstream]:
        """The upstreams, in configured order, whose breaker admits traffic at ``now_s``,
        leaving out those whose URL is in ``exclude``."""
        return [u for u in self.upstreams if u.url not in exclude and u.breaker.admits(now_s)]

    def reserve(self, upstream: Upstream, now_s: float) -> Lease:
        """Reserve ``upstream`` (one of :meth:`admitted` at this same ``now_s``, in the same
        synchronous step) for one request: a breaker attempt and one more in flight."""
        attempt = upstream.breaker.try_acquire(now_s)
        assert attempt is not None  # admits() was true in this same synchronous step
        upstream.in_flight += 1
        self._notify(upstream)
        return Lease(upstream, attempt)

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
