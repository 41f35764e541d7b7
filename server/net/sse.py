"""Server-sent events: the one decoder of every event stream the testbed reads (pure, bounded).

The load generator's client reads each response's events with it (every token of a run passes
through :meth:`SSEDecoder.feed_plain`), and the gateway watches the streams it relays with it.
It follows the WHATWG HTML rules for interpreting an event stream (§9.2.6, "Interpreting an
event stream"):

- one UTF-8 byte order mark at the very start of the stream is skipped, once;
- lines end in CRLF, LF or a bare CR; a read that ends in CR ends its line at once (a bare-CR
  stream's last event is not held back for a read that never comes), and an LF opening the
  next read is then the second half of that CRLF, not a blank line;
- ``:`` starts a comment; ``data:`` lines of one event are joined with ``\\n``; ``event:``
  names the event (``message`` when none did); ``id:``, ``retry:`` and unknown fields are
  ignored; a blank line dispatches the event, and an event without data is not dispatched;
- at the end of the stream, an event whose blank line never came is discarded, not
  dispatched (:meth:`SSEDecoder.end` says whether one was).

Events come out whole whatever the split of the stream into reads: an event or a line may span
reads, one read may hold many events.
"""

from __future__ import annotations

import re
from typing import NamedTuple

from server.net.limits import SSE_MAX_LINE_BYTES, too_large

#: The data of the event that ends an OpenAI-style stream (vLLM's ``/v1/completions`` and
#: ``/v1/chat/completions``): ``data: [DONE]``.
DONE = "[DONE]"

#: SSE line ends: CRLF, LF or a bare CR.
_LINE_END = re.compile(rb"\r\n|\r|\n")
#: The UTF-8 byte order mark, skipped once at the start of a stream.
_BOM = b"\xef\xbb\xbf"


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


def _is_data_line(line: bytes) -> bool:
    return line == b"data" or line.startswith(b"data:")


class SSEDecoder:
    """Turns one SSE byte stream into :class:`SSEEvent` objects (the rules in the module
    docstring); use one decoder per stream.

    Feed raw reads with :meth:`feed` (or whole lines with :meth:`feed_line`); call
    :meth:`end` when the stream ends.

    :meth:`feed_plain` is the fast path for the common read, where every event is one
    ``data: `` line with LF line ends (every vLLM chunk): it returns their data, cut at
    ``\\n\\n`` in a few C-level operations over the whole read, or declines (any CR, an event
    begun line by line, or the stream's first read, which may open with a byte order mark)
    and leaves the read to :meth:`feed`. Both give the same events for any split of the
    stream.

    Bounded: a line longer than ``max_line_bytes`` (default
    ``server.net.limits.SSE_MAX_LINE_BYTES``, 1 MiB; line end excluded), or an event whose data
    lines together pass it, raises :class:`SSELineTooLong` as soon as a read shows it, so
    the decoder never holds more than the limit plus one read (an event's data is counted in
    characters, one per byte for ASCII).

    Raises (``feed``, ``feed_plain``, ``feed_line``):
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
        # Past the stream's first bytes (its byte order mark, if any, skipped).
        self._started = False

    def feed_plain(self, raw: bytes) -> list[str] | None:
        """Consume one read if every event it completes is a single ``data: `` line with LF
        line ends, and return those events' data, in order; else consume nothing and return
        ``None`` (then call :meth:`feed` with the same read)."""
        if self._data or self._event or self._skip_lf or not self._started:
            return None  # inside an event (or a CRLF) begun line by line, or a first read
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
        if not self._started:
            raw = self._skip_bom(raw)
            if not self._started:
                return []  # too few bytes yet to tell a byte order mark
        plain = self.feed_plain(raw)
        if plain is not None:
            return [SSEEvent(data) for data in plain]
        buffer = self._partial + raw if self._partial else raw
        return self._feed_lines(buffer)

    def _skip_bom(self, raw: bytes) -> bytes:
        """The stream's first bytes (with what was kept) without their byte order mark; keeps
        them instead (returning ``b""``) while they are too few to tell."""
        buffer, self._partial = self._partial + raw, b""
        if len(buffer) < len(_BOM) and _BOM.startswith(buffer):
            self._partial = buffer
            return b""
        self._started = True
        return buffer.removeprefix(_BOM)

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
        """Consume one whole line (with or without its line end); return the event it
        completes. The stream's byte order mark is :meth:`feed`'s concern, not this one's."""
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

    def end(self) -> bool:
        """The stream ended: discard what is pending, as the SSE rules say (an event whose
        blank line never came is not dispatched), and start over for a new stream.

        Returns:
            Whether an event was discarded: a ``data`` line had come (a last line without
            its line end included) but not the blank line that would have dispatched it.
        """
        lines = _LINE_END.split(self._partial) if self._started else []
        begun = bool(self._data) or any(_is_data_line(line) for line in lines)
        self._data, self._data_bytes, self._event = [], 0, ""
        self._partial, self._skip_lf, self._started = b"", False, False
        return begun
