"""Request handlers: the proxy for ``/v1/*`` and the gateway's own ``/metrics``.

Owns one proxied exchange from request body to last byte: size limit (413), admission (429),
upstream choice (503 when no upstream takes traffic), the layered timeouts (504, or an SSE
error event once a stream has started), breaker verdicts (what fails is decided in
:mod:`gateway.outcomes`), and what happens when the client goes away: with
``propagate_cancellation`` the upstream connection is closed at once (vLLM aborts the
request); without it the upstream response is drained in the background (orphaned work that,
as in a proxy that forgot it, no longer holds an admission slot or counts as in flight).

Verdicts: a buffered answer is judged when its body has arrived whole; a stream when it is
complete at ``data: [DONE]``, or fails (an error event inside it, a break, an end before
``[DONE]``), with its first token reported on arrival for the slow-first-token rule and
half-open probes (:meth:`gateway.breaker.CircuitBreaker.record_first_token`).

What reaches the client: upstream answers pass through (hop-by-hop headers stripped, an
upstream ``Retry-After`` checked and re-written as delay-seconds, or dropped when invalid, see
:mod:`gateway.retry_after`). The gateway's own error bodies (502/503/504 JSON and SSE error
events) never name an upstream address; the details go to the gateway's log. Every relayed
answer carries ``X-Gateway-Upstream: <upstream URL>``, a diagnostic header of this testbed: the
load generator records it so the analysis can tell which replica served each request (a public
gateway would not expose it).

Client disconnects are seen through aiohttp's ``handler_cancellation`` (the handler task is
cancelled; :func:`gateway.app.running_app` switches it on) and, as a fallback, through failed
writes to a closed client transport.

Timing: every limit is in seconds; time is ``time.monotonic()``.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Awaitable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, TypeVar

import aiohttp
import msgspec
from aiohttp import web

from gateway.admission import AdmissionRejected
from gateway.headers import (
    client_response_headers,
    undecodable_encoding,
    upstream_request_headers,
)
from gateway.metrics import CONTENT_TYPE
from gateway.outcomes import Verdict, is_error_body, status_verdict
from gateway.retry_after import format_retry_after, parse_retry_after
from gateway.sse import EventStreamScanner, EventTooLarge, is_done, is_error_event
from gateway.state import STATE_KEY, GatewayState
from gateway.upstreams import Lease
from server.net.urls import redact_url

logger = logging.getLogger(__name__)

T = TypeVar("T")

SSE_CONTENT_TYPE = "text/event-stream"


class _PhaseTimeout(Exception):
    """One of the layered timeouts expired; ``kind`` is first_token, idle or total."""

    def __init__(self, kind: str, limit_s: float) -> None:
        super().__init__(f"{kind} timeout after {limit_s:g} s")
        self.kind = kind
        self.limit_s = limit_s


class _ClientGone(Exception):
    """Writing to the client failed because its connection is closed."""


@dataclass
class _Outcome:
    """What the request ended as, for ``gateway_requests_total``."""

    route: str
    upstream: str = ""
    status: int | None = None
    client_gone: bool = False


def error_body(status: int, kind: str, message: str, **extra: Any) -> dict[str, Any]:
    """OpenAI-style error payload: ``{"error": {"message", "type", "code", ...}}``."""
    return {"error": {"message": message, "type": kind, "code": status, **extra}}


def _json_error(
    status: int, kind: str, message: str, headers: dict[str, str] | None = None, **extra: Any
) -> web.Response:
    return web.json_response(
        error_body(status, kind, message, **extra), status=status, headers=headers
    )


async def _within(
    aw: Awaitable[T], limit_s: float | None, kind: str, deadline_s: float, total_s: float
) -> T:
    """Await ``aw`` for at most ``limit_s`` and never past ``deadline_s`` (monotonic s).

    Raises :class:`_PhaseTimeout` naming the limit that fired (``kind`` or ``"total"``).
    """
    remaining_s = deadline_s - time.monotonic()
    if limit_s is None or remaining_s <= limit_s:
        budget_s, kind, limit_s = remaining_s, "total", total_s
    else:
        budget_s = limit_s
    timeout = asyncio.timeout(max(budget_s, 0.0))
    try:
        async with timeout:
            return await aw
    except TimeoutError:
        if timeout.expired():
            raise _PhaseTimeout(kind, limit_s) from None
        raise


class _StreamFlag(msgspec.Struct):
    stream: Any = None


# Reads only the "stream" member (the prompt, often thousands of token IDs, is skipped
# without building it): a fraction of json.loads's cost per request.
_decode_stream_flag = msgspec.json.Decoder(_StreamFlag).decode


def _wants_stream(body: bytes) -> bool:
    """Whether a JSON request body asks for ``"stream": true`` (non-JSON bodies: no)."""
    if not body:
        return False
    try:
        return _decode_stream_flag(body).stream is True
    except msgspec.DecodeError:  # not JSON, or not an object (ValidationError)
        return False


class _RelayedStream(web.StreamResponse):
    """A relayed event stream whose status line and headers leave with its first chunk, in one
    write, instead of alone at ``prepare`` (aiohttp's ``web.Response`` does the same for its
    body): the client wakes once for its first token, not twice (headers, then chunk)."""

    _send_headers_immediately = False


def _close_call(call: asyncio.Task[aiohttp.ClientResponse] | None) -> None:
    """Cancel an upstream request task, closing its response if it already produced one."""
    if call is None:
        return

    def close_result(task: asyncio.Task[aiohttp.ClientResponse]) -> None:
        if not task.cancelled() and task.exception() is None:
            task.result().close()

    if call.done():
        close_result(call)
    else:
        call.cancel()
        call.add_done_callback(close_result)


async def _drain(
    call: asyncio.Task[aiohttp.ClientResponse], deadline_s: float, upstream: str
) -> None:
    """Read an upstream response to its end and discard it, until ``deadline_s`` at most."""
    resp: aiohttp.ClientResponse | None = None
    drained_bytes = 0
    try:
        async with asyncio.timeout(max(deadline_s - time.monotonic(), 0.0)):
            resp = await asyncio.shield(call)
            while chunk := await resp.content.readany():
                drained_bytes += len(chunk)
    except (aiohttp.ClientError, TimeoutError) as exc:
        logger.info("orphaned request to %s ended: %r", upstream, exc)
    finally:
        _close_call(call)
    logger.info("orphaned request to %s drained (%d bytes discarded)", upstream, drained_bytes)


class _Exchange:
    """One request forwarded to one upstream; owns the upstream call and the client response."""

    def __init__(
        self,
        request: web.Request,
        state: GatewayState,
        outcome: _Outcome,
        lease: Lease,
        body: bytes,
    ) -> None:
        self.request = request
        self.state = state
        self.outcome = outcome
        self.lease = lease
        self.attempt = lease.attempt  # replaced when a probe's first token closes the breaker
        self.body = body
        self.upstream = lease.upstream.url
        self.timeouts = state.config.timeouts
        self.started_s = time.monotonic()
        self.deadline_s = self.started_s + self.timeouts.total_s
        self.call: asyncio.Task[aiohttp.ClientResponse] | None = None
        self.resp: aiohttp.ClientResponse | None = None
        self.client_resp: web.StreamResponse | None = None
        self.verdict_given = False
        self.finished_upstream = False
        self.connect_refused = False  # never reached the upstream: safe to retry elsewhere
        self.tail = b"\n\n"
        self.saw_done = False
        self.saw_error_event = False
        self.error_event_counted = False

    # -- entry point -------------------------------------------------------------------------

    async def run(self) -> web.StreamResponse:
        """Forward the request; on client disconnect abort or orphan the upstream work."""
        try:
            return await self._run()
        except asyncio.CancelledError:
            self._on_client_gone()
            raise
        except _ClientGone:
            self._on_client_gone()
            self.outcome.client_gone = True
            self.outcome.status = 499
            assert self.client_resp is not None
            return self.client_resp

    async def _run(self) -> web.StreamResponse:
        stream = _wants_stream(self.body)
        request = self.request
        headers = upstream_request_headers(
            request.headers, request.remote, request.headers.get("Host"), request.scheme
        )
        url = self.upstream + self.request.rel_url.path_qs
        session = self.state.client_session()
        self.call = asyncio.ensure_future(
            session.request(
                self.request.method,
                url,
                data=self.body or None,
                headers=headers,
                allow_redirects=False,
            )
        )
        first_limit_s = self.timeouts.first_token_s if stream else None
        try:
            self.resp = await _within(
                asyncio.shield(self.call),
                first_limit_s,
                "first_token",
                self.deadline_s,
                self.timeouts.total_s,
            )
        except _PhaseTimeout as exc:
            return self._fail_before_response(exc.kind + "_timeout", 504, str(exc), exc.kind)
        except aiohttp.ServerTimeoutError:
            msg = f"connect timeout after {self.timeouts.connect_s:g} s"
            return self._fail_before_response("connect_timeout", 504, msg, "connect", abort=False)
        except aiohttp.ClientConnectorError as exc:
            self.connect_refused = True
            logger.warning("cannot connect to %s: %r", self.upstream, exc.os_error)
            msg = "cannot connect to the upstream"
            return self._fail_before_response("connect_error", 502, msg, None, abort=False)
        except aiohttp.ClientError as exc:
            logger.warning("request to %s failed: %r", self.upstream, exc)
            msg = "the upstream request failed"
            return self._fail_before_response("upstream_error", 502, msg, None, abort=False)

        encoding = undecodable_encoding(self.resp.headers)
        if encoding is not None:
            logger.warning("%s answered with Content-Encoding %r", self.upstream, encoding)
            msg = (
                f"the upstream answered with Content-Encoding {encoding!r}, which the gateway "
                "cannot decode (it asks for identity)"
            )
            return self._fail_before_response("bad_encoding", 502, msg, None, abort=False)
        if self.resp.status == 200 and self.resp.content_type == SSE_CONTENT_TYPE:
            return await self._relay_stream()
        if stream and self.resp.status == 200:
            logger.warning(
                "%s answered a streaming request with %s", self.upstream, self.resp.content_type
            )
            msg = "the upstream answered a streaming request without an event stream"
            return self._fail_before_response("not_event_stream", 502, msg, None, abort=False)
        return await self._relay_buffered()

    # -- relaying ----------------------------------------------------------------------------

    async def _relay_buffered(self) -> web.StreamResponse:
        """Read the whole upstream body (idle, total and size limits), judge it, answer."""
        resp = self.resp
        assert resp is not None
        limit_bytes = self.state.config.max_response_bytes
        chunks: list[bytes] = []
        size_bytes = 0
        try:
            while chunk := await self._read(self.timeouts.idle_s, "idle"):
                size_bytes += len(chunk)
                if size_bytes > limit_bytes:
                    msg = f"the upstream response is larger than {limit_bytes} bytes"
                    return self._fail_before_response("response_too_large", 502, msg, None)
                chunks.append(chunk)
        except _PhaseTimeout as exc:
            return self._fail_before_response(exc.kind + "_timeout", 504, str(exc), exc.kind)
        except aiohttp.ClientError as exc:
            logger.warning("response from %s broke off: %r", self.upstream, exc)
            msg = "the upstream response broke off"
            return self._fail_before_response("broken_stream", 502, msg, None, abort=False)
        self.finished_upstream = True
        resp.release()
        body = b"".join(chunks)
        verdict = status_verdict(resp.status)
        if verdict is Verdict.SUCCESS and resp.status == 200 and is_error_body(body):
            self._fail("error_body")
        elif verdict is Verdict.FAILURE:
            self._fail(f"status_{resp.status}")
        elif verdict is Verdict.NO_VERDICT:
            self._no_verdict()
        else:
            self._succeed()
        return web.Response(
            status=resp.status,
            reason=resp.reason,
            body=body,
            headers=self._response_headers(resp),
        )

    async def _relay_stream(self) -> web.StreamResponse:
        """Relay an SSE stream chunk by chunk (first-token, idle, total and event-size limits),
        watching its events: the verdict comes at ``[DONE]`` or at the failure (see the module
        docstring), never at the first chunk."""
        resp = self.resp
        assert resp is not None
        first_left_s = self.started_s + self.timeouts.first_token_s - time.monotonic()
        try:
            first = await self._read(
                max(first_left_s, 0.0), "first_token", self.timeouts.first_token_s
            )
        except _PhaseTimeout as exc:
            return self._fail_before_response(exc.kind + "_timeout", 504, str(exc), exc.kind)
        except aiohttp.ClientError as exc:
            logger.warning("stream from %s broke off at once: %r", self.upstream, exc)
            msg = "the upstream stream broke off"
            return self._fail_before_response("broken_stream", 502, msg, None, abort=False)

        if not first:  # nothing reached the client yet: a plain 502 is still possible
            msg = "the upstream stream ended before its first event"
            return self._fail_before_response("no_done", 502, msg, None, abort=False)
        now_s = time.monotonic()
        scanner = EventStreamScanner(self.state.config.max_response_bytes)
        try:
            self._watch(scanner, first)
        except EventTooLarge as exc:
            msg = f"the upstream stream: {exc}"
            return self._fail_before_response("event_too_large", 502, msg, None, abort=False)
        if self.saw_error_event:  # judged first: a probe failing at once fails as a probe
            self._judge()
        self._first_token(now_s)  # then the slow-first-token rule, before any [DONE] success
        self._judge()
        self.client_resp = _RelayedStream(
            status=resp.status, reason=resp.reason, headers=self._response_headers(resp)
        )
        self.outcome.status = resp.status
        await self._prepare_client()
        chunk = first
        try:
            while chunk:
                await self._write(chunk)
                chunk = await self._read(self.timeouts.idle_s, "idle")
                self._watch(scanner, chunk)
                self._judge()
        except _PhaseTimeout as exc:
            self._fail(exc.kind + "_timeout")
            self._abort(exc.kind + "_timeout")
            await self._write_sse_error(504, "gateway_timeout", str(exc), timeout=exc.kind)
            return self.client_resp
        except aiohttp.ClientError as exc:
            logger.warning("stream from %s broke off: %r", self.upstream, exc)
            self._fail("broken_stream")
            self._abort("broken_stream", count=False)
            await self._write_sse_error(502, "upstream_error", "the upstream stream broke off")
            return self.client_resp
        except EventTooLarge as exc:
            self._fail("event_too_large")
            self._abort("event_too_large", count=False)
            await self._write_sse_error(502, "upstream_error", f"the upstream stream: {exc}")
            return self.client_resp
        self.finished_upstream = True
        resp.release()
        if not self.saw_done and not self.saw_error_event:
            self._fail("no_done")
            msg = "the upstream stream ended before [DONE]"
            await self._write_sse_error(502, "upstream_error", msg)
            return self.client_resp
        await self._client_eof()
        return self.client_resp

    def _watch(self, scanner: EventStreamScanner, chunk: bytes) -> None:
        """Feed a relayed chunk to ``scanner``; note error events and ``[DONE]``.

        Raises :class:`EventTooLarge` (from the scanner)."""
        for event in scanner.feed(chunk):
            if is_error_event(event):
                self.saw_error_event = True
            elif is_done(event):
                self.saw_done = True

    def _judge(self) -> None:
        """The stream's verdict once known: its first error event fails it, ``[DONE]`` with no
        error before it completes it (the breaker ignores verdicts after the first)."""
        if self.saw_error_event and not self.error_event_counted:
            self.error_event_counted = True
            self._fail("error_event")
        elif self.saw_done and not self.saw_error_event:
            self._succeed()

    async def _read(self, limit_s: float, kind: str, report_limit_s: float | None = None) -> bytes:
        assert self.resp is not None
        try:
            return await _within(
                self.resp.content.readany(), limit_s, kind, self.deadline_s, self.timeouts.total_s
            )
        except _PhaseTimeout as exc:
            if exc.kind == kind and report_limit_s is not None:
                raise _PhaseTimeout(kind, report_limit_s) from None
            raise

    # -- client side -------------------------------------------------------------------------

    def _client_open(self) -> bool:
        transport = self.request.transport
        return transport is not None and not transport.is_closing()

    async def _prepare_client(self) -> None:
        assert self.client_resp is not None
        if not self._client_open():
            raise _ClientGone
        try:
            await self.client_resp.prepare(self.request)
        except ConnectionError as exc:
            raise _ClientGone from exc

    async def _write(self, data: bytes) -> None:
        assert self.client_resp is not None
        if not self._client_open():
            raise _ClientGone
        try:
            await self.client_resp.write(data)
        except ConnectionError as exc:
            raise _ClientGone from exc
        self.tail = (self.tail + data[-2:])[-2:]  # the last two bytes, without copying data

    async def _client_eof(self) -> None:
        assert self.client_resp is not None
        try:
            await self.client_resp.write_eof()
        except ConnectionError as exc:
            raise _ClientGone from exc

    async def _write_sse_error(self, status: int, kind: str, message: str, **extra: Any) -> None:
        """End a started stream with ``data: {"error": {...}}`` on an event boundary."""
        event = b"data: " + json.dumps(error_body(status, kind, message, **extra)).encode()
        prefix = b"" if self.tail.endswith(b"\n\n") else b"\n\n"
        await self._write(prefix + event + b"\n\n")
        await self._client_eof()

    def _response_headers(self, resp: aiohttp.ClientResponse) -> Any:
        """Client headers for ``resp``: hop-by-hop stripped, ``Retry-After`` checked, and the
        testbed's ``X-Gateway-Upstream``."""
        headers = client_response_headers(resp.headers)
        values = headers.popall("Retry-After", [])
        if values:
            # Several Retry-After fields contradict each other: none is trusted.
            wait_s = parse_retry_after(values[0], datetime.now(UTC)) if len(values) == 1 else None
            if wait_s is None:
                logger.info("dropped invalid Retry-After %r from %s", values, self.upstream)
            else:
                headers["Retry-After"] = format_retry_after(wait_s)
                if resp.status in (429, 503):  # where RFC 9110/6585 give it that meaning
                    self.lease.upstream.note_retry_after(time.monotonic(), wait_s)
        headers["X-Gateway-Upstream"] = redact_url(self.upstream)  # no password to the client
        return headers

    # -- verdicts ----------------------------------------------------------------------------

    def _first_token(self, now_s: float) -> None:
        """The stream's first chunk arrived: observe its latency, tell the breaker."""
        first_token_s = now_s - self.started_s
        self.state.metrics.first_token.labels(upstream=self.upstream).observe(first_token_s)
        if self.verdict_given:  # the first chunk already held the stream's verdict
            return
        attempt = self.lease.upstream.breaker.record_first_token(self.attempt, now_s, first_token_s)
        if attempt is None:  # too slow: that was the verdict
            self.verdict_given = True
            self._count_error("slow_first_token")
            self.lease.upstream.note_failure(now_s, "slow_first_token")
        else:
            self.attempt = attempt

    def _succeed(self) -> None:
        if self.verdict_given:
            return
        self.verdict_given = True
        now_s = time.monotonic()
        self.lease.upstream.breaker.record_success(self.attempt, now_s)
        self.lease.upstream.note_success(now_s)

    def _fail(self, kind: str) -> None:
        """Count an upstream error of ``kind``; the attempt's verdict if it has none yet."""
        self._count_error(kind)
        if self.verdict_given:
            return
        self.verdict_given = True
        now_s = time.monotonic()
        self.lease.upstream.breaker.record_failure(self.attempt, now_s, kind)
        self.lease.upstream.note_failure(now_s, kind)

    def _no_verdict(self) -> None:
        if self.verdict_given:
            return
        self.verdict_given = True
        self.lease.upstream.breaker.record_no_verdict(self.attempt, time.monotonic())

    # -- upstream side -----------------------------------------------------------------------

    def _fail_before_response(
        self, kind: str, status: int, message: str, timeout: str | None, abort: bool = True
    ) -> web.Response:
        """Record the failure, cut the upstream exchange and answer with a JSON error.

        ``message`` goes to the client and must not name the upstream. ``abort`` says whether
        cutting counts as an upstream abort (the gateway gave up on a live exchange) rather
        than cleaning up after the upstream already failed.
        """
        self._fail(kind)
        self._abort(kind, count=abort)
        self.outcome.status = status
        err_type = "gateway_timeout" if status == 504 else "bad_gateway"
        if timeout:
            return _json_error(status, err_type, message, timeout=timeout)
        return _json_error(status, err_type, message)

    def _count_error(self, kind: str) -> None:
        self.state.metrics.upstream_errors.labels(upstream=self.upstream, kind=kind).inc()

    def _abort(self, reason: str, count: bool = True) -> None:
        """Close the upstream connection now (the upstream sees a disconnect and aborts)."""
        if self.finished_upstream:
            return
        self.finished_upstream = True
        _close_call(self.call)
        if self.resp is not None:
            self.resp.close()
        if count:
            self.state.metrics.upstream_aborts.labels(upstream=self.upstream, reason=reason).inc()

    def _on_client_gone(self) -> None:
        """The client went away: free the probe slot, then abort or orphan the upstream work."""
        self._no_verdict()
        if self.finished_upstream or self.call is None:
            return
        if self.state.config.propagate_cancellation:
            self._abort("client_disconnect")
            return
        self.finished_upstream = True
        self.state.metrics.orphaned.labels(upstream=self.upstream).inc()
        logger.info("client went away; orphaning upstream request to %s", self.upstream)
        self.state.spawn(_drain(self.call, self.deadline_s, self.upstream))


# -- handlers ----------------------------------------------------------------------------------


def _route_name(request: web.Request) -> str:
    resource = request.match_info.route.resource
    return resource.canonical if resource is not None else request.path


async def proxy_handler(request: web.Request) -> web.StreamResponse:
    """Forward a ``/v1/*`` request to the least-loaded admitted upstream."""
    state = request.app[STATE_KEY]
    outcome = _Outcome(route=_route_name(request))
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
    request: web.Request, state: GatewayState, outcome: _Outcome
) -> web.StreamResponse:
    limit_bytes = state.config.max_body_bytes
    try:
        if request.content_length is not None and request.content_length > limit_bytes:
            raise web.HTTPRequestEntityTooLarge(limit_bytes, request.content_length)
        body = await request.read()
    except web.HTTPRequestEntityTooLarge:
        state.metrics.rejections.labels(reason="body_too_large").inc()
        msg = f"request body larger than {limit_bytes} bytes"
        too_large = _json_error(413, "request_too_large", msg)
        too_large.force_close()  # the unread body must not be parsed as a next request
        return too_large

    retry_after = str(state.config.admission.retry_after_s)
    try:
        await state.admission.acquire()
    except AdmissionRejected as exc:
        state.metrics.rejections.labels(reason=exc.reason).inc()
        msg = f"gateway overloaded ({exc.reason})"
        return _json_error(429, "overloaded", msg, headers={"Retry-After": retry_after})
    try:
        tried: frozenset[str] = frozenset()
        response: web.StreamResponse | None = None
        for attempt in range(1 + state.config.connect_retries):
            lease = state.pool.choose(time.monotonic(), exclude=tried)
            if lease is None:
                if response is not None:
                    return response  # the refused attempt's 502: nowhere else to go
                return _no_upstream(state)
            if attempt:
                state.metrics.retries.labels(upstream=lease.upstream.url).inc()
            outcome.upstream = lease.upstream.url
            exchange = _Exchange(request, state, outcome, lease, body)
            try:
                response = await exchange.run()
            finally:
                state.pool.release(lease)
            if not exchange.connect_refused:
                return response
            tried = tried | {lease.upstream.url}
        assert response is not None
        return response
    finally:
        state.admission.release()


def _no_upstream(state: GatewayState) -> web.Response:
    """503 when no upstream takes traffic; ``Retry-After`` is the soonest any may again: the
    longer of its breaker's remaining cool-down and the wait it asked for, whole seconds >= 1."""
    state.metrics.rejections.labels(reason="no_upstream").inc()
    wait_s = state.pool.seconds_until_retry(time.monotonic())
    headers = {"Retry-After": format_retry_after(wait_s, minimum_s=1)}
    return _json_error(503, "no_upstream", "no upstream is taking traffic", headers)


async def metrics_handler(request: web.Request) -> web.Response:
    """``/metrics``: this gateway's registry in Prometheus text format."""
    state = request.app[STATE_KEY]
    return web.Response(body=state.metrics.exposition(), headers={"Content-Type": CONTENT_TYPE})
