"""Appending JSON lines: the one appender of every JSONL stream, with one error policy.

Every appended stream of a run goes through :class:`JsonlAppender` (a stream kept open: the
request records, the scraper's three files) or :func:`append_lines` (open, append, close: the
phases, clock offsets, faults, a sequential gate's looks, a Ray worker's records, the
gateway's events): each write is whole lines, flushed to the OS (and synced with ``sync``),
so a crash loses nothing already written.

The error policy: every ``OSError`` of an append (creating the directory, opening, writing,
flushing, syncing, closing; a full disk shows at the flush) becomes one :class:`RunWriteError`
naming the file and the error (``cannot write PATH: No space left on device (ENOSPC)``). After
the first, the stream is torn there: every later write raises the same error without touching
the file (a full disk's last room is kept for the run's ending), and closing it raises nothing
more. Callbacks registered with :func:`on_write_error` hear of each failure first (the run
gives back the disk space it holds in reserve). What a caller does with the error is its own
concern: the load generator ends the run with it, the scraper ends with it as its one line,
the gateway logs it and goes on serving.
"""

from __future__ import annotations

import contextlib
import errno
import gzip
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from types import TracebackType
from typing import IO


class RunWriteError(Exception):
    """A file of the run could not be written (disk full, permission, impossible path).

    Attributes:
        path: the file (or directory) that could not be written.
        os_error: the OS error the write raised.
    """

    def __init__(self, path: Path, os_error: OSError) -> None:
        self.path = path
        self.os_error = os_error
        reason = os_error.strerror or str(os_error) or type(os_error).__name__
        code = errno.errorcode.get(os_error.errno, "") if os_error.errno else ""
        super().__init__(f"cannot write {path}: {reason}" + (f" ({code})" if code else ""))


#: Told of every failed write, before its error is raised (see :func:`on_write_error`).
_listeners: list[Callable[[], None]] = []


def on_write_error(callback: Callable[[], None]) -> None:
    """Have ``callback()`` called at every failed write of a run's file (this process),
    before its :class:`RunWriteError` is raised; it must not raise."""
    _listeners.append(callback)


def write_error(path: Path, exc: OSError) -> RunWriteError:
    """The error of a failed write of ``path``, after telling the :func:`on_write_error`
    callbacks (so what follows, the run's status and manifest, can still be written)."""
    for callback in list(_listeners):
        callback()
    return RunWriteError(path, exc)


@contextlib.contextmanager
def writing(path: Path) -> Iterator[None]:
    """Turn an ``OSError`` raised inside the block into a :class:`RunWriteError` for ``path``
    (:func:`write_error`)."""
    try:
        yield
    except OSError as exc:
        raise write_error(path, exc) from exc


class JsonlAppender:
    """Appends whole JSON lines to ``path``, kept open between writes (a context manager).

    The file is opened in append mode (its directories created), so a resumed stream never
    truncates earlier lines; ``gzip_level`` appends a gzip member instead (``.jsonl.gz``);
    ``sync`` fsyncs at every flush. Errors: the module's policy (:class:`RunWriteError` naming
    ``path``; after one, every write raises it again).

    Attributes:
        path: the file.
        lines: lines written so far (counted by their newlines).
    """

    def __init__(self, path: Path, *, gzip_level: int | None = None, sync: bool = False) -> None:
        self.path = path
        self.lines = 0
        self._gzip_level = gzip_level
        self._sync = sync
        self._fh: IO[bytes] | gzip.GzipFile | None = None
        self._failed: RunWriteError | None = None

    def __enter__(self) -> JsonlAppender:
        with self._failing():
            self.path.parent.mkdir(parents=True, exist_ok=True)
            if self._gzip_level is None:
                self._fh = open(self.path, "ab")
            else:
                self._fh = gzip.open(self.path, "ab", compresslevel=self._gzip_level)
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        fh, self._fh = self._fh, None
        if fh is None:
            return
        if self._failed is not None or kind is not None:
            # Already reported, or another error is under way: it is the one to report (the
            # buffer, at most a few KB, may not fit on a full disk either).
            with contextlib.suppress(OSError):
                fh.close()
            return
        with self._failing():
            fh.close()

    def write(self, data: bytes, flush: bool = True) -> None:
        """Append ``data`` (whole lines, each ending in ``\\n``) and, unless ``flush=False``
        (a batch: :meth:`flush` after it), flush it to the OS.

        Raises:
            RunWriteError: the write or the flush failed, now or before.
        """
        with self._failing():
            assert self._fh is not None, "JsonlAppender used outside its context"
            self._fh.write(data)
            if flush:
                self._flush(self._fh)
        self.lines += data.count(b"\n")

    def flush(self) -> None:
        """Flush what was written with ``flush=False``.

        Raises:
            RunWriteError: the flush failed, now or before.
        """
        with self._failing():
            assert self._fh is not None, "JsonlAppender used outside its context"
            self._flush(self._fh)

    def _flush(self, fh: IO[bytes] | gzip.GzipFile) -> None:
        fh.flush()
        if self._sync:
            os.fsync(fh.fileno())

    @contextlib.contextmanager
    def _failing(self) -> Iterator[None]:
        """Raise the first write error again, or turn a new ``OSError`` into it."""
        if self._failed is not None:
            raise self._failed
        try:
            with writing(self.path):
                yield
        except RunWriteError as exc:
            self._failed = exc
            raise


def append_lines(path: Path, data: bytes, *, sync: bool = False) -> None:
    """Append ``data`` (whole lines) to ``path``: open, write, flush (and fsync with ``sync``),
    close (:class:`JsonlAppender`). A failed append may leave a torn last line, which the
    readers drop and report.

    Raises:
        RunWriteError: the append failed.
    """
    with JsonlAppender(path, sync=sync) as out:
        out.write(data)
