"""Server-sent-events decoding and OpenAI completion-chunk interpretation (pure, no I/O).

Tokens are counted from the server's running usage (``continuous_usage_stats``), never from
text: a generated token can decode to empty text (a partial UTF-8 byte), and some servers
send chunks that carry no token.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

DONE = "[DONE]"


class SSEDecoder:
    """Turns raw SSE lines into event payloads (the joined ``data:`` fields of each event).

    Feed lines as they arrive (bytes or str, with or without the trailing newline); an empty
    line ends an event. Comments (``:``) and other fields (``event:``, ``id:``) are ignored.
    """

    def __init__(self) -> None:
        self._data: list[str] = []

    def feed_line(self, line: bytes | str) -> str | None:
        """Consume one line; return the event's data when this line completes an event."""
        text = line.decode("utf-8", errors="replace") if isinstance(line, bytes) else line
        text = text.rstrip("\r\n")
        if text == "":
            if not self._data:
                return None
            data = "\n".join(self._data)
            self._data = []
            return data
        if text.startswith(":"):
            return None
        field, _, value = text.partition(":")
        if field == "data":
            self._data.append(value[1:] if value.startswith(" ") else value)
        return None

    def flush(self) -> str | None:
        """The pending event if the stream ended without its blank line."""
        return self.feed_line("")


@dataclass(frozen=True)
class CompletionChunk:
    """What one streamed completion chunk says.

    Attributes:
        completion_tokens: the server's running count of generated tokens, if reported.
        prompt_tokens: prompt tokens per the usage block, if present.
        cached_tokens: ``usage.prompt_tokens_details.cached_tokens`` (prefix-cache hit tokens).
        has_choice: the chunk carries a choice (text, possibly empty), not just usage.
        finish_reason: the choice's finish reason, if any.
        error: an error message when the chunk is an error event inside a 200 stream.
    """

    completion_tokens: int | None
    prompt_tokens: int | None
    cached_tokens: int | None
    has_choice: bool
    finish_reason: str | None
    error: str | None


def parse_chunk(data: str) -> CompletionChunk:
    """Interpret one SSE data payload of ``/v1/completions`` (or chat) streaming.

    Raises:
        ValueError: the payload is not a JSON object.
    """
    obj = json.loads(data)
    if not isinstance(obj, dict):
        raise ValueError(f"chunk is not a JSON object: {data[:80]!r}")
    if "error" in obj:
        err = obj["error"]
        message = err.get("message", str(err)) if isinstance(err, dict) else str(err)
        return CompletionChunk(None, None, None, False, None, message)
    usage = obj.get("usage") or {}
    details = usage.get("prompt_tokens_details") or {}
    choices = obj.get("choices") or []
    finish = next((c.get("finish_reason") for c in choices if c.get("finish_reason")), None)
    return CompletionChunk(
        completion_tokens=usage.get("completion_tokens"),
        prompt_tokens=usage.get("prompt_tokens"),
        cached_tokens=details.get("cached_tokens"),
        has_choice=bool(choices),
        finish_reason=finish,
        error=None,
    )
