"""The gateway's ``/health``: live checks of every upstream, and what the gateway knows of each.

A gateway is healthy (200, ``"status": "ok"``) only when some upstream both takes traffic (its
breaker admits) and answers its own ``/health`` now: each call checks every upstream's
``/health`` concurrently, each bounded by ``health_check_timeout_s``. So a fresh gateway in
front of upstreams that were never reached is not reported ok on faith, and a caller that
waits for the gateway's ``/health`` before sending load (``loadgen.proxies.gateway``) waits for
a real upstream. Otherwise 503 with ``"status": "no_upstream"``.

The live checks do not feed the breakers: the breakers judge real traffic only (Envoy's
outlier detection and active health checking are likewise separate mechanisms), so a breaker
episode shows the probes of real requests. The checks do count towards ``reached``.

Per upstream the body gives: ``url``, ``breaker`` (closed/open/half_open), ``in_flight``,
``reached`` (ever answered properly: a successful exchange or live check), ``check``
(``{"ok", "detail"}`` of this call's live check), ``last_success_age_s`` /
``last_failure_age_s`` (seconds ago, ``null`` if never), ``last_failure`` (its kind, as in
``gateway_upstream_errors_total``) and ``retry_after_s`` (what remains of the wait the upstream
last asked for with ``Retry-After``). ``/health`` is an operator endpoint like ``/metrics``:
it names the upstreams; error bodies sent to clients do not.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import httpx
from aiohttp import web

from gateway.state import STATE_KEY
from gateway.upstreams import Upstream
from server.net.health import check_health
from server.net.urls import redact_url


async def check_upstream(client: httpx.AsyncClient, upstream: Upstream, timeout_s: float) -> None:
    """Check ``upstream``'s ``/health`` within ``timeout_s`` seconds
    (``server.net.health.check_health``: 2xx is ok, a redirect is not followed); record the
    result on it. Never raises for upstream trouble."""
    health = await check_health(client, upstream.url, timeout_s)
    upstream.note_check(time.monotonic(), health.ok, health.problem)


def _age_s(then_s: float | None, now_s: float) -> float | None:
    return None if then_s is None else round(now_s - then_s, 3)


def upstream_report(upstream: Upstream, now_s: float) -> dict[str, Any]:
    """One upstream's entry in the ``/health`` body (fields in the module docstring)."""
    seen = upstream.seen
    return {
        "url": redact_url(upstream.url),  # the health page shows no password
        "breaker": upstream.breaker.poll(now_s).name.lower(),
        "in_flight": upstream.in_flight,
        "reached": seen.reached,
        "check": {"ok": seen.last_check_ok, "detail": seen.last_check_detail},
        "last_success_age_s": _age_s(seen.last_success_s, now_s),
        "last_failure_age_s": _age_s(seen.last_failure_s, now_s),
        "last_failure": seen.last_failure_kind,
        "retry_after_s": round(max(0.0, seen.retry_until_s - now_s), 3),
    }


async def health_handler(request: web.Request) -> web.Response:
    """``/health``: 200 if an upstream takes traffic and answers its ``/health``, else 503."""
    state = request.app[STATE_KEY]
    upstreams = state.pool.upstreams
    timeout_s = state.config.health_check_timeout_s
    client = state.checks_client()
    await asyncio.gather(*(check_upstream(client, u, timeout_s) for u in upstreams))
    now_s = time.monotonic()
    healthy = any(u.breaker.admits(now_s) and u.seen.last_check_ok for u in upstreams)
    body = {
        "status": "ok" if healthy else "no_upstream",
        "in_flight": state.admission.in_flight,
        "queued": state.admission.queued,
        "upstreams": [upstream_report(u, now_s) for u in upstreams],
    }
    return web.json_response(body, status=200 if healthy else 503)
