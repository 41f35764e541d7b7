"""One attempt's verdict for its upstream's circuit breaker, given once.

What fails is decided in :mod:`gateway.outcomes`; this object reports it: the first verdict
reaches the breaker and the upstream's observations, later ones only count as upstream errors
in the metrics. A stream's first token is reported on arrival for the slow-first-token rule
and half-open probes (:meth:`gateway.breaker.CircuitBreaker.record_first_token`). Times are
``time.monotonic()`` seconds.
"""

from __future__ import annotations

import time

from gateway.metrics import GatewayMetrics
from gateway.upstreams import Lease


class AttemptVerdict:
    """Reports the outcome of one request's attempt on the upstream of ``lease``."""

    def __init__(self, lease: Lease, metrics: GatewayMetrics) -> None:
        self.lease = lease
        self.upstream = lease.upstream
        self.attempt = lease.attempt  # replaced when a probe's first token closes the breaker
        self.metrics = metrics
        self.given = False

    def first_token(self, now_s: float, first_token_s: float) -> None:
        """The stream's first chunk arrived at ``now_s``, ``first_token_s`` after the request:
        observe its latency, tell the breaker."""
        self.metrics.first_token.labels(upstream=self.upstream.url).observe(first_token_s)
        if self.given:  # the first chunk already held the stream's verdict
            return
        attempt = self.upstream.breaker.record_first_token(self.attempt, now_s, first_token_s)
        if attempt is None:  # too slow: that was the verdict
            self.given = True
            self.count_error("slow_first_token")
            self.upstream.note_failure(now_s, "slow_first_token")
        else:
            self.attempt = attempt

    def succeed(self) -> None:
        """The attempt succeeded (unless it already has a verdict)."""
        if self.given:
            return
        self.given = True
        now_s = time.monotonic()
        self.upstream.breaker.record_success(self.attempt, now_s)
        self.upstream.note_success(now_s)

    def fail(self, kind: str) -> None:
        """Count an upstream error of ``kind``; the attempt's verdict if it has none yet."""
        self.count_error(kind)
        if self.given:
            return
        self.given = True
        now_s = time.monotonic()
        self.upstream.breaker.record_failure(self.attempt, now_s, kind)
        self.upstream.note_failure(now_s, kind)

    def no_verdict(self) -> None:
        """The attempt tells nothing of the upstream (back-pressure, the client went away)."""
        if self.given:
            return
        self.given = True
        self.upstream.breaker.record_no_verdict(self.attempt, time.monotonic())

    def count_error(self, kind: str) -> None:
        """Count an upstream error of ``kind`` in the metrics only."""
        self.metrics.upstream_errors.labels(upstream=self.upstream.url, kind=kind).inc()
