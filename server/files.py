"""Writing a whole file so a reader sees the old one or the new one, never half of one."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable
from pathlib import Path

#: The suffix of a file being written (``run.json.tmp``); readers and the manifest skip it.
TMP_SUFFIX = ".tmp"


def tmp_path(path: Path) -> Path:
    """The temporary name ``path`` is written under before the rename (same directory)."""
    return path.with_name(path.name + TMP_SUFFIX)


def write_synced(path: Path, produce: Callable[[Path], None]) -> Path:
    """Have ``produce(tmp)`` write ``path``'s new content whole at :func:`tmp_path` and fsync
    it; creates the parent directories. Returns the temporary, for the caller to rename (the
    temporary is removed if this fails).

    Raises:
        OSError: creating the directory, writing or syncing failed; anything ``produce``
            raises passes through.
    """
    tmp = tmp_path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        produce(tmp)
        fd = os.open(tmp, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
    return tmp


def replace_whole(path: Path, produce: Callable[[Path], None]) -> None:
    """Have ``produce(tmp)`` write the whole file at :func:`tmp_path`, fsync it and rename it
    over ``path`` (``os.replace``); creates the parent directories. The temporary file is
    removed whatever fails, so a full disk leaves no ``*.tmp`` behind.

    Raises:
        OSError: creating the directory, writing, syncing or renaming failed; anything
            ``produce`` raises passes through.
    """
    tmp = write_synced(path, produce)
    try:
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
