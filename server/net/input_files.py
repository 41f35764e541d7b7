"""Reading files a user names (traces, datasets, config files) with bounds, like network input.

A reader never holds more than it was allowed: a whole file is read only up to its limit
(:func:`read_bounded`), a line-oriented file one line at a time with a size cap per line
and a total cap (:func:`iter_lines`). ``/dev/zero``, a multi-gigabyte file or a line of a
gigabyte ends in a one-line :class:`InputTooLarge` (or a too-long line reported by its
number), never in a ``MemoryError``. Limits are in bytes; each reader states its own.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Protocol

#: How much of an over-long line is read at a time while it is skipped to its end.
_SKIP_CHUNK_BYTES = 2**20


class InputTooLarge(ValueError):
    """A file larger than its reader's limit; the message names the file and the limit."""


class _Hasher(Protocol):
    def update(self, data: bytes, /) -> None: ...


def too_large(path: Path | str, limit: int, what: str) -> InputTooLarge:
    """``"{path}: larger than {limit:,} bytes, the limit of {what}"`` as an exception."""
    return InputTooLarge(f"{path}: larger than {limit:,} bytes, the limit of {what}")


def read_bounded(path: Path | str, max_bytes: int, what: str) -> bytes:
    """The whole content of ``path``, at most ``max_bytes`` of it.

    Raises:
        InputTooLarge: the file holds more than ``max_bytes`` (``what`` names the limit,
            e.g. ``"a gateway config file"``); at most ``max_bytes + 1`` bytes were read.
        OSError: it cannot be opened or read.
    """
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
        OSError: it cannot be opened or read.
    """
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
