"""Writing the files of a run so that a failed write ends cleanly: whole or absent, never half.

Every file the main process writes into a run directory goes through here (the JSON files,
``report.md``, the plots) or, for the appended JSONL streams, through :func:`append_bytes` /
:func:`writing`: a whole file is written under a temporary name in the same directory,
fsynced, then renamed over the target (``os.replace``), and the temporary file is removed
when anything fails, so a reader sees the old file or the new one and a full disk leaves no
``*.tmp`` behind. Every OS error of a write (``ENOSPC``, ``EACCES``, a directory that cannot
exist) becomes one :class:`RunWriteError` that names the file, which the command line turns
into one line and exit code 1 (``loadgen.cli.run_and_report``).
"""

from __future__ import annotations

import contextlib
import errno
from collections.abc import Callable, Iterator
from pathlib import Path

from server.files import TMP_SUFFIX, replace_whole


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


def write_error_under(exc: OSError, root: Path) -> RunWriteError | None:
    """``exc`` as a :class:`RunWriteError` when the file it names lies under ``root`` (an
    error another package's writer raised for a file of the run), else ``None``."""
    if exc.filename is None:
        return None
    path = Path(exc.filename)
    return RunWriteError(path, exc) if path.is_relative_to(root) else None


def write_with(path: Path, produce: Callable[[Path], None]) -> None:
    """Have ``produce(tmp)`` write the whole file at a temporary path, then fsync it and
    rename it over ``path``; creates the parent directories (``server.files.replace_whole``).

    ``produce`` writes the file given (for writers that want a path, e.g. matplotlib's
    ``savefig``); it may raise anything, and the temporary file is removed either way.

    Raises:
        RunWriteError: an OS error while creating the directory, writing, syncing or renaming.
    """
    try:
        replace_whole(path, produce)
    except OSError as exc:
        raise _failed(path, exc) from exc


def write_bytes(path: Path, data: bytes) -> None:
    """Write ``data`` as the whole of ``path`` atomically (:func:`write_with`).

    Raises:
        RunWriteError: the write failed; ``path`` is as it was and no temporary file is left.
    """

    def produce(tmp: Path) -> None:
        with open(tmp, "wb") as fh:
            fh.write(data)

    write_with(path, produce)


def write_text(path: Path, text: str) -> None:
    """Write ``text`` (UTF-8) as the whole of ``path`` atomically (:func:`write_bytes`).

    Raises:
        RunWriteError: the write failed; ``path`` is as it was and no temporary file is left.
    """
    write_bytes(path, text.encode("utf-8"))


def append_bytes(path: Path, data: bytes) -> None:
    """Append ``data`` to ``path`` (created with its directories), flushed to the OS.

    An appended stream cannot be renamed into place; a failed append may leave a torn last
    line, which the readers already drop and report.

    Raises:
        RunWriteError: the append failed.
    """
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "ab") as fh:
            fh.write(data)
    except OSError as exc:
        raise _failed(path, exc) from exc


@contextlib.contextmanager
def writing(path: Path) -> Iterator[None]:
    """Turn an OS error raised inside the block into a :class:`RunWriteError` for ``path``
    (for a stream kept open across writes, e.g. ``requests.jsonl``)."""
    try:
        yield
    except OSError as exc:
        raise _failed(path, exc) from exc


#: Bytes :class:`SpaceReserve` holds: room for ``run.json``, ``case.json`` and the manifest
#: of a run whose disk filled (each a few KB; the manifest ~0.2 KB a file).
RESERVE_BYTES = 64 * 1024
#: The reserve's file name (``.tmp``: the manifest and the readers skip it).
RESERVE_FILE = ".space-reserve" + TMP_SUFFIX


class SpaceReserve:
    """Disk space held back in a run directory, so that a run whose disk fills can still
    write its ending (``run.json`` ``failed`` with the reason, the manifest): the file is
    written (zeros, synced: a real allocation, not a sparse hole) when the run starts and
    removed when the first write fails, or when the run ends. Best effort: a reserve that
    cannot be written is simply not there."""

    def __init__(self, run_dir: Path, size: int = RESERVE_BYTES) -> None:
        self.path = run_dir / RESERVE_FILE
        self.size = size

    def hold(self) -> bool:
        """Write the reserve; whether it could be."""
        try:
            write_bytes(self.path, bytes(self.size))
        except RunWriteError:
            return False
        _held.append(self)
        return True

    def release(self) -> None:
        """Give the space back (idempotent)."""
        if self in _held:
            _held.remove(self)
        _remove(self.path)


#: The reserves held now; the first write that fails releases them all.
_held: list[SpaceReserve] = []


def _failed(path: Path, exc: OSError) -> RunWriteError:
    """The error of a failed write of ``path``, after giving back the reserved space, so
    what follows (the run's status, the manifest) can still be written."""
    for reserve in list(_held):
        reserve.release()
    return RunWriteError(path, exc)


def _remove(tmp: Path) -> None:
    with contextlib.suppress(OSError):
        tmp.unlink()
