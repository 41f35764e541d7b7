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

Files that only make sense together (a report's ``report.json``, ``report.md``,
``report.html``, its plots and the manifest that hashes them) are written as a set inside
:func:`staged_writes`: each is written whole under its temporary name, and only when every
one is written are they all renamed over their targets; a failure before that removes the
temporary files, so the previous complete set stays as it was.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sys
import tempfile
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from pathlib import Path

from server.files import TMP_SUFFIX, replace_whole, write_synced
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
    writes it in place. This process's standard output or error, by any name (``/dev/stdout``
    redirected to a file or a pipe), gets the file copied to it as it is open. A symbolic
    link is followed: the file it names is replaced, the link kept.

    Raises:
        RunWriteError: an OS error while creating the directory, writing, syncing or renaming.
    """
    staged = _staged.get()
    try:
        stream = _own_stream(path)
        if stream is not None:
            _to_stream(stream, produce)
            return
        # A rename would replace a symbolic link itself (/dev/stdout with a file): the file
        # it names is replaced instead, and the link stays.
        path = Path(os.path.realpath(path)) if path.is_symlink() else path
        if path.exists() and not path.is_file() and not path.is_dir():
            produce(path)
        elif staged is not None:
            _stage(path, produce, staged)
        else:
            replace_whole(path, produce)
    except OSError as exc:
        raise write_error(path, exc) from exc


def _own_stream(path: Path) -> int | None:
    """The descriptor (1 or 2) when ``path`` is this process's standard output or error
    (``/dev/stdout``, its ``/proc/self/fd`` name, or the file, pipe or terminal it is
    connected to), else ``None``."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    for fd in (1, 2):
        with contextlib.suppress(OSError):
            own = os.fstat(fd)
            if (own.st_dev, own.st_ino) == (st.st_dev, st.st_ino):
                return fd
    return None


def _to_stream(fd: int, produce: Callable[[Path], None]) -> None:
    """Have ``produce`` write a temporary file, then copy it to descriptor ``fd`` as it is
    open: reopening ``/dev/stdout`` by name would truncate a shell's ``>> log`` and cannot
    seek in a pipe (Parquet does)."""
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError, AttributeError):
            stream.flush()
    with tempfile.TemporaryDirectory(prefix="loadgen-out-") as folder:
        tmp = Path(folder) / "out"
        produce(tmp)
        with open(tmp, "rb") as src, os.fdopen(fd, "wb", closefd=False) as dst:
            shutil.copyfileobj(src, dst)


#: The files written so far by the innermost :func:`staged_writes` (target → its temporary),
#: ``None`` outside one.
_staged: ContextVar[dict[Path, Path] | None] = ContextVar("staged", default=None)


def _stage(path: Path, produce: Callable[[Path], None], staged: dict[Path, Path]) -> None:
    """Write ``path``'s new content whole and synced under its temporary name, and note it in
    ``staged`` to be renamed when the set is complete (the temporary is removed if this
    fails)."""
    staged[path] = write_synced(path, produce)


@contextlib.contextmanager
def staged_writes() -> Iterator[None]:
    """Write every file of the block as one set: :func:`write_with` (and the writers on it)
    writes each under its temporary name, and when the block ends without an exception all
    are renamed over their targets, in the order written; when it raises, the temporary
    files are removed and every target is as it was. Inside an outer block this one joins
    it (the outer one renames). A reader inside the block finds a file's new content with
    :func:`current_file`.

    Raises:
        RunWriteError: a rename failed (the files renamed before it are new, the rest as
            they were, and no temporary is left).
    """
    if _staged.get() is not None:
        yield
        return
    staged: dict[Path, Path] = {}
    token = _staged.set(staged)
    try:
        yield
    except BaseException:
        for tmp in staged.values():
            _remove(tmp)
        raise
    finally:
        _staged.reset(token)
    for path, tmp in staged.items():
        try:
            os.replace(tmp, path)
        except OSError as exc:
            for left in staged.values():
                _remove(left)
            raise write_error(path, exc) from exc


def current_file(path: Path) -> Path:
    """Where ``path``'s newest content is: its temporary file when written inside the
    current :func:`staged_writes` block, else ``path`` itself."""
    staged = _staged.get()
    return path if staged is None else staged.get(path, path)


def staged_files() -> list[Path]:
    """The targets written so far inside the current :func:`staged_writes` block (none
    outside one), in the order written."""
    return list(_staged.get() or {})


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
