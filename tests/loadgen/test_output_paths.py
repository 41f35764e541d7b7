"""Every output path of every command goes through one check before any work
(``loadgen.cli.output_paths``), and a write that fails after it is one line, exit 1.

The matrix: each command that writes a path the user names (export's file and directory,
trace stats' plot, compare's and run's and gate's directories) × each kind of bad path (a
directory where a file goes or a file where a directory goes, a place under /proc, a
read-only filesystem, a missing directory, a path inside a run directory, reached directly or
through a symlink). Each refusal is one line, exit 2, nothing read or started, and the
message is the one derived by hand from the rule it breaks.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

import loadgen.run
from analysis.report import build_report
from analysis.validate import validate_run
from loadgen.cli import main
from loadgen.runformat.layout import PLOTS_DIR, REQUESTS_FILE, TTFT_PLOT, case_dir
from loadgen.runformat.manifest import write_manifest
from tests.support.synthetic_run import TEST_CASE, build_run

TRACE = Path(__file__).parents[1] / "fixtures" / "traces" / "mooncake_fast25_synthetic_trace.jsonl"
NO_SUCH = "No such file or directory"
READ_ONLY = "Read-only file system"
NO_SPACE = "No space left on device"
#: Where the run's files go: refused for every command (the rule's own words).
INSIDE = "a run's files are written only by the run itself (give a path outside it)"


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A sealed synthetic run (``synthetic_run``), as loadgen leaves one, and beside it
    ``twin``, a copy: compare's other side (a run compared with itself is refused)."""
    run_dir = tmp_path_factory.mktemp("sealed") / "run"
    build_run(run_dir)
    build_report(run_dir)
    write_manifest(run_dir, "ok", ["loadgen", "run", "prefix-eviction"])
    shutil.copytree(run_dir, run_dir.parent / "twin")
    return run_dir


def _mount(point: Path, options: str) -> None:
    point.mkdir()
    if shutil.which("mount") is None or os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root and mount(8)")
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(point)],
                          capture_output=True, text=True)  # fmt: skip
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")


@pytest.fixture(scope="module")
def read_only(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A read-only filesystem (a tmpfs mounted ``ro``), holding one directory ``sub``."""
    point = tmp_path_factory.mktemp("ro") / "mnt"
    _mount(point, "size=64k")
    (point / "sub").mkdir()
    subprocess.run(["mount", "-o", "remount,ro", str(point)], check=True)
    try:
        yield point
    finally:
        subprocess.run(["umount", "-l", str(point)], check=False)


def _fill(point: Path) -> None:
    """Fill the filesystem at ``point`` to its last byte with one file."""
    fd = os.open(point / "filler", os.O_WRONLY | os.O_CREAT)
    try:
        while os.write(fd, b"\0" * 4096):
            pass
    except OSError:
        pass
    finally:
        os.close(fd)


@pytest.fixture
def full_disk(tmp_path: Path) -> Iterator[Path]:
    """A filesystem with no byte left: a 64 KB tmpfs filled by one file. A new empty file
    still fits (the check's probe), any byte written does not."""
    point = tmp_path / "full"
    _mount(point, "size=64k")
    _fill(point)
    try:
        yield point
    finally:
        subprocess.run(["umount", "-l", str(point)], check=False)


#: Command → (its arguments before the output path, the option, what it writes, the suffix
#: of a file's name).
COMMANDS = {
    "export csv": (["export", "{run}", "--out"], "--out", "file", ".csv"),
    "export vllm-bench": (["export", "{run}", "--format", "vllm-bench", "--out"], "--out",
                          "dir", ""),
    "trace stats": (["trace", "stats", str(TRACE), "--plot"], "--plot", "file", ".png"),
    "compare": (["compare", "{run}", "{run.parent}/twin", "--out"], "--out", "dir", ""),
    "run": (["run", "bench", "--url", "http://127.0.0.1:9", "--requests", "2", "--out"],
            "--out", "dir", ""),
    "gate": (["gate", "bench", "--url", "http://127.0.0.1:9", "--baseline-vllm", "0.32.0",
              "--candidate-vllm", "0.32.0", "--requests", "2", "--out"], "--out", "dir", ""),
    "gateway": (["gateway", "--upstream", "http://127.0.0.1:9", "--events-file"],
                "--events-file", "file", ".jsonl"),
}  # fmt: skip

#: Bad path kinds: (how to build the path, the refusal, derived by hand from the rule).
BAD = ["wrong kind", "proc", "read-only", "missing directory", "run file", "inside a run",
       "symlink into a run"]  # fmt: skip


def _bad_path(kind: str, wants: str, ext: str, tmp: Path, run: Path, ro: Path) -> Path:
    if kind == "wrong kind":
        other = tmp / ("a-dir" if wants == "file" else "a-file")
        other.mkdir() if wants == "file" else other.write_text("x")
        return other
    name = f"out{ext}"
    return {
        "proc": Path("/proc/self") / name,
        "read-only": ro / "sub" / name,
        "missing directory": tmp / "missing" / name,
        "run file": (
            run / PLOTS_DIR / TTFT_PLOT
            if ext == ".png"
            else case_dir(run, TEST_CASE) / REQUESTS_FILE
        ),
        "inside a run": run / "cases" / name,
        "symlink into a run": tmp / "link" / name,
    }[kind]


def _expected(kind: str, option: str, wants: str, path: Path, run: Path) -> str:
    """The refusal of a path of ``kind`` for an option that wants a ``file`` or a ``dir``."""
    where = f"{option} {path}"
    if kind == "wrong kind":
        return (f"{where} is a directory; give a file path" if wants == "file"
                else f"{where} is a file, not a directory")  # fmt: skip
    if kind in ("proc", "read-only"):
        return f"{where} cannot be created or written: {NO_SUCH if kind == 'proc' else READ_ONLY}"
    if kind == "missing directory":
        return f"{where}: its directory {path.parent} does not exist"
    return f"{where} is inside the run directory {run}: {INSIDE}"


def _digest(run: Path) -> dict[str, str]:
    return {p.relative_to(run).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(run.rglob("*")) if p.is_file()}  # fmt: skip


#: Every command × every bad path, but a missing directory for a directory output: a directory
#: the user names is created with its parents (``test_a_directory_the_user_names_is_created``).
CASES = [(c, k) for c in COMMANDS for k in BAD
         if not (k == "missing directory" and COMMANDS[c][2] == "dir")]  # fmt: skip


@pytest.mark.parametrize(("command", "kind"), CASES)
def test_every_bad_output_path_is_refused_in_one_line_before_any_work(
    command: str, kind: str, run: Path, read_only: Path, tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    args, option, wants, ext = COMMANDS[command]
    path = _bad_path(kind, wants, ext, tmp_path, run, read_only)
    if kind == "symlink into a run":
        (tmp_path / "link").symlink_to(run / "cases")
    expected = _expected(kind, option, wants, path, run)
    started: list[object] = []

    async def never(*a: object, **k: object) -> None:
        started.append(a)

    monkeypatch.setattr(loadgen.run, "run_scenario", never)
    before = _digest(run)
    argv = [a.format(run=run) for a in args] + [str(path)]
    result = CliRunner().invoke(main, argv)
    assert result.exit_code == 2, result.output
    assert result.output == f"Error: {expected}\n"
    assert started == []
    assert _digest(run) == before  # the run is as it was sealed
    assert not (tmp_path / "missing").exists()  # the check creates nothing


#: The file outputs, and how the refusal of a path spelled as a directory reads.
FILE_OUTPUTS = [c for c in COMMANDS if COMMANDS[c][2] == "file"]


@pytest.mark.parametrize("spelling", ["/", "/."])
@pytest.mark.parametrize("command", FILE_OUTPUTS)
def test_a_file_path_spelled_as_a_directory_is_refused(
    command: str, spelling: str, run: Path, tmp_path: Path
) -> None:
    # "--plot dir.png/" once wrote a file named dir.png: pathlib drops the trailing slash.
    args, option, _, ext = COMMANDS[command]
    typed = f"{tmp_path}/new{ext}{spelling}"
    argv = [a.format(run=run) for a in args] + [typed]
    result = CliRunner().invoke(main, argv)
    assert result.exit_code == 2, result.output
    slash = " (it ends in /)" if spelling == "/" else ""
    refusal = f"{option} {typed} names a directory{slash}; give a file path"
    if command == "gateway":  # its flags are the fields of its config model
        refusal = (f"invalid gateway configuration: {option}: {typed} names a directory (it "
                   "ends in /); give a file path")  # fmt: skip
    assert result.output.splitlines()[-1] == f"Error: {refusal}"  # the gateway adds usage
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("command", list(COMMANDS))
def test_a_path_with_a_control_character_is_refused_shown_escaped(
    command: str, run: Path, tmp_path: Path
) -> None:
    # An ESC in --out was printed raw as the path written: the terminal ran it.
    args, option, _, ext = COMMANDS[command]
    typed = f"{tmp_path}/x\x1b[31m{ext}"
    result = CliRunner().invoke(main, [a.format(run=run) for a in args] + [typed])
    assert result.exit_code == 2, result.output
    shown = f"{tmp_path}/x\\x1b[31m{ext}"
    assert result.output.splitlines()[-1] == (
        f"Error: {option} {shown} holds a control character; give a path without one"
    )
    assert list(tmp_path.iterdir()) == []


def test_a_run_out_that_is_a_finished_run_is_called_one(run: Path) -> None:
    # It said "is inside the run directory RUN" of RUN itself.
    argv = ["run", "bench", "--url", "http://127.0.0.1:9", "--out", str(run)]
    result = CliRunner().invoke(main, argv)
    assert result.exit_code == 2
    assert result.output == f"Error: --out {run} is a run directory already: {INSIDE}\n"


def test_export_into_a_sealed_record_file_leaves_the_run_intact(run: Path) -> None:
    # The example of the kind: `--out RUN/cases/CASE/requests.jsonl` replaced the sealed
    # records with CSV and exited 0.
    target = case_dir(run, TEST_CASE) / REQUESTS_FILE
    records = target.read_bytes()
    result = CliRunner().invoke(main, ["export", str(run), "--out", str(target)])
    assert result.exit_code == 2
    assert target.read_bytes() == records
    assert validate_run(run).ok


def test_exports_default_place_inside_the_run_is_its_own_unsealed_directory(
    run: Path, tmp_path: Path
) -> None:
    copy = tmp_path / "run"
    shutil.copytree(run, copy)
    result = CliRunner().invoke(main, ["export", str(copy)])
    assert result.exit_code == 0, result.output
    assert result.output == f"{copy}/export/requests.csv\n"
    named = CliRunner().invoke(main, ["export", str(copy), "--out", f"{copy}/export/mine.csv"])
    assert named.exit_code == 0, named.output
    assert validate_run(copy).ok  # export/ is never sealed, never read


def test_a_directory_the_user_names_is_created(run: Path, tmp_path: Path) -> None:
    out = tmp_path / "a" / "b" / "cmp"
    result = CliRunner().invoke(
        main, ["compare", str(run), str(run.parent / "twin"), "--out", str(out)]
    )
    assert result.exit_code in (0, 3), result.output
    assert (out / "compare.md").is_file()


def test_a_plot_is_written_where_its_name_says_or_refused(tmp_path: Path) -> None:
    # `--plot /etc/passwd` wrote /etc/passwd.png while printing /etc/passwd: a plot path must
    # end in .png, and the file written is the file printed.
    refused = CliRunner().invoke(main, ["trace", "stats", str(TRACE), "--plot", "/etc/passwd"])
    assert refused.exit_code == 2
    assert refused.output == (
        "Error: --plot /etc/passwd: the file written is PNG; give a path ending in .png\n"
    )
    assert not Path("/etc/passwd.png").exists()
    plot = tmp_path / "curve.PNG"
    done = CliRunner().invoke(main, ["trace", "stats", str(TRACE), "--plot", str(plot)])
    assert done.exit_code == 0, done.output
    assert f"plot: {plot}\n" in done.output
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    as_json = CliRunner().invoke(main, ["trace", "stats", str(TRACE), "--plot", str(plot),
                                        "--json"])  # fmt: skip
    assert as_json.exit_code == 0, as_json.output
    assert json.loads(as_json.output)["plot"] == str(plot)
    assert [p.name for p in tmp_path.iterdir()] == ["curve.PNG"]


def test_export_to_dev_full_is_one_line_and_exit_1(run: Path) -> None:
    # A device is written in place (it cannot be renamed over); /dev/full takes no byte.
    result = CliRunner().invoke(main, ["export", str(run), "--out", "/dev/full"])
    assert result.exit_code == 1
    assert result.output == f"error: cannot write /dev/full: {NO_SPACE} (ENOSPC)\n"


def test_export_to_dev_null_is_written_in_place(run: Path) -> None:
    result = CliRunner().invoke(main, ["export", str(run), "--out", "/dev/null"])
    assert result.exit_code == 0, result.output
    assert Path("/dev/null").is_char_device()


@pytest.mark.parametrize(
    ("command", "written"),
    [
        (["export", "{run}", "--out", "{out}/requests.csv"], "{out}/requests.csv"),
        (["export", "{run}", "--format", "vllm-bench", "--out", "{out}/vb"], "{out}/vb/"),
        (["trace", "stats", str(TRACE), "--plot", "{out}/curve.png"], "{out}/curve.png"),
        (["compare", "{run}", "{run.parent}/twin", "--out", "{out}/cmp"], "{out}/cmp/"),
    ],
)
def test_a_write_that_fails_after_the_check_is_one_line_and_exit_1(
    command: list[str], written: str, run: Path, full_disk: Path
) -> None:
    argv = [a.format(run=run, out=full_disk) for a in command]
    result = CliRunner().invoke(main, argv)
    assert result.exit_code == 1, result.output
    last = result.output.strip().splitlines()[-1]
    prefix = f"error: cannot write {written.format(out=full_disk)}"
    assert last.startswith(prefix) and last.endswith(f": {NO_SPACE} (ENOSPC)"), last
    assert "Traceback" not in result.output
    assert [p.name for p in full_disk.rglob("*.tmp")] == []


def _size_of(run: Path) -> int:
    """Bytes of ``run``'s files, plus room for the directories of a tmpfs holding a copy."""
    return sum(p.stat().st_size for p in run.rglob("*") if p.is_file()) + 256 * 1024


def test_report_checks_that_the_run_takes_files_before_any_work(run: Path, tmp_path: Path) -> None:
    # A run on a read-only filesystem: its report cannot be rebuilt there; refused before
    # anything is read, in one line, exit 2.
    point = tmp_path / "ro"
    _mount(point, f"size={_size_of(run)}")
    try:
        shutil.copytree(run, point / "run")
        subprocess.run(["mount", "-o", "remount,ro", str(point)], check=True)
        refused = CliRunner().invoke(main, ["report", str(point / "run")])
        assert refused.exit_code == 2
        assert refused.output == (
            f"Error: run directory {point / 'run'} cannot be created or written: {READ_ONLY}\n"
        )
    finally:
        subprocess.run(["umount", "-l", str(point)], check=False)


def test_report_on_a_full_disk_is_one_line_and_exit_1(run: Path, tmp_path: Path) -> None:
    point = tmp_path / "disk"
    _mount(point, f"size={_size_of(run)}")
    try:
        copy = point / "run"
        shutil.copytree(run, copy)
        _fill(point)
        result = CliRunner().invoke(main, ["report", str(copy)])
        assert result.exit_code == 1, result.output
        last = result.output.strip().splitlines()[-1]
        assert last.startswith(f"error: cannot write {copy}/"), last
        assert last.endswith(f": {NO_SPACE} (ENOSPC)"), last
        assert [p.name for p in point.rglob("*.tmp")] == []
    finally:
        subprocess.run(["umount", "-l", str(point)], check=False)
