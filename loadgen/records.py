"""The per-request record and its append-only JSONL writer.

One record per request, written and flushed the moment the request finishes, so a crash loses
nothing already finished. Stamps are integer nanoseconds of the monotonic clock; the run's
wall-clock anchor converts them. Errors and disconnects are fields, never escaping exceptions.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import IO, Any, Literal

Status = Literal["ok", "error", "aborted", "not_sent"]


@dataclass(slots=True)
class RequestRecord:
    """Everything observed about one request.

    Attributes:
        request_id: unique within the run.
        case: case name (server configuration).
        phase: phase name.
        index: position in the phase's request list.
        group: prefix group (e.g. ``anchors-2``) for requests sharing a prefix, else ``None``.
        prompt_tokens_sent: exact prompt length in tokens (prompts are token-ID lists).
        max_tokens: requested output tokens (sent with ``ignore_eos``).
        scheduled_ns: when the schedule wanted it sent (monotonic ns).
        sent_ns: when the request was handed to the connection (monotonic ns).
        chunk_ns: arrival time of every chunk that carried at least one generated token.
        chunk_tokens: generated tokens in each of those chunks (same length as ``chunk_ns``).
        end_ns: when the response finished (stream closed, error, or disconnect).
        http_status: response status code, ``None`` if no response arrived.
        status: ``ok``, ``error``, ``aborted`` (client disconnected on purpose) or ``not_sent``.
        error: error message for ``error`` records.
        usage_prompt_tokens / usage_completion_tokens: the server's final usage.
        cached_tokens: prefix-cache hit tokens reported by the server for this request.
        finish_reason: the server's finish reason (``length`` with ``ignore_eos``).
        disconnect_ns: when the client closed the connection on purpose.
        upstream: the upstream a gateway chose (its ``X-Gateway-Upstream`` header), if any.
    """

    request_id: str
    case: str
    phase: str
    index: int
    group: str | None
    prompt_tokens_sent: int
    max_tokens: int
    scheduled_ns: int
    sent_ns: int | None = None
    chunk_ns: list[int] = field(default_factory=list)
    chunk_tokens: list[int] = field(default_factory=list)
    end_ns: int | None = None
    http_status: int | None = None
    status: Status = "not_sent"
    error: str | None = None
    usage_prompt_tokens: int | None = None
    usage_completion_tokens: int | None = None
    cached_tokens: int | None = None
    finish_reason: str | None = None
    disconnect_ns: int | None = None
    upstream: str | None = None

    @property
    def output_tokens(self) -> int:
        """Generated tokens received (sum over chunks)."""
        return sum(self.chunk_tokens)

    def to_json(self) -> str:
        return json.dumps(asdict(self), separators=(",", ":"))


class RecordWriter:
    """Appends records to a JSONL file, flushing after each one.

    Use as a context manager; the file is opened in append mode so a resumed writer never
    truncates earlier records.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fh: IO[str] | None = None
        self.count = 0

    def __enter__(self) -> RecordWriter:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._fh = open(self.path, "a", encoding="utf-8")
        return self

    def __exit__(self, *exc: object) -> None:
        if self._fh is not None:
            self._fh.close()
            self._fh = None

    def write(self, record: RequestRecord) -> None:
        """Append one record and flush it to the OS."""
        assert self._fh is not None, "RecordWriter used outside its context"
        self._fh.write(record.to_json() + "\n")
        self._fh.flush()
        self.count += 1


def read_records(path: Path) -> list[dict[str, Any]]:
    """All records of a ``requests.jsonl`` as dicts.

    A last line cut short (no newline: the process died while writing it) is skipped, so
    everything written before a crash stays readable; :func:`truncated_tail` reports it.

    Raises:
        ValueError: a complete line is not valid JSON; the message names the line number.
    """
    out: list[dict[str, Any]] = []
    with open(path, encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError as exc:
                if not line.endswith("\n"):
                    break  # a cut-short tail, not corruption
                raise ValueError(f"{path}:{lineno}: not valid JSON ({exc})") from exc
    return out


def truncated_tail(path: Path) -> bool:
    """True when the file's last line has no newline (a write cut short by a crash)."""
    with open(path, "rb") as fh:
        fh.seek(0, 2)
        if fh.tell() == 0:
            return False
        fh.seek(-1, 2)
        return fh.read(1) != b"\n"
