"""Server-sent-events decoding and OpenAI completion-chunk interpretation (pure, no I/O).

The decoder takes raw network reads (any split: an event or a line may span reads, one read
may hold many events) and yields events; :func:`parse_chunk` says what one event's JSON means.
Tokens are counted from the server's running usage when it sends one; what to do when it does
not is :mod:`loadgen.token_timing`'s concern.
"""

from __future__ import annotations

import json
from typing import Any, NamedTuple

import msgspec

DONE = "[DONE]"


class SSEEvent(NamedTuple):
    """One dispatched event: its joined ``data:`` lines and its ``event:`` type.

    ``event`` is ``"message"`` when the server named none (the SSE default).
    """

    data: str
    event: str = "message"


class SSEDecoder:
    """Turns an SSE byte stream into :class:`SSEEvent` objects (WHATWG SSE parsing rules).

    Feed raw reads with :meth:`feed` (or whole lines with :meth:`feed_line`); an empty line
    ends an event; comments (``:``), ``id:`` and ``retry:`` are ignored. Lines end with LF or
    CRLF. Call :meth:`flush` at end of stream: a last event whose blank line never came (or a
    last line without its newline) is returned instead of being lost.

    :meth:`feed_plain` is the fast path for the common read, where every event is one
    ``data: `` line (every vLLM chunk): it returns their data, cut at ``\n\n`` in a few
    C-level operations over the whole read, or declines and leaves the read to :meth:`feed`.
    Both give the same events for any split of the stream.
    """

    def __init__(self) -> None:
        self._data: list[str] = []
        self._event = ""
        # Unconsumed bytes: after the last complete event (fast path) or line (line by line).
        self._partial = b""

    def feed_plain(self, raw: bytes) -> list[str] | None:
        """Consume one read if every event it completes is a single ``data: `` line with LF
        line ends, and return those events' data, in order; else consume nothing and return
        ``None`` (then call :meth:`feed` with the same read)."""
        if self._data or self._event:
            return None  # inside an event that a line-by-line read started
        buffer = self._partial + raw if self._partial else raw
        body, sep, rest = buffer.rpartition(b"\n\n")
        if not sep:
            self._partial = buffer  # no event complete yet: keep the bytes as they are
            return []
        # One data line per event iff the only newlines are the separators before "data: ".
        if (
            not body.startswith(b"data: ")
            or b"\r" in body
            or body.count(b"\n") != 2 * body.count(b"\n\ndata: ")
        ):
            return None
        self._partial = rest
        return body[6:].decode("utf-8", errors="replace").split("\n\ndata: ")

    def feed(self, raw: bytes) -> list[SSEEvent]:
        """Consume one network read; return the events it completes, in order."""
        plain = self.feed_plain(raw)
        if plain is not None:
            return [SSEEvent(data) for data in plain]
        buffer = self._partial + raw if self._partial else raw
        return self._feed_lines(buffer)

    def _feed_lines(self, buffer: bytes) -> list[SSEEvent]:
        lines = buffer.split(b"\n")
        self._partial = lines.pop()  # b"" when the read ended on a newline
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
        if text == "":
            if not self._data:
                self._event = ""  # an event without data is not dispatched (SSE rules)
                return None
            event = SSEEvent("\n".join(self._data), self._event or "message")
            self._data = []
            self._event = ""
            return event
        if text.startswith(":"):
            return None
        field, _, value = text.partition(":")
        value = value[1:] if value.startswith(" ") else value
        if field == "data":
            self._data.append(value)
        elif field == "event":
            self._event = value
        return None

    def flush(self) -> SSEEvent | None:
        """At end of stream: the pending event (a last line without newline included)."""
        partial, self._partial = self._partial, b""
        # What is pending holds no blank line between two data lines, so at most one event.
        events = [e for line in partial.split(b"\n") if (e := self.feed_line(line)) is not None]
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


def _choice_text(choice: dict[str, object]) -> bool:
    if choice.get("text"):
        return True
    delta = choice.get("delta")
    if isinstance(delta, dict):
        return any(delta.get(k) for k in ("content", "reasoning_content", "reasoning"))
    return False


def parse_event(event: SSEEvent) -> CompletionChunk:
    """Interpret one event of ``/v1/completions`` (or chat) streaming.

    An ``event: error`` is an error whatever its data (JSON with a message, or plain text);
    otherwise the data must be a JSON object, see :func:`parse_chunk`.

    Raises:
        ValueError: a non-error event whose data is not a JSON object.
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
# json.loads per chunk. Anything that does not fit these types (a choice that is not an
# object, a count that is not an int) goes through the generic json path instead.
class _Details(msgspec.Struct):
    cached_tokens: int | None = None


class _Usage(msgspec.Struct):
    completion_tokens: int | None = None
    prompt_tokens: int | None = None
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
    error: Any = msgspec.UNSET
    object: Any = None


_decode_chunk = msgspec.json.Decoder(_Chunk).decode
_new = tuple.__new__  # builds a CompletionChunk from a tuple without NamedTuple's Python __new__


def parse_chunk(data: str | bytes) -> CompletionChunk:
    """Interpret one SSE data payload of ``/v1/completions`` (or chat) streaming.

    Error shapes: ``{"error": {...}}`` (vLLM and OpenAI) and ``{"object": "error",
    "message": ...}`` (vLLM's older ``ErrorResponse``).

    Raises:
        ValueError: the payload is not a JSON object.
    """
    try:
        chunk = _decode_chunk(data)
    except msgspec.ValidationError:
        return _parse_generic(data)
    except msgspec.DecodeError as exc:
        raise ValueError(f"chunk is not JSON: {exc}") from None
    if chunk.error is not msgspec.UNSET or chunk.object == "error":
        return _parse_generic(data)
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


def _parse_generic(data: str | bytes) -> CompletionChunk:
    """:func:`parse_chunk` for payloads outside the typed fast path (errors, odd shapes)."""
    obj = json.loads(data)
    if not isinstance(obj, dict):
        text = data if isinstance(data, str) else data.decode("utf-8", errors="replace")
        raise ValueError(f"chunk is not a JSON object: {text[:80]!r}")
    if "error" in obj:
        return error_chunk(_error_message(obj["error"]))
    if obj.get("object") == "error":
        return error_chunk(str(obj.get("message", str(data)[:300])))
    usage = obj.get("usage") or {}
    details = usage.get("prompt_tokens_details") or {}
    choices = [c for c in obj.get("choices") or [] if isinstance(c, dict)]
    finish = next((c.get("finish_reason") for c in choices if c.get("finish_reason")), None)
    return CompletionChunk(
        completion_tokens=usage.get("completion_tokens"),
        prompt_tokens=usage.get("prompt_tokens"),
        cached_tokens=details.get("cached_tokens"),
        has_choice=bool(choices),
        has_text=any(_choice_text(c) for c in choices),
        finish_reason=finish,
        error=None,
    )
