"""One streamed ``/v1/completions`` or ``/v1/chat/completions`` request → one record.

Nothing raised inside a request escapes: connection errors, HTTP errors, error events inside
a 200 stream, protocol errors (a chunk field of the wrong type), a stalled or overlong
response, a usage mismatch, and any unexpected exception all end up in the record's
``status``/``error`` fields (type and message), so one bad response never stops a phase.
The prompt is encoded just before the send and not kept while the response streams, so a
phase holds only the bodies of its requests in flight.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

import aiohttp

from loadgen.chunks import CompletionChunk, parse_chunk, parse_event
from loadgen.clock import Clock
from loadgen.connections import RecordTrace
from loadgen.records import RequestRecord, Status
from loadgen.runformat.rows import NOT_CONNECTED, excess_tokens
from loadgen.token_timing import TokenTally
from scenarios.request_extras import PLAN_BODY_FIELDS
from scenarios.requests import PlannedRequest
from server.net.errors import describe_exception
from server.net.json_text import NonFiniteValue, dumps
from server.net.sse import DONE, SSEDecoder, SSEEvent, SSELineTooLong
from server.net.urls import redact_urls_in

_JSON = {"Content-Type": "application/json"}
#: What an error response's record keeps: its first 300 characters, read from at most
#: 1200 bytes (4 bytes a UTF-8 character), never the whole body.
_ERROR_HEAD_CHARS = 300
_ERROR_HEAD_BYTES = 4 * _ERROR_HEAD_CHARS


@dataclass(frozen=True)
class Target:
    """Where requests go: base URL (``http://127.0.0.1:PORT``) and served model name."""

    url: str
    model: str


#: Request path of each endpoint.
ENDPOINT_PATHS = {"completions": "/v1/completions", "chat": "/v1/chat/completions"}


def completion_body(planned: PlannedRequest, model: str) -> dict[str, object]:
    """The JSON body for the request's endpoint: ``extra_body``, then the prompt (token IDs or
    text to ``/v1/completions``, messages to ``/v1/chat/completions``), the exact output
    length (``max_tokens``; chat: ``max_completion_tokens``) with ``ignore_eos`` unless the
    request turns it off, streamed running usage and sampling. The plan's fields
    (``scenarios.request_extras.PLAN_BODY_FIELDS``) are never taken from ``extra_body``, so it
    cannot override one even where the plan leaves it out (``ignore_eos`` off, ``max_tokens``
    to chat); a plan refuses such a field before anything starts."""
    extra = {k: v for k, v in planned.extra_body.items() if k not in PLAN_BODY_FIELDS}
    body: dict[str, object] = {**extra, "model": model}
    if planned.endpoint == "chat":
        body["messages"] = [{"role": r, "content": c} for r, c in planned.messages or ()]
        body["max_completion_tokens"] = planned.max_tokens
    else:
        body["prompt"] = (
            planned.prompt_text
            if planned.prompt_text is not None
            else list(planned.prompt_token_ids)
        )
        body["max_tokens"] = planned.max_tokens
    if planned.ignore_eos:
        body["ignore_eos"] = True
    body["stream"] = True
    body["stream_options"] = {"include_usage": True, "continuous_usage_stats": True}
    body.update(planned.sampling)
    return body


def _check_usage(
    record: RequestRecord, prompt_exact: bool = True, exact_output: bool = True
) -> str | None:
    """A mismatch between what was asked and what the server says it did, else ``None``.

    In ``text`` token timing the streamed count is reconciled with the usage, so the last
    comparison can only fail when the server reported a running usage that disagrees with
    its final one. A text or chat prompt (``prompt_exact`` false) is measured in the server's
    tokens by its usage, so a planned length that differs is not an error (the report
    compares them); without ``ignore_eos`` (``exact_output`` false) a shorter output is the
    server's choice, but more than was asked still is an error.
    """
    if (
        prompt_exact
        and record.usage_prompt_tokens is not None
        and record.usage_prompt_tokens != record.prompt_tokens_sent
    ):
        return (
            f"usage.prompt_tokens={record.usage_prompt_tokens} but "
            f"{record.prompt_tokens_sent} prompt tokens were sent"
        )
    if record.usage_completion_tokens is None:
        return "no usage reported"
    short_allowed = not exact_output and record.usage_completion_tokens < record.max_tokens
    if record.usage_completion_tokens != record.max_tokens and not short_allowed:
        return (
            f"usage.completion_tokens={record.usage_completion_tokens}, "
            f"max_tokens={record.max_tokens} asked with ignore_eos"
        )
    if record.output_tokens != record.usage_completion_tokens:
        return (
            f"counted {record.output_tokens} streamed tokens, "
            f"usage says {record.usage_completion_tokens}"
        )
    return None


#: Added to a failed record's reason when its stream ended inside an event.
CUT_EVENT = "the stream ended inside an event (no blank line after it), which is discarded"


def _stall_s(session: aiohttp.ClientSession) -> str:
    stall = session.timeout.sock_read
    return "?" if stall is None else f"{stall:g}"


class _Stream:
    """Reads one SSE response into a record: tokens via a :class:`TokenTally`, metadata."""

    def __init__(self, record: RequestRecord, disconnect_after: int | None, clock: Clock):
        self.record = record
        self.tally = TokenTally()
        self.disconnect_after = disconnect_after
        self.clock = clock
        self.stopped_by: Status | None = None
        self.applied = False
        #: The stream ended inside an event (no blank line after it), which was discarded.
        self.cut_event = False

    async def read(self, response: aiohttp.ClientResponse) -> Status | None:
        """Consume the body; ``None`` when it ended (``[DONE]`` or EOF), else the status
        that stopped it early (``error`` event, or ``aborted`` by a planned disconnect).
        An event the stream ended inside (its blank line never came) is discarded, as the
        SSE rules say, and noted in ``cut_event``.

        Per read: one stamp, then the events it completed; reads of plain ``data:`` events
        (every vLLM chunk) take the decoder's fast path and skip building event objects.
        """
        decoder = SSEDecoder()
        now_ns = self.clock.now_ns
        account = self._account
        now = now_ns()
        async for raw in response.content.iter_any():
            now = now_ns()  # one stamp per read: what arrived together
            plain = decoder.feed_plain(raw)
            if plain is None:
                for event in decoder.feed(raw):
                    if self._consume(event, now, response):
                        return self.stopped_by
                continue
            for data in plain:
                if data == DONE or account(parse_chunk(data), now, response):
                    return self.stopped_by
        self.cut_event = decoder.end()
        return self.stopped_by

    def _consume(self, event: SSEEvent, now: int, response: aiohttp.ClientResponse) -> bool:
        """Account for one event; True when the stream must not be read further."""
        if event.data == DONE and event.event == "message":
            return True
        return self._account(parse_event(event), now, response)

    def _account(self, chunk: CompletionChunk, now: int, response: aiohttp.ClientResponse) -> bool:
        """Account for one parsed chunk; True when the stream must not be read further."""
        record = self.record
        if chunk.error is not None:
            record.status = self.stopped_by = "error"
            record.error = redact_urls_in(f"error event in stream: {chunk.error}")
            return True
        self.tally.add(chunk, now)
        if chunk.completion_tokens is not None:
            record.usage_completion_tokens = chunk.completion_tokens
        if chunk.prompt_tokens is not None:
            record.usage_prompt_tokens = chunk.prompt_tokens
        if chunk.cached_tokens is not None:
            record.cached_tokens = chunk.cached_tokens
        if chunk.finish_reason is not None:
            record.finish_reason = chunk.finish_reason
        limit = self.disconnect_after
        if limit is not None and self.tally.received_tokens >= limit:
            record.disconnect_ns = self.clock.now_ns()
            record.status = self.stopped_by = "aborted"
            response.close()  # drop the connection: the server should abort the request
            return True
        return False

    def settle(self, prompt_exact: bool, exact_output: bool) -> None:
        """The record's status once its stream ended by itself: ``ok`` only if the usage
        matches what was asked and streamed (:func:`_check_usage`); an event the stream ended
        inside was discarded (SSE rules), and a failed record's reason then says so."""
        self.apply()
        mismatch = _check_usage(self.record, prompt_exact, exact_output)
        if mismatch and self.cut_event:
            mismatch += f"; {CUT_EVENT}"
        self.record.status = "error" if mismatch else "ok"
        self.record.error = mismatch

    def apply(self) -> None:
        """Copy the token stamps into the record (once)."""
        if self.applied:
            return
        self.applied = True
        stamps = self.tally.result()
        self.record.chunk_ns = stamps.chunk_ns
        self.record.chunk_tokens = stamps.chunk_tokens
        self.record.token_timing = stamps.token_timing


def _record_failure(record: RequestRecord, exc: Exception, session: aiohttp.ClientSession) -> None:
    """Why one request failed, on its record: the status and a one-line ``error``."""
    if isinstance(exc, aiohttp.ClientConnectorError | aiohttp.ConnectionTimeoutError):
        # No connection was made, so no byte of the request left the client: not sent,
        # never "sent and failed" (a dead server must not count its refusals as load).
        record.status, record.sent_ns = "not_sent", None
        record.error = f"{NOT_CONNECTED}: {describe_exception(exc)}"
        return
    record.status = "error"
    if isinstance(exc, aiohttp.SocketTimeoutError):
        record.error = f"stalled: no byte from the server for {_stall_s(session)} s"
    elif isinstance(exc, TimeoutError) and (total := session.timeout.total) is not None:
        record.error = f"timed out: not complete within the request timeout of {total:g} s"
    elif isinstance(exc, SSELineTooLong):  # the stream is broken: the reason, not the type
        record.error = str(exc)
    else:
        record.error = describe_exception(exc)


async def send_request(
    session: aiohttp.ClientSession,
    target: Target,
    planned: PlannedRequest,
    record: RequestRecord,
    clock: Clock,
) -> RequestRecord:
    """Send ``planned``, stream the response, and fill ``record`` in place (also returned).

    TTFT/ITL inputs are the arrival stamps of reads that carried at least one generated token
    (``record.chunk_ns`` / ``chunk_tokens``, counted as ``record.token_timing`` says); the
    final usage-only chunk adds no stamp. ``sent_ns`` is stamped after the body is encoded;
    with a session from :func:`loadgen.connections.open_session` the connection and write
    stamps are filled too. The request carries ``X-Request-Id: record.request_id`` unless the
    plan's own headers set one. The status is ``ok`` only if the final usage matches what was
    asked (prompt length, ``max_tokens``) and what was streamed (:meth:`_Stream.settle`).

    Timeouts come from the session (:func:`loadgen.connections.open_session`): no byte for
    ``sock_read`` seconds is the error ``stalled: …``; a response not complete within
    ``total`` seconds is ``timed out: …``. Never raises except ``CancelledError``.
    """
    try:
        body = dumps(completion_body(planned, target.model), "request body", separators=(",", ":"))
    except NonFiniteValue as exc:  # JSON has no NaN: the request cannot be sent as planned
        record.status, record.error = "not_sent", str(exc)
        return record
    stream = _Stream(record, planned.disconnect_after_tokens, clock)
    path = ENDPOINT_PATHS[planned.endpoint]
    # The request id travels as X-Request-Id, so a relay's records of the request (the
    # gateway's routing decisions) and vLLM's own logs join this record.
    headers = {**_JSON, "X-Request-Id": record.request_id, **dict(planned.headers)}
    prompt_exact = planned.prompt_text is None and planned.messages is None
    exact_output = planned.ignore_eos
    del planned  # the prompt is not needed any more: keep only the encoded body
    record.sent_ns = clock.now_ns()
    try:
        async with session.post(
            f"{target.url}{path}",
            data=body,
            headers=headers,
            trace_request_ctx=RecordTrace(record, clock),
        ) as response:
            record.headers_ns = clock.now_ns()
            record.http_status = response.status
            record.upstream = response.headers.get("X-Gateway-Upstream")
            if response.status != 200:
                # Only the start is kept: an error page of any size is never read whole.
                head = await response.content.read(_ERROR_HEAD_BYTES)
                text = head.decode(response.charset or "utf-8", errors="replace")
                record.status = "error"
                record.error = redact_urls_in(f"HTTP {response.status}: {text[:_ERROR_HEAD_CHARS]}")
                # As sent (the first field, at most 100 characters): whether it is valid is
                # the analysis's question, and a bad one is evidence.
                retry_after = response.headers.get("Retry-After")
                record.retry_after = None if retry_after is None else retry_after[:100]
                return record
            stopped = await stream.read(response)
        if stopped is None:
            stream.settle(prompt_exact, exact_output)
    except asyncio.CancelledError:
        record.status = "error"
        record.error = "cancelled before completion (run interrupted)"
        raise
    except Exception as exc:  # whatever one request hits stays on its record
        _record_failure(record, exc, session)
    finally:
        stream.apply()
        record.excess_tokens = excess_tokens(record)
        record.end_ns = clock.now_ns()
    return record
