"""The append-only JSONL writer of request records (the record type is the run format's,
:class:`loadgen.runformat.RequestRecord`, re-exported here for the sending code).

One record per request, written and flushed the moment the request finishes, so a crash loses
nothing already finished. Stamps are integer nanoseconds of the monotonic clock; the run's
wall-clock anchor converts them. Errors and disconnects are fields, never escaping exceptions.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import IO

from loadgen.runformat.atomic import RunWriteError, writing
from loadgen.runformat.rows import RequestRecord, Status

__all__ = ["RecordWriter", "RequestRecord", "Status"]


class RecordWriter:
    """Appends records to a JSONL file, flushing after each one.

    Use as a context manager; the file is opened in append mode so a resumed writer never
    truncates earlier records. Every OS error (opening, writing, flushing, closing: a full
    disk shows at the flush) is raised as :class:`loadgen.runformat.RunWriteError`; after
    one, every later write raises it again without touching the file: the stream is torn
    there, and a full disk's last room is kept for the run's ending (``run.json``).
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fh: IO[str] | None = None
        self.count = 0
        self._failed: RunWriteError | None = None

    def __enter__(self) -> RecordWriter:
        with writing(self.path):
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._fh = open(self.path, "a", encoding="utf-8")
        return self

    def __exit__(self, *exc: object) -> None:
        fh, self._fh = self._fh, None
        if fh is None:
            return
        if self._failed is not None:  # already reported; the buffer (≤ 8 KB) may not fit
            with contextlib.suppress(OSError):
                fh.close()
            return
        try:
            with writing(self.path):
                fh.close()
        except Exception:
            if exc[0] is None:
                raise  # else the error already under way is the one to report

    def write(self, record: RequestRecord, flush: bool = True) -> None:
        """Append one record and (unless ``flush=False``, for a batch) flush it to the OS.

        Raises:
            RunWriteError: the write or the flush failed.
        """
        assert self._fh is not None, "RecordWriter used outside its context"
        with self._failing():
            self._fh.write(record.to_json() + "\n")
            if flush:
                self._fh.flush()
        self.count += 1

    def flush(self) -> None:
        """Flush records written with ``flush=False``.

        Raises:
            RunWriteError: the flush failed.
        """
        assert self._fh is not None, "RecordWriter used outside its context"
        with self._failing():
            self._fh.flush()

    @contextlib.contextmanager
    def _failing(self) -> Iterator[None]:
        """Raise the first write error again, or turn a new OS error into it."""
        if self._failed is not None:
            raise self._failed
        try:
            with writing(self.path):
                yield
        except RunWriteError as exc:
            self._failed = exc
            raise
