"""server.net.jsonl: the one JSONL appender and its one error policy (every OSError becomes a
RunWriteError naming the file; after the first, the stream is torn there).

The copies it replaced had three policies: the run's writers raised RunWriteError, the
scraper its own error with another message, the gateway logged a bare OSError.
"""

from __future__ import annotations

import errno
import gzip
import os
from pathlib import Path
from typing import Any

import pytest

import server.net.jsonl
from server.net.jsonl import JsonlAppender, RunWriteError, append_lines, on_write_error

NO_SPACE = os.strerror(errno.ENOSPC)  # "No space left on device"


class _FullAfter:
    """A binary file whose writes fail with ENOSPC once ``room`` writes went through."""

    def __init__(self, real: Any, room: int) -> None:
        self.real, self.room, self.writes = real, room, 0

    def write(self, data: bytes) -> int:
        self.writes += 1
        if self.writes > self.room:
            raise OSError(errno.ENOSPC, NO_SPACE)
        return int(self.real.write(data))

    def flush(self) -> None:
        self.real.flush()

    def close(self) -> None:
        self.real.close()


def test_lines_are_appended_never_truncated_and_counted(tmp_path: Path) -> None:
    path = tmp_path / "a" / "b.jsonl"  # its directories are created
    append_lines(path, b'{"i":0}\n')
    with JsonlAppender(path) as out:
        out.write(b'{"i":1}\n{"i":2}\n', flush=False)
        out.flush()
        out.write(b'{"i":3}\n')
    assert path.read_bytes() == b'{"i":0}\n{"i":1}\n{"i":2}\n{"i":3}\n'
    assert out.lines == 3


def test_a_gzip_stream_appends_a_member_each_time(tmp_path: Path) -> None:
    path = tmp_path / "raw.jsonl.gz"
    for i in range(2):
        with JsonlAppender(path, gzip_level=3) as out:
            out.write(b'{"i":%d}\n' % i)
    assert gzip.decompress(path.read_bytes()) == b'{"i":0}\n{"i":1}\n'


def test_sync_fsyncs_at_every_flush(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    synced: list[int] = []
    monkeypatch.setattr(server.net.jsonl.os, "fsync", synced.append)
    append_lines(tmp_path / "w.jsonl", b"{}\n", sync=True)
    append_lines(tmp_path / "w.jsonl", b"{}\n")
    assert len(synced) == 1


def test_a_failed_write_names_the_file_and_tears_the_stream_there(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "requests.jsonl"
    real_open = open
    opened: list[_FullAfter] = []

    def full_open(file: Any, mode: str = "r", **kw: Any) -> Any:
        opened.append(_FullAfter(real_open(file, mode, **kw), room=2))
        return opened[-1]

    monkeypatch.setattr(server.net.jsonl, "open", full_open, raising=False)
    told: list[str] = []
    monkeypatch.setattr(server.net.jsonl, "_listeners", [])
    on_write_error(lambda: told.append("reserve released"))
    with JsonlAppender(path) as out:
        out.write(b"1\n")
        out.write(b"2\n")
        with pytest.raises(RunWriteError) as first:
            out.write(b"3\n")
        with pytest.raises(RunWriteError) as again:
            out.write(b"4\n")  # the same error, the file not touched
    assert str(first.value) == f"cannot write {path}: {NO_SPACE} (ENOSPC)"
    assert (first.value.path, first.value.os_error.errno) == (path, errno.ENOSPC)
    assert again.value is first.value
    assert opened[0].writes == 3  # the fourth write never reached the file
    assert told == ["reserve released"]  # told once, at the first failure
    assert path.read_bytes() == b"1\n2\n"  # what fitted is kept


def test_an_append_where_no_file_can_be_is_a_run_write_error() -> None:
    path = Path("/proc/self/nope/events.jsonl")
    with pytest.raises(RunWriteError) as caught:
        append_lines(path, b"{}\n")
    assert str(caught.value) == f"cannot write {path}: No such file or directory (ENOENT)"


def test_an_error_under_way_is_not_replaced_by_a_close_error(tmp_path: Path) -> None:
    out = JsonlAppender(tmp_path / "x.jsonl")
    with pytest.raises(KeyError), out:
        out.write(b"{}\n", flush=False)
        os.close(out._fh.fileno())  # type: ignore[union-attr]  # closing will fail (EBADF)
        raise KeyError("the error under way")
