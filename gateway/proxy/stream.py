"""Relaying an event stream chunk by chunk, watching its events for the verdict.

Limits: first token, idle between chunks, total, and the size of one event. Before the first
chunk reaches the client a failure is still a plain JSON error; after it, an SSE error event
ends the stream (and the upstream connection is closed). The verdict comes when the stream is
complete at ``data: [DONE]`` or fails (an error event inside it, a break, an end before
``[DONE]``), never at the first chunk; the first token is reported on arrival for the
slow-first-token rule and half-open probes. A gateway with a delay injector holds each
chunk before passing it on (``gateway.proxy.pace``); its verdicts and limits stay the
upstream's.
"""

from __future__ import annotations

import logging
import time

import aiohttp
from aiohttp import web

from gateway.outcomes import is_admission_rejection
from gateway.proxy.client import RelayedStream, relayed_headers
from gateway.proxy.exchange import Exchange
from gateway.proxy.pace import Pacer, ReadAhead, pacer_for, record_holds
from gateway.proxy.timeouts import PhaseTimeout
from gateway.proxy.verdicts import AttemptVerdict
from gateway.sse import is_done, is_error_event
from server.net.sse import SSEDecoder, SSELineTooLong

logger = logging.getLogger(__name__)


class StreamWatch:
    """Watches the relayed events of one stream: error events and ``[DONE]``."""

    def __init__(self, verdict: AttemptVerdict, max_event_bytes: int) -> None:
        self.verdict = verdict
        self.decoder = SSEDecoder(max_event_bytes)
        self.saw_done = False
        self.saw_error_event = False
        self.error_event_counted = False
        self.saw_rejection = False

    def feed(self, chunk: bytes) -> None:
        """Decode a relayed chunk (``server.net.sse``); note error events and ``[DONE]``.

        Raises :class:`server.net.sse.SSELineTooLong` (from the decoder)."""
        for event in self.decoder.feed(chunk):
            if is_error_event(event) and is_admission_rejection(503, event.data.encode()):
                self.saw_rejection = True  # vLLM refused it after the stream began
            elif is_error_event(event):
                self.saw_error_event = True
            elif is_done(event):
                self.saw_done = True

    def judge(self) -> None:
        """The stream's verdict once known: its first error event fails it, ``[DONE]`` with no
        error before it completes it (the breaker ignores verdicts after the first)."""
        if self.saw_error_event and not self.error_event_counted:
            self.error_event_counted = True
            self.verdict.fail("error_event")
        elif self.saw_rejection:  # busy, not broken (gateway.outcomes)
            self.verdict.no_verdict()
        elif self.saw_done and not self.saw_error_event:
            self.verdict.succeed()


async def relay(ex: Exchange) -> web.StreamResponse:
    """Relay the upstream event stream of ``ex`` to its client (see the module docstring)."""
    resp = ex.upstream_response()
    first_left_s = ex.started_s + ex.timeouts.first_token_s - time.monotonic()
    try:
        first = await ex.read(max(first_left_s, 0.0), "first_token", ex.timeouts.first_token_s)
    except PhaseTimeout as exc:
        return ex.fail_before_response(exc.kind + "_timeout", 504, str(exc), exc.kind)
    except aiohttp.ClientError as exc:
        logger.warning("stream from %s broke off at once: %r", ex.url, exc)
        msg = "the upstream stream broke off"
        return ex.fail_before_response("broken_stream", 502, msg, None, abort=False)

    if not first:  # nothing reached the client yet: a plain 502 is still possible
        msg = "the upstream stream ended before its first event"
        return ex.fail_before_response("no_done", 502, msg, None, abort=False)
    now_s = time.monotonic()
    watch = StreamWatch(ex.verdict, ex.state.config.max_response_bytes)
    try:
        watch.feed(first)
    except SSELineTooLong as exc:
        msg = f"the upstream stream: {exc}"
        return ex.fail_before_response("event_too_large", 502, msg, None, abort=False)
    if watch.saw_error_event:  # judged first: a probe failing at once fails as a probe
        watch.judge()
    # then the slow-first-token rule, before any [DONE] success
    ex.verdict.first_token(now_s, now_s - ex.started_s)
    watch.judge()
    client_resp = RelayedStream(
        status=resp.status, reason=resp.reason, headers=relayed_headers(resp, ex.upstream)
    )
    ex.outcome.status = resp.status
    pacer = pacer_for(ex)
    ahead = ReadAhead(ex) if pacer is not None else None
    try:
        if pacer is not None:
            await pacer.hold(now_s)
        await ex.client.prepare(client_resp)
        return await _pump(ex, watch, first, pacer, ahead)
    finally:
        if ahead is not None:
            ahead.close()
            record_holds(ex, pacer, streamed=True)


async def _next_chunk(ex: Exchange, pacer: Pacer | None, ahead: ReadAhead | None) -> bytes:
    """The upstream's next chunk; with a delay injector, once it is due (``b""`` at once)."""
    if pacer is None or ahead is None:
        return await ex.read(ex.timeouts.idle_s, "idle")
    arrived_s, chunk = await ahead.next()
    if chunk:
        await pacer.hold(arrived_s)
    return chunk


async def _pump(
    ex: Exchange, watch: StreamWatch, first: bytes, pacer: Pacer | None, ahead: ReadAhead | None
) -> web.StreamResponse:
    """Pass chunks on from ``first`` to the stream's end; end it with an SSE error event when
    the upstream times out, breaks off, sends too large an event or ends before ``[DONE]``."""
    client = ex.client
    chunk = first
    try:
        while chunk:
            await client.write(chunk)
            chunk = await _next_chunk(ex, pacer, ahead)
            watch.feed(chunk)
            watch.judge()
    except PhaseTimeout as exc:
        ex.verdict.fail(exc.kind + "_timeout")
        ex.abort(exc.kind + "_timeout")
        return await client.end_with_error(504, "gateway_timeout", str(exc), timeout=exc.kind)
    except aiohttp.ClientError as exc:
        logger.warning("stream from %s broke off: %r", ex.url, exc)
        ex.verdict.fail("broken_stream")
        ex.abort("broken_stream", count=False)
        return await client.end_with_error(502, "upstream_error", "the upstream stream broke off")
    except SSELineTooLong as exc:
        ex.verdict.fail("event_too_large")
        ex.abort("event_too_large", count=False)
        return await client.end_with_error(502, "upstream_error", f"the upstream stream: {exc}")
    ex.finish_upstream()
    if not watch.saw_done and not watch.saw_error_event:
        ex.verdict.fail("no_done")
        msg = "the upstream stream ended before [DONE]"
        return await client.end_with_error(502, "upstream_error", msg)
    return await client.eof()
