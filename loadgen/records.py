"""The append-only JSONL writer of request records (the record type is the run format's,
:class:`loadgen.runformat.RequestRecord`, re-exported here for the sending code).

One record per request, written and flushed the moment the request finishes, so a crash loses
nothing already finished. Stamps are integer nanoseconds of the monotonic clock; the run's
wall-clock anchor converts them. Errors and disconnects are fields, never escaping exceptions.
"""

from __future__ import annotations

from pathlib import Path
from types import TracebackType

from loadgen.runformat.rows import RequestRecord, Status
from server.net.jsonl import JsonlAppender

__all__ = ["RecordWriter", "RequestRecord", "Status"]


class RecordWriter:
    """Appends records to a JSONL file, flushing after each one (the one appender,
    ``server.net.jsonl``, and its error policy).

    Use as a context manager; the file is opened in append mode so a resumed writer never
    truncates earlier records. Every OS error (opening, writing, flushing, closing: a full
    disk shows at the flush) is raised as :class:`loadgen.runformat.RunWriteError`; after
    one, every later write raises it again without touching the file: the stream is torn
    there, and a full disk's last room is kept for the run's ending (``run.json``).

    Attributes:
        path: the file.
        count: records written.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self._out = JsonlAppender(path)
        self.count = 0

    def __enter__(self) -> RecordWriter:
        self._out.__enter__()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._out.__exit__(kind, exc, tb)

    def write(self, record: RequestRecord, flush: bool = True) -> None:
        """Append one record and (unless ``flush=False``, for a batch) flush it to the OS.

        Raises:
            RunWriteError: the write or the flush failed, now or before.
        """
        self._out.write((record.to_json() + "\n").encode(), flush)
        self.count += 1

    def flush(self) -> None:
        """Flush records written with ``flush=False``.

        Raises:
            RunWriteError: the flush failed, now or before.
        """
        self._out.flush()
