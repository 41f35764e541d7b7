"""Request handlers: the proxy for ``/v1/*`` and the gateway's own ``/metrics``.

:func:`proxy_handler` admits a request and forwards it: size limit (413), admission (429),
upstream choice (:meth:`gateway.upstream_choice.Router.route`, each decision counted and
written to the decisions file; 503 when no upstream takes traffic), then one
:class:`gateway.proxy.exchange.Exchange` per attempt (:func:`gateway.proxy.forward.forward`),
with a retry on another upstream after a refused connection (the request never reached it).
It counts every request in ``gateway_requests_total`` by route, upstream and status (499: the
client went away).
"""

from __future__ import annotations

import asyncio
import dataclasses
import time

from aiohttp import web

from gateway.admission import AdmissionRejected
from gateway.events import decision_row
from gateway.metrics import CONTENT_TYPE
from gateway.proxy.answers import json_error
from gateway.proxy.exchange import Exchange, RequestOutcome
from gateway.proxy.forward import forward
from gateway.retry_after import format_retry_after
from gateway.state import STATE_KEY, GatewayState
from gateway.upstream_choice import Routed, RouteRequest


def _route_name(request: web.Request) -> str:
    resource = request.match_info.route.resource
    return resource.canonical if resource is not None else request.path


async def proxy_handler(request: web.Request) -> web.StreamResponse:
    """Forward a ``/v1/*`` request to the upstream the routing policy picks."""
    state = request.app[STATE_KEY]
    outcome = RequestOutcome(route=_route_name(request))
    try:
        response = await _proxy(request, state, outcome)
        if outcome.status is None:
            outcome.status = response.status
        return response
    except asyncio.CancelledError:
        outcome.status = 499
        outcome.client_gone = True
        raise
    finally:
        if outcome.client_gone:
            state.metrics.client_disconnects.labels(route=outcome.route).inc()
        state.metrics.requests.labels(
            route=outcome.route, upstream=outcome.upstream, status=str(outcome.status or 500)
        ).inc()


async def _proxy(
    request: web.Request, state: GatewayState, outcome: RequestOutcome
) -> web.StreamResponse:
    """Read the body, take an admission slot, forward; the error answer when one fails."""
    limit_bytes = state.config.max_body_bytes
    try:
        if request.content_length is not None and request.content_length > limit_bytes:
            raise web.HTTPRequestEntityTooLarge(limit_bytes, request.content_length)
        body = await request.read()
    except web.HTTPRequestEntityTooLarge:
        state.metrics.rejections.labels(reason="body_too_large").inc()
        msg = f"request body larger than {limit_bytes} bytes"
        too_large = json_error(413, "request_too_large", msg)
        too_large.force_close()  # the unread body must not be parsed as a next request
        return too_large

    retry_after = str(state.config.admission.retry_after_s)
    try:
        await state.admission.acquire()
    except AdmissionRejected as exc:
        state.metrics.rejections.labels(reason=exc.reason).inc()
        msg = f"gateway overloaded ({exc.reason})"
        return json_error(429, "overloaded", msg, headers={"Retry-After": retry_after})
    try:
        return await _forward(request, state, outcome, body)
    finally:
        state.admission.release()


async def _forward(
    request: web.Request, state: GatewayState, outcome: RequestOutcome, body: bytes
) -> web.StreamResponse:
    """Forward an admitted request; after a refused connection, once more elsewhere."""
    route = RouteRequest(request.method, request.rel_url.path_qs, body)
    response: web.StreamResponse | None = None
    request_id = request.headers.get("X-Request-Id")
    for attempt in range(1 + state.config.connect_retries):
        routed = state.router.route(time.monotonic(), route)
        if routed is None:
            if response is not None:
                return response  # the refused attempt's 502: nowhere else to go
            return _no_upstream(state)
        lease = routed.lease
        _record_decision(state, routed, attempt, request_id)
        if attempt:
            state.metrics.retries.labels(upstream=lease.upstream.url).inc()
        outcome.upstream = lease.upstream.url
        exchange = Exchange(request, state, outcome, lease, body)
        try:
            response = await forward(exchange)
        finally:
            state.pool.release(lease)
        if not exchange.connect_refused:
            return response
        route = dataclasses.replace(route, tried=route.tried | {lease.upstream.url})
    assert response is not None
    return response


def _record_decision(
    state: GatewayState, routed: Routed, attempt: int, request_id: str | None
) -> None:
    """Count the decision, and append it to the decisions file when one is configured."""
    url, decision = routed.lease.upstream.url, routed.decision
    state.metrics.routing_decisions.labels(
        upstream=url, policy=decision.policy, why=decision.why
    ).inc()
    if state.decisions is not None:
        row = decision_row(time.monotonic_ns(), url, decision, attempt, request_id)
        state.decisions.append(row)


def _no_upstream(state: GatewayState) -> web.Response:
    """503 when no upstream takes traffic; ``Retry-After`` is the soonest any may again: the
    longer of its breaker's remaining cool-down and the wait it asked for, whole seconds >= 1."""
    state.metrics.rejections.labels(reason="no_upstream").inc()
    wait_s = state.pool.seconds_until_retry(time.monotonic())
    headers = {"Retry-After": format_retry_after(wait_s, minimum_s=1)}
    return json_error(503, "no_upstream", "no upstream is taking traffic", headers)


async def metrics_handler(request: web.Request) -> web.Response:
    """``/metrics``: this gateway's registry in Prometheus text format."""
    state = request.app[STATE_KEY]
    return web.Response(body=state.metrics.exposition(), headers={"Content-Type": CONTENT_TYPE})
