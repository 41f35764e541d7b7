"""Files users name are read with bounds: a line at a time with a cap, and a cap in all."""

from __future__ import annotations

import hashlib
import tracemalloc
from pathlib import Path

import pytest

from server.net.input_files import InputTooLarge, iter_lines, read_bounded


def test_a_whole_file_is_read_up_to_its_limit(tmp_path: Path) -> None:
    path = tmp_path / "f"
    path.write_bytes(b"x" * 10)
    assert read_bounded(path, 10, "a test file") == b"x" * 10
    with pytest.raises(InputTooLarge, match=r"f: larger than 9 bytes, the limit of a test file$"):
        read_bounded(path, 9, "a test file")


def test_a_file_of_zeros_ends_at_the_limit(tmp_path: Path) -> None:
    zeros = tmp_path / "zeros"  # 1 MiB + 1 NUL bytes, sparse: one line without an end
    with open(zeros, "wb") as fh:
        fh.truncate(2**20 + 1)
    with pytest.raises(InputTooLarge, match="larger than 1,048,576 bytes"):
        read_bounded(zeros, 2**20, "a test file")
    with pytest.raises(InputTooLarge, match="larger than 1,048,576 bytes"):
        list(iter_lines(zeros, max_line_bytes=1000, max_bytes=2**20, what="a test file"))


def test_dev_zero_is_refused_as_a_device_before_a_byte_is_read() -> None:
    for read in (lambda: read_bounded("/dev/zero", 2**20, "a test file"),
                 lambda: list(iter_lines("/dev/zero", max_line_bytes=1000, max_bytes=2**20,
                                         what="a test file"))):  # fmt: skip
        with pytest.raises(OSError) as caught:
            read()
        assert caught.value.strerror == "is a character device, not a regular file"
        assert caught.value.filename == "/dev/zero"


def test_lines_are_numbered_and_a_long_one_is_skipped_by_number(tmp_path: Path) -> None:
    # Lines of 3, 5 (the limit), 6 and 0 bytes, the last without its newline: the 6-byte line
    # is None, the others are given back without their newline.
    path = tmp_path / "f"
    path.write_bytes(b"abc\n12345\n123456\n\nend")
    lines = list(iter_lines(path, max_line_bytes=5, max_bytes=100, what="a test file"))
    assert lines == [(1, b"abc"), (2, b"12345"), (3, None), (4, b""), (5, b"end")]


def test_the_total_counts_every_byte_skipped_too(tmp_path: Path) -> None:
    # 4 + 20 + 4 = 28 bytes: within 28 the file reads; at 27 the skipped line's bytes count.
    path = tmp_path / "f"
    path.write_bytes(b"abc\n" + b"x" * 19 + b"\nxyz\n")
    assert len(list(iter_lines(path, max_line_bytes=5, max_bytes=28, what="t"))) == 3
    with pytest.raises(InputTooLarge):
        list(iter_lines(path, max_line_bytes=5, max_bytes=27, what="t"))


def test_the_hasher_sees_the_whole_file(tmp_path: Path) -> None:
    path = tmp_path / "f"
    data = b"abc\n" + b"x" * 5000 + b"\nlast"
    path.write_bytes(data)
    digest = hashlib.sha256()
    list(iter_lines(path, max_line_bytes=10, max_bytes=10**6, what="t", hasher=digest))
    assert digest.hexdigest() == hashlib.sha256(data).hexdigest()


def test_a_long_line_is_never_held(tmp_path: Path) -> None:
    # One line of 32 MiB read with a 64 KiB cap: the reader holds the cap's read and one 1 MiB
    # skip read at a time (with the file object's buffer, well under 4 MiB, an eighth of the
    # line; tracemalloc counts Python allocations), never the line.
    path = tmp_path / "f"
    path.write_bytes(b"x" * 32 * 2**20 + b"\nok\n")
    tracemalloc.start()
    try:
        lines = list(iter_lines(path, max_line_bytes=2**16, max_bytes=2**30, what="t"))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert lines == [(1, None), (2, b"ok")]
    assert peak < 4 * 2**20, peak
