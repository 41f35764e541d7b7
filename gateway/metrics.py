"""Prometheus metrics of one gateway, on a per-app ``CollectorRegistry``.

Owns metric names, labels and the exposition. Each gateway gets its own registry so several
gateways can live in one process (tests). Latencies are seconds.

Metric families (all prefixed ``gateway_``):

- ``requests_total{route,upstream,status}``: finished requests by HTTP status (499 = client
  went away); ``upstream`` is empty when no upstream was chosen (413, 429, 503).
- ``client_disconnects_total{route}``: clients that went away before their answer was complete.
- ``upstream_aborts_total{upstream,reason}``: upstream exchanges the gateway cut
  (``client_disconnect``, ``first_token_timeout``, ``idle_timeout``, ``total_timeout``).
- ``orphaned_upstream_requests_total{upstream}``: with cancellation propagation off, upstream
  requests left running (drained) after their client went away.
- ``upstream_errors_total{upstream,kind}``: upstream failures (:mod:`gateway.outcomes`) by
  kind: ``connect_error``, ``connect_timeout``, ``first_token_timeout``, ``idle_timeout``,
  ``total_timeout``, ``upstream_error`` (unparseable answer), ``status_<5xx>``,
  ``broken_stream``, ``error_event`` (inside a 200 stream), ``no_done`` (stream ended before
  ``[DONE]``), ``not_event_stream``, ``error_body`` (a 200 JSON error object),
  ``response_too_large``, ``event_too_large``, ``slow_first_token``, ``bad_encoding`` (a
  ``Content-Encoding`` the gateway cannot decode; gzip and deflate are decoded).
- ``upstream_rejections_total{upstream}``: admission rejections relayed from an upstream (a
  503 that says the upstream is at its queue limit, :mod:`gateway.outcomes`); no breaker
  verdict.
- ``rejections_total{reason}``: admission and routing refusals (queue_full, queue_timeout,
  no_upstream, body_too_large).
- ``routing_decisions_total{upstream,policy,why}``: every upstream choice, retries included
  (``why``: matched, passed-on-load, passed-on-breaker, round-robin, least-loaded).
- ``breaker_state{upstream}``: 0 closed, 1 open, 2 half-open.
- ``breaker_transitions_total{upstream,from,to}``.
- ``in_flight``, ``queue_depth``, ``upstream_in_flight{upstream}``: gauges.
- ``first_token_seconds{upstream}``: histogram of time from sending a streaming request
  upstream to its first body chunk.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from gateway.breaker import BreakerState, Transition

FIRST_TOKEN_BUCKETS_S: tuple[float, ...] = (
    0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0,
)  # fmt: skip

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


class GatewayMetrics:
    """The gateway's metric objects, registered on a private registry."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        r = self.registry
        self.requests = Counter(
            "gateway_requests", "Finished requests.", ["route", "upstream", "status"], registry=r
        )
        self.client_disconnects = Counter(
            "gateway_client_disconnects", "Clients that went away early.", ["route"], registry=r
        )
        self.upstream_aborts = Counter(
            "gateway_upstream_aborts",
            "Upstream exchanges closed by the gateway before they ended.",
            ["upstream", "reason"],
            registry=r,
        )
        self.orphaned = Counter(
            "gateway_orphaned_upstream_requests",
            "Upstream requests left running after their client went away (propagation off).",
            ["upstream"],
            registry=r,
        )
        self.upstream_errors = Counter(
            "gateway_upstream_errors",
            "Upstream failures by kind.",
            ["upstream", "kind"],
            registry=r,
        )
        self.retries = Counter(
            "gateway_connect_retries",
            "Requests retried on another upstream after a refused connection.",
            ["upstream"],
            registry=r,
        )
        self.rejections = Counter(
            "gateway_rejections", "Requests refused by the gateway.", ["reason"], registry=r
        )
        self.upstream_rejections = Counter(
            "gateway_upstream_rejections",
            "Admission rejections (503 at the queue limit) relayed from an upstream.",
            ["upstream"],
            registry=r,
        )
        self.routing_decisions = Counter(
            "gateway_routing_decisions",
            "Routing decisions by upstream, policy and why (docs/fleet.md).",
            ["upstream", "policy", "why"],
            registry=r,
        )
        self.breaker_state = Gauge(
            "gateway_breaker_state",
            "Circuit breaker state: 0 closed, 1 open, 2 half-open.",
            ["upstream"],
            registry=r,
        )
        self.breaker_transitions = Counter(
            "gateway_breaker_transitions",
            "Circuit breaker transitions.",
            ["upstream", "from", "to"],
            registry=r,
        )
        self.in_flight = Gauge("gateway_in_flight", "Requests holding a slot.", registry=r)
        self.queue_depth = Gauge("gateway_queue_depth", "Requests waiting for a slot.", registry=r)
        self.upstream_in_flight = Gauge(
            "gateway_upstream_in_flight",
            "Requests in flight per upstream.",
            ["upstream"],
            registry=r,
        )
        self.first_token = Histogram(
            "gateway_first_token_seconds",
            "Seconds from sending a streaming request upstream to its first body chunk.",
            ["upstream"],
            buckets=FIRST_TOKEN_BUCKETS_S,
            registry=r,
        )

    def register_upstream(self, upstream: str) -> None:
        """Create the per-upstream series at zero so they are scraped before any traffic."""
        self.breaker_state.labels(upstream=upstream).set(BreakerState.CLOSED)
        self.upstream_in_flight.labels(upstream=upstream).set(0)

    def on_breaker_transition(self, transition: Transition) -> None:
        """Export a breaker transition (the breaker's ``on_transition`` listener)."""
        self.breaker_state.labels(upstream=transition.name).set(int(transition.to_state))
        self.breaker_transitions.labels(
            upstream=transition.name,
            **{
                "from": transition.from_state.name.lower(),
                "to": transition.to_state.name.lower(),
            },
        ).inc()

    def on_admission_change(self, in_flight: int, queued: int) -> None:
        """Update the in-flight and queue gauges (the admission controller's listener)."""
        self.in_flight.set(in_flight)
        self.queue_depth.set(queued)

    def exposition(self) -> bytes:
        """The registry in Prometheus text format."""
        return generate_latest(self.registry)
