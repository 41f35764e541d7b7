"""Reading files a user names (traces, datasets, config files) with bounds, like network input.

A reader never holds more than it was allowed: a whole file is read only up to its limit
(:func:`read_bounded`), a line-oriented file one line at a time with a size cap per line
and a total cap (:func:`iter_lines`). ``/dev/zero``, a multi-gigabyte file or a line of a
gigabyte ends in a one-line :class:`InputTooLarge` (or a too-long line reported by its
number), never in a ``MemoryError``. Limits are in bytes; each reader states its own.

Only a regular file is read (:func:`file_problem`): a directory, a device (``/dev/zero``,
``/dev/stdin``), a pipe or a socket is refused before it is opened, with what it is, so the
one-line error says why (not "no such file" for a path that exists, nor a limit reached after
reading 256 MiB of zeros, nor a read that never ends).
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Protocol

#: How much of an over-long line is read at a time while it is skipped to its end.
_SKIP_CHUNK_BYTES = 2**20


class InputTooLarge(ValueError):
    """A file larger than its reader's limit; the message names the file and the limit."""


class _Hasher(Protocol):
    def update(self, data: bytes, /) -> None: ...


#: What a path that is no regular file is, by its ``st_mode`` type.
_KINDS = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISFIFO, "a pipe"),
    (stat.S_ISSOCK, "a socket"),
)


def file_problem(path: Path | str) -> str | None:
    """Why ``path`` cannot be read as an input file, in words (``no such file``, ``is a
    directory, not a file``, ``is a character device, not a regular file``, ``cannot be
    read: Permission denied``); ``None`` for a readable regular file (symbolic links
    followed)."""
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        return "no such file"
    except OSError as exc:
        return f"cannot be read: {exc.strerror or exc}"
    if stat.S_ISDIR(mode):
        return "is a directory, not a file"
    for test, kind in _KINDS:
        if test(mode):
            return f"is {kind}, not a regular file"
    if not os.access(path, os.R_OK):
        return f"cannot be read: {os.strerror(errno.EACCES)}"
    return None


def check_file(path: Path | str) -> None:
    """Refuse ``path`` unless it is a readable regular file (:func:`file_problem`).

    Raises:
        OSError: its ``strerror`` says why (``is a character device, not a regular file``),
            ``errno`` is ``EISDIR`` for a directory, ``ENOENT`` when missing, else ``EINVAL``
            (``EACCES`` when unreadable), ``filename`` is ``path``.
    """
    why = file_problem(path)
    if why is None:
        return
    code = {"no such file": errno.ENOENT, "is a directory, not a file": errno.EISDIR}.get(why)
    if code is None:
        code = errno.EACCES if why.startswith("cannot be read") else errno.EINVAL
    raise OSError(code, why, str(path))


def too_large(path: Path | str, limit: int, what: str) -> InputTooLarge:
    """``"{path}: larger than {limit:,} bytes, the limit of {what}"`` as an exception."""
    return InputTooLarge(f"{path}: larger than {limit:,} bytes, the limit of {what}")


def read_bounded(path: Path | str, max_bytes: int, what: str) -> bytes:
    """The whole content of ``path``, at most ``max_bytes`` of it.

    Raises:
        InputTooLarge: the file holds more than ``max_bytes`` (``what`` names the limit,
            e.g. ``"a gateway config file"``); at most ``max_bytes + 1`` bytes were read.
        OSError: it is no readable regular file (:func:`check_file`: its ``strerror`` says
            what it is), or it cannot be opened or read.
    """
    check_file(path)
    with open(path, "rb") as fh:
        data = fh.read(max_bytes + 1)
    if len(data) > max_bytes:
        raise too_large(path, max_bytes, what)
    return data


def iter_lines(
    path: Path | str,
    *,
    max_line_bytes: int,
    max_bytes: int,
    what: str,
    hasher: _Hasher | None = None,
) -> Iterator[tuple[int, bytes | None]]:
    """``(1-based line number, line)`` for every line of ``path``, newline dropped; ``None``
    for a line longer than ``max_line_bytes`` (its number kept, the line skipped to its end
    in 1 MiB reads, never held). ``hasher`` (``hashlib.sha256()``) sees every byte read.

    Raises:
        InputTooLarge: more than ``max_bytes`` in the file (raised once that many were read).
        OSError: it is no readable regular file (:func:`check_file`: its ``strerror`` says
            what it is), or it cannot be opened or read.
    """
    check_file(path)
    total = 0
    with open(path, "rb") as fh:
        number = 0
        while True:
            line = fh.readline(max_line_bytes + 1)
            if not line:
                return
            number += 1
            total += len(line)
            if hasher is not None:
                hasher.update(line)
            ended = line.endswith(b"\n")
            long = len(line) > max_line_bytes and not (len(line) == max_line_bytes + 1 and ended)
            if long:
                line = b""  # never held: the rest is read and dropped a chunk at a time
            while long and not ended:
                if total > max_bytes:
                    raise too_large(path, max_bytes, what)
                chunk = fh.readline(_SKIP_CHUNK_BYTES)
                total += len(chunk)
                if hasher is not None:
                    hasher.update(chunk)
                ended = not chunk or chunk.endswith(b"\n")
                del chunk
            if total > max_bytes:
                raise too_large(path, max_bytes, what)
            yield number, None if long else line.removesuffix(b"\n")
