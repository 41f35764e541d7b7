"""Writing the files of a run so that a failed write ends cleanly: whole or absent, never half.

Every whole file the main process writes into a run directory goes through here (the JSON
files, ``report.md``, the plots); the appended JSONL streams go through the one appender,
``server.net.jsonl``: a whole file is written under a temporary name in the same directory,
fsynced, then renamed over the target (``os.replace``), and the temporary file is removed
when anything fails, so a reader sees the old file or the new one and a full disk leaves no
``*.tmp`` behind. Every OS error of a write (``ENOSPC``, ``EACCES``, a directory that cannot
exist), whole file or appended line, becomes one :class:`RunWriteError` that names the file
(the appender's policy, ``server.net.jsonl``), which the command line turns into one line and
exit code 1 (``loadgen.cli.run_and_report``); the first one gives back the run's reserved disk
space (:class:`SpaceReserve`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from pathlib import Path

from server.files import TMP_SUFFIX, replace_whole
from server.net.jsonl import RunWriteError, on_write_error, write_error


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
    ``savefig``); it may raise anything, and the temporary file is removed either way. An
    existing ``path`` that is neither a regular file nor a directory (a device such as
    ``/dev/null``, a pipe: an output a user named) cannot be replaced by a rename: ``produce``
    writes it in place.

    Raises:
        RunWriteError: an OS error while creating the directory, writing, syncing or renaming.
    """
    try:
        if path.exists() and not path.is_file() and not path.is_dir():
            produce(path)
        else:
            replace_whole(path, produce)
    except OSError as exc:
        raise write_error(path, exc) from exc


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


def _release_all() -> None:
    """Give back every reserve: a write failed, so what follows (the run's status, the
    manifest) can still be written."""
    for reserve in list(_held):
        reserve.release()


on_write_error(_release_all)


def _remove(tmp: Path) -> None:
    with contextlib.suppress(OSError):
        tmp.unlink()
