"""Files that belong together are written as a set, and outputs that are streams stay streams.

- ``loadgen report`` whose disk fills on the last file (``report.html``) leaves the previous
  ``report.md``, ``report.json``, plots and manifest exactly as they were (they agree, so
  ``validate`` says what it said before), and no temporary file;
- ``loadgen export --out /dev/stdout`` into a pipe writes a whole Parquet file (it seeks
  to write its footer: it is built in memory first), into a shell's ``>> file`` appends
  without truncating, and its path line goes to stderr, not into the data;
- an ``--out`` that is a symbolic link keeps the link: the file it names is replaced.
"""

from __future__ import annotations

import errno
import io
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from click.testing import CliRunner

import loadgen.runformat.atomic as atomic
from loadgen.cli import main
from tests.support.synthetic_run import build_run

pytestmark = [pytest.mark.timeout(120)]

#: The synthetic run's records: 2 cases × (6 + 6 + 5 + 6 + 6) requests (its module doc).
RECORDS = 58


@pytest.fixture(scope="module")
def sealed_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The synthetic prefix-eviction run, reported and sealed once."""
    run = tmp_path_factory.mktemp("set") / "run"
    build_run(run)
    result = CliRunner().invoke(main, ["report", str(run)])
    assert result.exit_code == 0, result.output
    return run


def _report_files(run: Path) -> dict[str, bytes]:
    names = ["report.md", "report.json", "report.html", "manifest.json"]
    plots = sorted(p.relative_to(run).as_posix() for p in (run / "plots").iterdir())
    return {name: (run / name).read_bytes() for name in [*names, *plots]}


def test_a_report_whose_disk_fills_on_its_last_file_leaves_the_previous_set(
    sealed_run: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run = tmp_path / "run"
    subprocess.run(["cp", "-a", str(sealed_run), str(run)], check=True)
    before = _report_files(run)
    real_fsync = os.fsync

    def full_on_html(fd: int) -> None:
        # The disk fills while report.html is written (its temporary file is synced last).
        if os.readlink(f"/proc/self/fd/{fd}").endswith("report.html.tmp"):
            raise OSError(errno.ENOSPC, "No space left on device")
        real_fsync(fd)

    monkeypatch.setattr(atomic.os, "fsync", full_on_html)
    # --reseal changes report.md and report.json (the new re-seal is listed): before, both
    # were rewritten, the manifest was not, and validate said INVALID until a report passed.
    result = CliRunner().invoke(main, ["report", str(run), "--reseal", "disk test"])
    assert result.exit_code == 1
    assert result.output.splitlines()[-1] == (
        f"error: cannot write {run}/report.html: No space left on device (ENOSPC)"
    )
    assert _report_files(run) == before
    assert sorted(p.name for p in run.rglob("*.tmp")) == []
    monkeypatch.undo()
    check = CliRunner().invoke(main, ["validate", str(run)])
    # As before the failed report: valid, needing attention only for its first seal (the
    # synthetic run was sealed by `report`, without a manifest of its own).
    assert check.exit_code == 4, check.output
    assert "INVALID" not in check.output


def _export(
    run: Path, fmt: str, stdout: int | io.BufferedWriter
) -> subprocess.CompletedProcess[bytes]:
    command = [sys.executable, "-m", "loadgen.cli", "export", str(run), "--format", fmt,
               "--out", "/dev/stdout"]  # fmt: skip
    return subprocess.run(command, stdout=stdout, stderr=subprocess.PIPE, check=False, timeout=60)


def test_parquet_into_a_pipe_is_a_whole_file_and_the_path_goes_to_stderr(sealed_run: Path) -> None:
    done = _export(sealed_run, "parquet", subprocess.PIPE)
    assert done.returncode == 0, done.stderr
    assert done.stdout[:4] == done.stdout[-4:] == b"PAR1"  # Parquet's magic, head and footer
    assert len(pd.read_parquet(io.BytesIO(done.stdout))) == RECORDS
    assert done.stderr.decode().splitlines() == ["/dev/stdout"]


def test_csv_into_a_shells_append_keeps_what_the_file_held(
    sealed_run: Path, tmp_path: Path
) -> None:
    log = tmp_path / "log.csv"
    log.write_text("kept\n")
    with open(log, "ab") as appended:
        done = _export(sealed_run, "csv", appended)
    assert done.returncode == 0, done.stderr
    lines = log.read_text().splitlines()
    assert lines[0] == "kept"
    assert lines[1].startswith("case,phase,request_id")
    assert len(lines) == 1 + 1 + RECORDS  # kept, the header, one line per record
    assert Path("/dev/stdout").is_symlink()  # never replaced by a file


def test_an_out_that_is_a_symlink_keeps_the_link(sealed_run: Path, tmp_path: Path) -> None:
    target, link = tmp_path / "records.csv", tmp_path / "link.csv"
    target.write_text("old\n")
    link.symlink_to(target)
    result = CliRunner().invoke(main, ["export", str(sealed_run), "--out", str(link)])
    assert result.exit_code == 0, result.output
    assert link.is_symlink() and link.resolve() == target
    assert len(target.read_text().splitlines()) == 1 + RECORDS
