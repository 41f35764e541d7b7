"""Writes that fail end cleanly: a file of a run that cannot be written (disk full, an --out
that cannot exist) ends the run with one line naming the file and the OS error, ``run.json``
``failed`` with that reason, no temporary file and no half-written file left, exit 1; an
``--out`` that cannot be created is a usage error (exit 2) before any server starts."""

from __future__ import annotations

import errno
import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import matplotlib.pyplot as plt
import pytest
from click.testing import CliRunner

import loadgen.run
import loadgen.runformat.atomic
import server.files
import server.net.jsonl
from analysis.plots import save
from loadgen.cli import main
from loadgen.runformat import RunWriteError
from loadgen.runformat.atomic import write_text
from server.net.jsonl import append_lines
from tests.support.fake_in_thread import fake_in_thread
from tests.support.fake_openai_server import FakeOpenAIServer, StreamScript

pytestmark = [pytest.mark.timeout(120)]

#: os.strerror(ENOSPC) on Linux.
NO_SPACE = "No space left on device"


def _enospc(*args: object, **kwargs: object) -> None:
    raise OSError(errno.ENOSPC, NO_SPACE)


def _tmp_files(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*") if p.name.endswith(".tmp"))


def test_a_whole_file_write_that_fails_keeps_the_old_file_and_no_tmp(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The disk fills at the fsync (the last step before the rename): run.json keeps its old
    # text, run.json.tmp is removed, and the error names the file with ENOSPC's strerror.
    path = tmp_path / "run.json"
    path.write_text("old\n")
    monkeypatch.setattr(server.files.os, "fsync", _enospc)
    with pytest.raises(RunWriteError) as caught:
        write_text(path, "new\n")
    assert str(caught.value) == f"cannot write {path}: {NO_SPACE} (ENOSPC)"
    assert caught.value.path == path
    assert path.read_text() == "old\n"
    assert _tmp_files(tmp_path) == []


def test_a_write_into_a_path_that_cannot_exist_names_the_file() -> None:
    # /proc has no room for new directories: mkdir gives ENOENT ("No such file or directory").
    path = Path("/proc/self/nope/run.json")
    with pytest.raises(RunWriteError) as caught:
        write_text(path, "{}")
    assert str(caught.value) == f"cannot write {path}: No such file or directory (ENOENT)"
    with pytest.raises(RunWriteError):
        append_lines(Path("/proc/self/nope/requests.jsonl"), b"{}\n")


def test_a_plot_that_cannot_be_written_leaves_no_png(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # matplotlib opens its file and fails on the write: before, a 0-byte PNG stayed behind.
    fig, ax = plt.subplots()
    ax.plot([0, 1], [0, 1])
    monkeypatch.setattr(fig, "savefig", lambda tmp, **kw: (Path(tmp).write_bytes(b""), _enospc()))
    out = tmp_path / "plots" / "ttft_by_phase.png"
    with pytest.raises(RunWriteError, match=r"ttft_by_phase\.png: No space left on device"):
        save(fig, out)
    assert list((tmp_path / "plots").iterdir()) == []  # neither the PNG nor its .tmp


class _FullAfter:
    """A file whose writes fail with ENOSPC once ``room`` records went through."""

    def __init__(self, real: Any, room: int) -> None:
        self.real, self.room = real, room

    def write(self, data: bytes) -> int:
        if self.room <= 0:
            _enospc()
        self.room -= 1
        return int(self.real.write(data))

    def flush(self) -> None:
        self.real.flush()

    def close(self) -> None:
        self.real.close()


def _bench_args(url: str, out: Path, requests: int = 6, output_len: int = 4) -> list[str]:
    return [
        "run", "bench", "--url", url, "--requests", str(requests), "--concurrency", "2",
        "--input-len", "8", "--output-len", str(output_len), "--settle-s", "0.2",
        "--scrape-interval-s", "0.1", "--out", str(out),
    ]  # fmt: skip


def test_a_full_disk_under_requests_jsonl_ends_the_run_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # requests.jsonl takes 2 records, then the disk is full: the run ends (no later phase, no
    # retry), exit 1, the last line says which file and why, run.json says failed with the
    # same reason, and no temporary file is left.
    real_open = open

    def full_open(path: Any, mode: str = "r", **kw: Any) -> Any:
        opened = real_open(path, mode, **kw)
        return _FullAfter(opened, room=2) if Path(path).name == "requests.jsonl" else opened

    monkeypatch.setattr(server.net.jsonl, "open", full_open, raising=False)
    run_dir = tmp_path / "run"
    with fake_in_thread(FakeOpenAIServer(StreamScript(itl_s=0.01))) as fake:
        result = CliRunner().invoke(main, _bench_args(fake.url, run_dir))
    requests = run_dir / "cases" / "attached" / "requests.jsonl"
    line = f"error: cannot write {requests}: {NO_SPACE} (ENOSPC)"
    assert result.exit_code == 1, result.output
    assert "Traceback" not in result.output
    assert result.stderr.splitlines()[-1] == line
    assert result.stderr.count("error: cannot write") == 1
    run_json = json.loads((run_dir / "run.json").read_text())
    assert (run_json["status"], run_json["error"]) == ("failed", line.removeprefix("error: "))
    assert _tmp_files(run_dir) == []
    assert len(requests.read_text().splitlines()) == 2  # what fitted is kept


def test_run_json_that_cannot_be_written_at_the_start_is_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The very first write (run.json, status running) fails at its rename, after the --out
    # probe went through: nothing started; one line; run.json.tmp removed.
    real_replace = os.replace

    def replace(src: Any, dst: Any) -> None:
        if Path(dst).name == "run.json":
            _enospc()
        real_replace(src, dst)

    monkeypatch.setattr(server.files.os, "replace", replace)
    run_dir = tmp_path / "run"
    result = CliRunner().invoke(main, _bench_args("http://127.0.0.1:9", run_dir))
    assert result.exit_code == 1, result.output
    assert "Traceback" not in result.output
    assert result.stderr.splitlines()[-1] == (
        f"error: cannot write {run_dir / 'run.json'}: {NO_SPACE} (ENOSPC)"
    )
    assert _tmp_files(run_dir) == []
    assert not (run_dir / "run.json").exists()


@pytest.mark.parametrize("out", ["/proc/self/x", "/proc/self/x/y"])
def test_an_out_under_proc_is_a_usage_error_before_any_server(
    out: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Refused by the --out check: run_scenario (which starts or attaches to the server) is
    # never called, so no server starts. mkdir under /proc gives ENOENT.
    started: list[object] = []

    async def never(*args: object, **kwargs: object) -> None:
        started.append(args)

    monkeypatch.setattr(loadgen.run, "run_scenario", never)
    result = CliRunner().invoke(main, _bench_args("http://127.0.0.1:9", Path(out)))
    assert result.exit_code == 2, result.output
    assert f"--out {out} cannot be created or written: No such file or directory" in (result.output)
    assert "Traceback" not in result.output
    assert started == []


def test_a_read_only_out_is_a_usage_error_before_any_server(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A directory that takes no file: the probe write fails (EROFS on a read-only mount;
    # here the same error injected into the probe's open, as root ignores permissions).
    started: list[object] = []

    async def never(*args: object, **kwargs: object) -> None:
        started.append(args)

    def read_only(path: Any, *args: Any, **kwargs: Any) -> Any:
        raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(path))

    monkeypatch.setattr(loadgen.run, "run_scenario", never)
    monkeypatch.setattr(loadgen.runformat.atomic, "open", read_only, raising=False)
    out = tmp_path / "ro"
    result = CliRunner().invoke(main, _bench_args("http://127.0.0.1:9", out))
    assert result.exit_code == 2, result.output
    assert f"--out {out} cannot be created or written: Read-only file system" in result.output
    assert started == []
    assert not out.exists()  # the check creates nothing, and the probe left nothing


@pytest.fixture
def tiny_tmpfs(tmp_path: Path) -> Iterator[Path]:
    """A 100 KB tmpfs (a real full disk); skipped where mounting is not possible (not root,
    no mount(8), a container without CAP_SYS_ADMIN): the injected-ENOSPC tests above cover
    the same path there."""
    point = tmp_path / "tiny"
    point.mkdir()
    if shutil.which("mount") is None or os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root and mount(8)")
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=100k", "tmpfs", str(point)],
        capture_output=True, text=True,
    )  # fmt: skip
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.strip()}")
    try:
        yield point
    finally:
        subprocess.run(["umount", "-l", str(point)], check=False)


def test_a_run_into_a_full_100kb_tmpfs_ends_in_one_line(tiny_tmpfs: Path) -> None:
    # 400 requests of 64 one-token chunks: each record holds 64 stamps (~0.5 KB), so the
    # records alone need ~200 KB, twice the disk. Whichever file fills it first, the run
    # ends with exit 1, one line naming that file and ENOSPC, run.json failed with the same
    # reason (the run's space reserve makes room for it), no .tmp file, no empty PNG.
    run_dir = tiny_tmpfs / "run"
    with fake_in_thread(FakeOpenAIServer(StreamScript(itl_s=0.001), keep_seen=False)) as fake:
        args = _bench_args(fake.url, run_dir, requests=400, output_len=64)
        args[args.index("--concurrency") + 1] = "8"
        done = subprocess.run(
            [sys.executable, "-m", "loadgen.cli", *args],
            capture_output=True, text=True, timeout=100, cwd=Path(__file__).parents[2],
        )  # fmt: skip
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    last = done.stderr.strip().splitlines()[-1]
    assert re.fullmatch(
        rf"error: cannot write {re.escape(str(run_dir))}/\S+: {NO_SPACE} \(ENOSPC\)", last
    ), last
    assert done.stderr.count("error: cannot write") == 1
    run_json = json.loads((run_dir / "run.json").read_text())
    assert (run_json["status"], run_json["error"]) == ("failed", last.removeprefix("error: "))
    assert _tmp_files(tiny_tmpfs) == []
    assert [p for p in run_dir.rglob("*.png") if p.stat().st_size == 0] == []
