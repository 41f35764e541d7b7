"""Relaying an answer that is not an event stream: read it whole, judge it, pass it on.

A buffered answer is judged when its body has arrived whole (idle, total and size limits
apply while it is read); the rules are :mod:`gateway.outcomes`'s. A gateway with a delay
injector holds the whole answer f × its upstream time once it has arrived
(``gateway.proxy.pace``).
"""

from __future__ import annotations

import logging
import time

import aiohttp
from aiohttp import web

from gateway.outcomes import Verdict, is_admission_rejection, is_error_body, status_verdict
from gateway.proxy.client import relayed_headers
from gateway.proxy.exchange import Exchange
from gateway.proxy.pace import pacer_for, record_holds
from gateway.proxy.timeouts import PhaseTimeout

logger = logging.getLogger(__name__)


async def relay(ex: Exchange) -> web.StreamResponse:
    """Read the whole upstream body of ``ex`` (idle, total and size limits), judge it, answer."""
    resp = ex.upstream_response()
    limit_bytes = ex.state.config.max_response_bytes
    chunks: list[bytes] = []
    size_bytes = 0
    try:
        while chunk := await ex.read(ex.timeouts.idle_s, "idle"):
            size_bytes += len(chunk)
            if size_bytes > limit_bytes:
                msg = f"the upstream response is larger than {limit_bytes} bytes"
                return ex.fail_before_response("response_too_large", 502, msg, None)
            chunks.append(chunk)
    except PhaseTimeout as exc:
        return ex.fail_before_response(exc.kind + "_timeout", 504, str(exc), exc.kind)
    except aiohttp.ClientError as exc:
        logger.warning("response from %s broke off: %r", ex.url, exc)
        msg = "the upstream response broke off"
        return ex.fail_before_response("broken_stream", 502, msg, None, abort=False)
    ex.finish_upstream()
    arrived_s = time.monotonic()
    body = b"".join(chunks)
    headers = relayed_headers(resp, ex.upstream)
    verdict = status_verdict(resp.status)
    if is_admission_rejection(resp.status, body):
        verdict = Verdict.NO_VERDICT  # busy, not broken (gateway.outcomes)
        ex.state.metrics.upstream_rejections.labels(upstream=ex.url).inc()
    if verdict is Verdict.SUCCESS and resp.status == 200 and is_error_body(body):
        ex.verdict.fail("error_body")
    elif verdict is Verdict.FAILURE:
        ex.verdict.fail(f"status_{resp.status}")
    elif verdict is Verdict.NO_VERDICT:
        ex.verdict.no_verdict()
    else:
        ex.verdict.succeed()
    pacer = pacer_for(ex)
    if pacer is not None:  # judged on the upstream's answer, then held
        await pacer.hold(arrived_s)
        record_holds(ex, pacer, streamed=False)
    return web.Response(
        status=resp.status,
        reason=resp.reason,
        body=body,
        headers=headers,
    )
