"""What one streamed OpenAI completion chunk means (pure, no I/O).

The events come from the one SSE decoder (:class:`server.net.sse.SSEDecoder`);
:func:`parse_chunk` says what one event's JSON means, :func:`parse_event` what any event
means (an ``event: error`` too). Tokens are counted from the server's running usage when it
sends one; what to do when it does not is :mod:`loadgen.token_timing`'s concern.
"""

from __future__ import annotations

import json
from typing import Annotated, Any, NamedTuple

import msgspec

from server.net.sse import SSEEvent


class ChunkProtocolError(ValueError):
    """A stream chunk that breaks the OpenAI completion-chunk protocol: not JSON, not an
    object, or a field of the wrong type (the message names the field, e.g.
    ``$.usage.completion_tokens``)."""


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
