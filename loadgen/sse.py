"""Server-sent-events decoding and OpenAI completion-chunk interpretation (pure, no I/O).

The decoder takes raw network reads (any split: an event or a line may span reads, one read
may hold many events) and yields events; :func:`parse_chunk` says what one event's JSON means.
Tokens are counted from the server's running usage when it sends one; what to do when it does
not is :mod:`loadgen.token_timing`'s concern.
"""

from __future__ import annotations

import json
import re
from typing import Annotated, Any, NamedTuple

import msgspec

from server.net.limits import SSE_MAX_LINE_BYTES, too_large

DONE = "[DONE]"

#: SSE line ends (WHATWG HTML §9.2.5): CRLF, LF or a bare CR.
_LINE_END = re.compile(rb"\r\n|\r|\n")


class ChunkProtocolError(ValueError):
    """A stream chunk that breaks the OpenAI completion-chunk protocol: not JSON, not an
    object, or a field of the wrong type (the message names the field, e.g.
    ``$.usage.completion_tokens``)."""


class SSELineTooLong(ValueError):
    """A line of the stream (or an event's data) longer than the decoder's limit; reading
    stopped there (the message: ``"SSE line larger than 1048576 bytes"``)."""

    def __init__(self, limit: int) -> None:
        super().__init__(too_large("SSE line", limit))


class SSEEvent(NamedTuple):
    """One dispatched event: its joined ``data:`` lines and its ``event:`` type.

    ``event`` is ``"message"`` when the server named none (the SSE default).
    """

    data: str
    event: str = "message"


class SSEDecoder:
    """Turns an SSE byte stream into :class:`SSEEvent` objects (WHATWG SSE parsing rules).

    Feed raw reads with :meth:`feed` (or whole lines with :meth:`feed_line`); an empty line
    ends an event; comments (``:``), ``id:`` and ``retry:`` are ignored. Lines end with LF,
    CRLF or a bare CR (the spec allows all three); a read that ends in CR ends its line at
    once, and an LF opening the next read is then the second half of that CRLF, not a blank
    line. Call :meth:`flush` at end of stream: a last event whose blank line never came (or a
    last line without its newline) is returned instead of being lost.

    :meth:`feed_plain` is the fast path for the common read, where every event is one
    ``data: `` line with LF line ends (every vLLM chunk): it returns their data, cut at
    ``\n\n`` in a few C-level operations over the whole read, or declines (any CR, or an
    event begun line by line) and leaves the read to :meth:`feed`.
    Both give the same events for any split of the stream.

    Bounded: a line longer than ``max_line_bytes`` (default
    ``server.net.limits.SSE_MAX_LINE_BYTES``, 1 MiB; line end excluded), or an event whose data
    lines together pass it, raises :class:`SSELineTooLong` as soon as a read shows it, so
    the decoder never holds more than the limit plus one read (an event's data is counted in
    characters, one per byte for ASCII).

    Raises (``feed``, ``feed_plain``, ``feed_line``, ``flush``):
        SSELineTooLong: see above.
    """

    def __init__(self, max_line_bytes: int = SSE_MAX_LINE_BYTES) -> None:
        self.max_line_bytes = max_line_bytes
        self._data_bytes = 0
        self._data: list[str] = []
        self._event = ""
        # Unconsumed bytes: after the last complete event (fast path) or line (line by line).
        self._partial = b""
        # The last read ended in CR: an LF at the start of the next one completes that CRLF.
        self._skip_lf = False

    def feed_plain(self, raw: bytes) -> list[str] | None:
        """Consume one read if every event it completes is a single ``data: `` line with LF
        line ends, and return those events' data, in order; else consume nothing and return
        ``None`` (then call :meth:`feed` with the same read)."""
        if self._data or self._event or self._skip_lf:
            return None  # inside an event (or a CRLF) that a line-by-line read started
        buffer = self._partial + raw if self._partial else raw
        body, sep, rest = buffer.rpartition(b"\n\n")
        if not sep:
            if b"\r" in raw:
                return None  # CR line ends (bare CR events never hold "\n\n"): line by line
            if len(buffer) > self.max_line_bytes:
                return None  # maybe one long line, maybe many: line by line decides
            self._partial = buffer  # no event complete yet: keep the bytes as they are
            return []
        # One data line per event iff the only newlines are the separators before "data: ".
        if (
            not body.startswith(b"data: ")
            or b"\r" in buffer  # also in the rest: a bare-CR event there would wait a read
            or body.count(b"\n") != 2 * body.count(b"\n\ndata: ")
            or len(rest) > self.max_line_bytes
        ):
            return None
        events = body[6:].decode("utf-8", errors="replace").split("\n\ndata: ")
        if len(body) > self.max_line_bytes:  # rare: only then look at each line
            limit = self.max_line_bytes - 6  # "data: " counts into the line
            if any(len(e.encode()) > limit for e in events):
                raise SSELineTooLong(self.max_line_bytes)
        self._partial = rest
        return events

    def feed(self, raw: bytes) -> list[SSEEvent]:
        """Consume one network read; return the events it completes, in order."""
        plain = self.feed_plain(raw)
        if plain is not None:
            return [SSEEvent(data) for data in plain]
        buffer = self._partial + raw if self._partial else raw
        return self._feed_lines(buffer)

    def _feed_lines(self, buffer: bytes) -> list[SSEEvent]:
        if self._skip_lf:
            self._skip_lf = False
            if buffer.startswith(b"\n"):
                buffer = buffer[1:]  # the LF of a CRLF split across two reads
        lines = _LINE_END.split(buffer)
        self._partial = lines.pop()  # b"" when the read ended on a line end
        if len(self._partial) > self.max_line_bytes:
            raise SSELineTooLong(self.max_line_bytes)
        self._skip_lf = buffer.endswith(b"\r")
        events = []
        for line in lines:
            event = self.feed_line(line)
            if event is not None:
                events.append(event)
        return events

    def feed_line(self, line: bytes | str) -> SSEEvent | None:
        """Consume one line (with or without its newline); return the event it completes."""
        text = line.decode("utf-8", errors="replace") if isinstance(line, bytes) else line
        text = text.rstrip("\r\n")
        # UTF-8 takes at most 4 bytes a character: only a line this long can pass the limit.
        limit = self.max_line_bytes
        if len(text) * 4 > limit and len(text.encode()) > limit:
            raise SSELineTooLong(limit)
        if text == "":
            if not self._data:
                self._event = ""  # an event without data is not dispatched (SSE rules)
                return None
            event = SSEEvent("\n".join(self._data), self._event or "message")
            self._data = []
            self._data_bytes = 0
            self._event = ""
            return event
        if text.startswith(":"):
            return None
        field, _, value = text.partition(":")
        value = value[1:] if value.startswith(" ") else value
        if field == "data":
            self._data_bytes += len(value) + 1
            if self._data_bytes > self.max_line_bytes:  # many lines, no blank one: bounded too
                raise SSELineTooLong(self.max_line_bytes)
            self._data.append(value)
        elif field == "event":
            self._event = value
        return None

    def flush(self) -> SSEEvent | None:
        """At end of stream: the pending event (a last line without newline included)."""
        partial, self._partial = self._partial, b""
        # What is pending holds no blank line between two data lines, so at most one event.
        self._skip_lf = False
        lines = _LINE_END.split(partial)
        events = [e for line in lines if (e := self.feed_line(line)) is not None]
        last = self.feed_line("")
        return events[0] if events else last


class CompletionChunk(NamedTuple):
    """What one streamed completion chunk says.

    Attributes:
        completion_tokens: the usage's count of generated tokens, if the chunk has a usage
            (on a chunk with a choice: the server's running count, ``continuous_usage_stats``;
            on the final choice-less chunk: the total).
        prompt_tokens: prompt tokens per the usage block, if present.
        cached_tokens: ``usage.prompt_tokens_details.cached_tokens`` (prefix-cache hit tokens).
        has_choice: the chunk carries at least one choice (possibly with empty text), not
            just a usage block.
        has_text: some choice carries non-empty text (completions ``text``; chat
            ``delta.content`` or reasoning text).
        finish_reason: the choice's finish reason, if any.
        error: an error message when the chunk is an error event inside a 200 stream.
    """

    completion_tokens: int | None
    prompt_tokens: int | None
    cached_tokens: int | None
    has_choice: bool
    has_text: bool
    finish_reason: str | None
    error: str | None


def _error_message(err: object) -> str:
    if isinstance(err, dict):
        return str(err.get("message", err))
    return str(err)


def error_chunk(message: str) -> CompletionChunk:
    """A chunk that only says the stream failed with ``message``."""
    return CompletionChunk(None, None, None, False, False, None, message)


def parse_event(event: SSEEvent) -> CompletionChunk:
    """Interpret one event of ``/v1/completions`` (or chat) streaming.

    An ``event: error`` is an error whatever its data (JSON with a message, or plain text);
    otherwise the data must be a JSON object, see :func:`parse_chunk`.

    Raises:
        ChunkProtocolError: a non-error event whose data breaks the protocol.
    """
    if event.event == "error":
        try:
            obj = json.loads(event.data)
        except ValueError:
            return error_chunk(event.data or "error event without a message")
        if isinstance(obj, dict):
            return error_chunk(_error_message(obj.get("error", obj)))
        return error_chunk(event.data)
    return parse_chunk(event.data)


# The fields of a chunk that matter, as typed structs: msgspec decodes only these and skips
# the rest (ids, logprobs, token IDs) without building them, several times faster than
# json.loads per chunk, and checks their types: a field of the wrong type (a count sent as a
# string, a usage that is not an object) is a protocol error naming the field, never a
# value that breaks the token arithmetic later.
Count = Annotated[int, msgspec.Meta(ge=0)]


class _Details(msgspec.Struct):
    cached_tokens: Count | None = None


class _Usage(msgspec.Struct):
    completion_tokens: Count | None = None
    prompt_tokens: Count | None = None
    prompt_tokens_details: _Details | None = None


class _Delta(msgspec.Struct):
    content: str | None = None
    reasoning_content: str | None = None
    reasoning: str | None = None


class _Choice(msgspec.Struct):
    text: str | None = None
    delta: _Delta | None = None
    finish_reason: str | None = None


class _Chunk(msgspec.Struct):
    choices: list[_Choice] | None = None
    usage: _Usage | None = None
    error: Any = None
    object: Any = None


_decode_chunk = msgspec.json.Decoder(_Chunk).decode
_new = tuple.__new__  # builds a CompletionChunk from a tuple without NamedTuple's Python __new__


def parse_chunk(data: str | bytes) -> CompletionChunk:
    """Interpret one SSE data payload of ``/v1/completions`` (or chat) streaming.

    Error shapes: ``{"error": {...}}`` (vLLM and OpenAI; ``"error": null`` is no error) and
    ``{"object": "error", "message": ...}`` (vLLM's older ``ErrorResponse``). An error chunk is
    reported as one whatever its other fields hold.

    Raises:
        ChunkProtocolError: the payload is not JSON, not an object, or a field the client
            reads (``choices[].text``, ``choices[].delta.*``, ``choices[].finish_reason``,
            ``usage.*_tokens``, ``usage.prompt_tokens_details.cached_tokens``) has the wrong
            type (counts: non-negative integers); the message names the field.
    """
    try:
        chunk = _decode_chunk(data)
    except msgspec.ValidationError as exc:
        return _error_or_raise(data, exc)
    except msgspec.DecodeError as exc:
        raise ChunkProtocolError(f"chunk is not JSON: {exc}") from None
    if chunk.error is not None or chunk.object == "error":
        return _error_or_raise(data, None)
    usage = chunk.usage
    if usage is None:
        completion = prompt = cached = None
    else:
        completion, prompt = usage.completion_tokens, usage.prompt_tokens
        details = usage.prompt_tokens_details
        cached = None if details is None else details.cached_tokens
    choices = chunk.choices
    if not choices:
        return _new(CompletionChunk, (completion, prompt, cached, False, False, None, None))
    has_text = False
    finish = None
    for c in choices:
        if c.text or (c.delta is not None and _delta_text(c.delta)):
            has_text = True
        if finish is None and c.finish_reason:
            finish = c.finish_reason
    return _new(CompletionChunk, (completion, prompt, cached, True, has_text, finish, None))


def _delta_text(delta: _Delta) -> bool:
    return bool(delta.content or delta.reasoning_content or delta.reasoning)


def _error_or_raise(data: str | bytes, invalid: msgspec.ValidationError | None) -> CompletionChunk:
    """The error chunk ``data`` reports; else the protocol error ``invalid`` describes."""
    obj = json.loads(data)
    if not isinstance(obj, dict):
        text = data if isinstance(data, str) else data.decode("utf-8", errors="replace")
        raise ChunkProtocolError(f"chunk is not a JSON object: {text[:80]!r}")
    if obj.get("error") is not None:
        return error_chunk(_error_message(obj["error"]))
    if obj.get("object") == "error":
        return error_chunk(str(obj.get("message", str(data)[:300])))
    # msgspec names the field: "Expected `int | null`, got `str` - at `$.usage.completion_tokens`"
    raise ChunkProtocolError(f"chunk field of the wrong type: {invalid}")
