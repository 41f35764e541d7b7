"""Watching a relayed event stream: incremental SSE parsing and what an event means (pure).

The gateway relays an upstream's ``text/event-stream`` byte for byte and feeds a copy of each
chunk to :class:`EventStreamScanner`, which follows the WHATWG HTML "Interpreting an event
stream" rules (section 9.2.6): lines end in CRLF, LF or CR (a CR ending a chunk ends its line
at once, and an LF opening the next chunk is the second half of that CRLF), ``:`` starts a
comment, ``data:`` lines of one event are joined with ``\\n``, a blank line dispatches the
event, and an event left unterminated at end of stream is discarded. Events therefore come
out whole even when the upstream splits them across reads.

OpenAI-style streams (vLLM's ``/v1/completions`` and ``/v1/chat/completions``) end with
``data: [DONE]``; a failure inside an already-started 200 stream is sent as an event whose data
is a JSON object with an ``error`` key (vLLM's stream generators: ``data: {"error": {...}}``
then ``data: [DONE]``). :func:`is_error_event` also counts an event named ``error``.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

DONE = "[DONE]"

_LINE_END = re.compile(rb"\r\n|\r|\n")
_BOM = b"\xef\xbb\xbf"


class EventTooLarge(Exception):
    """A line or an event's data grew past the scanner's byte limit."""


@dataclass(frozen=True, slots=True)
class SseEvent:
    """One dispatched event: its type (``message`` unless an ``event:`` field named it) and data."""

    event: str
    data: str


class EventStreamScanner:
    """Turns the chunks of an event stream into whole events; holds at most ``max_bytes``.

    ``max_bytes`` bounds both an unterminated line and the data of one event, so a misbehaving
    upstream cannot make the gateway buffer without limit; :meth:`feed` raises
    :class:`EventTooLarge` beyond it.
    """

    def __init__(self, max_bytes: int) -> None:
        self._max_bytes = max_bytes
        self._pending = b""
        self._started = False
        self._event = ""
        self._data: list[str] = []
        self._data_bytes = 0
        self._skip_lf = False  # the last chunk ended in CR

    def feed(self, chunk: bytes) -> list[SseEvent]:
        """Consume ``chunk``; return the events it completed, in order."""
        buffer = self._pending + chunk
        if not self._started:  # one optional UTF-8 BOM at the very start is skipped
            if len(buffer) < len(_BOM) and _BOM.startswith(buffer):
                self._pending = buffer
                return []
            self._started = True
            buffer = buffer.removeprefix(_BOM)
        if self._skip_lf:
            self._skip_lf = False
            if buffer.startswith(b"\n"):
                buffer = buffer[1:]  # the LF of a CRLF split across two chunks
        if not self._data and not self._event:
            plain = self._feed_plain(buffer)
            if plain is not None:
                return plain
        events: list[SseEvent] = []
        start = 0
        for match in _LINE_END.finditer(buffer):
            event = self._line(buffer[start : match.start()])
            if event is not None:
                events.append(event)
            start = match.end()
        # A CR ending the chunk ends its line now (a bare-CR stream's last "\r\r" must not
        # wait for a chunk that never comes); an LF opening the next chunk completes it.
        self._skip_lf = buffer.endswith(b"\r")
        self._pending = buffer[start:]
        if len(self._pending) > self._max_bytes:
            raise EventTooLarge(f"an event-stream line exceeds {self._max_bytes} bytes")
        return events

    def _feed_plain(self, buffer: bytes) -> list[SseEvent] | None:
        """The common case in a few C-level operations: ``buffer`` starts at an event
        boundary, has LF line ends only, and every event it completes is one ``data: `` line
        (every vLLM chunk). Then those events, keeping the rest whole in ``_pending`` (it
        starts at a boundary, so the line-by-line path can take it up later); otherwise
        ``None`` and nothing consumed. Sizes past ``max_bytes`` go line by line, which raises.
        """
        body, sep, rest = buffer.rpartition(b"\n\n")
        if not sep:
            if len(buffer) > self._max_bytes or b"\r" in buffer:
                return None
            self._pending = buffer  # no event complete yet
            return []
        if (
            len(body) > self._max_bytes
            or len(rest) > self._max_bytes
            or not body.startswith(b"data: ")
            or b"\r" in buffer
            or body.count(b"\n") != 2 * body.count(b"\n\ndata: ")
        ):
            return None
        self._pending = rest
        datas = body[6:].decode("utf-8", errors="replace").split("\n\ndata: ")
        return [SseEvent("message", data) for data in datas]

    def _line(self, raw: bytes) -> SseEvent | None:
        if not raw:
            return self._dispatch()
        line = raw.decode("utf-8", errors="replace")
        if line.startswith(":"):
            return None
        name, colon, value = line.partition(":")
        if colon and value.startswith(" "):
            value = value[1:]
        if name == "data":
            self._data_bytes += len(raw)
            if self._data_bytes > self._max_bytes:
                raise EventTooLarge(f"an event's data exceeds {self._max_bytes} bytes")
            self._data.append(value)
        elif name == "event":
            self._event = value
        return None

    def _dispatch(self) -> SseEvent | None:
        event_type, data = self._event or "message", self._data
        self._event, self._data, self._data_bytes = "", [], 0
        if not data:
            return None  # the spec dispatches nothing for an event without data
        return SseEvent(event_type, "\n".join(data))


def is_done(event: SseEvent) -> bool:
    """Whether ``event`` is the OpenAI end-of-stream marker ``data: [DONE]``."""
    return event.data.strip() == DONE


def is_error_event(event: SseEvent) -> bool:
    """Whether ``event`` reports a failure: named ``error``, or data that is a JSON object with
    a non-null ``error`` member (``{"error": null}`` in a normal chunk is no error)."""
    if event.event == "error":
        return True
    if '"error"' not in event.data:  # cheap test first: most chunks are tokens
        return False
    try:
        payload = json.loads(event.data)
    except ValueError:
        return False
    return isinstance(payload, dict) and payload.get("error") is not None
