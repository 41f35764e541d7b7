"""``loadgen compare`` refuses a run that is on both sides, or twice on one, however its path
is spelled: a run compared with itself decides nothing (it only ever ends inconclusive)."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from analysis.compare import CompareError, compare_paths
from analysis.gate_file import load_gate
from loadgen.cli import main
from loadgen.runformat.manifest import write_manifest
from tests.support.synthetic_run import build_run as build_unsealed_run

WHY = "a run compared with itself decides nothing"


def _run(run_dir: Path) -> Path:
    """The synthetic run, sealed as a complete run is."""
    build_unsealed_run(run_dir)
    write_manifest(run_dir, "ok", ["loadgen", "run", "prefix-eviction"])
    return run_dir


def _refused(tmp_path: Path, baseline: Path, candidate: Path, line: str) -> None:
    """The CLI exits 2 with ``error: could not compare: <line>`` alone, before any output
    directory exists; the library call the gate makes raises the same."""
    out = tmp_path / "out"
    result = CliRunner().invoke(main, ["compare", str(baseline), str(candidate), "--out", str(out)])
    assert result.exit_code == 2, result.output
    assert result.output == f"error: could not compare: {line}\n"
    assert not out.exists()
    with pytest.raises(CompareError) as info:
        compare_paths(baseline, candidate, load_gate())
    assert str(info.value) == line


def test_the_same_run_as_baseline_and_candidate_is_refused(tmp_path: Path) -> None:
    run = _run(tmp_path / "run")
    _refused(tmp_path, run, run, f"{run} is given as both baseline and candidate: {WHY}")


def test_the_same_run_spelled_another_way_is_refused(tmp_path: Path) -> None:
    run = _run(tmp_path / "run")
    link = tmp_path / "link"
    link.symlink_to(run)
    _refused(tmp_path, run, link, f"{link} is given as both baseline and candidate ({run} and "
             f"{link} are both {run.resolve()}): {WHY}")  # fmt: skip
    dotted = tmp_path / "run" / ".." / "run"
    _refused(tmp_path, dotted, run, f"{run} is given as both baseline and candidate ({dotted} "
             f"and {run} are both {run.resolve()}): {WHY}")  # fmt: skip


def test_a_directory_of_runs_holding_the_other_sides_run_is_refused(tmp_path: Path) -> None:
    pool = tmp_path / "pool"
    _run(pool / "a")
    _run(pool / "b")
    _refused(tmp_path, pool, pool / "b", f"{pool / 'b'} is given as both baseline and "
             f"candidate: {WHY}")  # fmt: skip


def test_one_run_twice_within_a_side_is_refused(tmp_path: Path) -> None:
    pool = tmp_path / "pool"
    first = _run(pool / "a")
    (pool / "b").symlink_to(first)
    other = _run(tmp_path / "other")
    real = first.resolve()
    _refused(tmp_path, other, pool, f"{first} and {pool / 'b'} are the same run ({real}) on the "
             "candidate side: each run may count once")  # fmt: skip
