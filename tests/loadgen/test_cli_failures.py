"""The CLI never lets an analysis failure pass for a result: a run whose report failed does not
exit 0 or say "status ok"; compare and gate exit with their error code (2), never 1 (a
regression to CI), and say why in one line; validate never shows a traceback."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

import analysis.compare
import analysis.compare_runs
import analysis.report
import analysis.validate
import loadgen.run
from loadgen.cli import main
from loadgen.run import RunResult
from server.net.exit_codes import CompareExit, GateExit


def _broken_report(run_dir: Path) -> None:
    raise ValueError("histogram ttft_seconds: no +Inf bucket")


def test_a_run_whose_report_failed_exits_1_and_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run_dir = tmp_path / "run"

    async def recorded(
        scenario, params, run_dir, command, hooks, workers, kept, transform
    ) -> RunResult:  # type: ignore[no-untyped-def]
        run_dir.mkdir(parents=True, exist_ok=True)  # --out was made when it was checked
        (run_dir / "plan.json").write_text("{}")  # planned and recorded: a report is due
        return RunResult(run_dir, "ok")

    monkeypatch.setattr(loadgen.run, "run_scenario", recorded)
    monkeypatch.setattr(analysis.report, "build_report", _broken_report)
    result = CliRunner().invoke(
        main, ["run", "kv-preemption", "--url", "http://127.0.0.1:9", "--out", str(run_dir)]
    )
    assert result.exit_code == 1
    assert "report failed: ValueError: histogram ttft_seconds: no +Inf bucket" in result.output
    assert "(status ok, report failed)" in result.output
    assert "(status ok)" not in result.output
    assert (run_dir / "manifest.json").exists()  # the records are sealed all the same


def test_an_unexpected_compare_error_exits_2_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def crash(*args: object, **kwargs: object) -> None:
        raise KeyError("le")

    monkeypatch.setattr(analysis.compare, "compare_paths", crash)
    # Empty stand-ins for the sides: the up-front check that they hold distinct runs passes.
    monkeypatch.setattr(analysis.compare_runs, "distinct_sides", lambda *sides: None)
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    result = CliRunner().invoke(main, ["compare", str(a), str(b), "--out", str(tmp_path / "c")])
    assert result.exit_code == CompareExit.CANNOT_COMPARE == 2
    assert result.output == "error: could not compare: KeyError: 'le'\n"
    assert result.exception is None or isinstance(result.exception, SystemExit)


def test_validate_turns_an_unexpected_error_into_a_problem(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def crash(run_dir: Path) -> None:
        raise ValueError("histogram ttft_seconds: no +Inf bucket")

    monkeypatch.setattr(analysis.validate, "validate_run", crash)
    (tmp_path / "run.json").write_text("{}")  # a run directory, if a broken one
    result = CliRunner().invoke(main, ["validate", str(tmp_path)])
    assert result.exit_code == 1
    assert (
        "problem: validation could not finish: ValueError: histogram ttft_seconds: no +Inf "
        "bucket" in result.output
    )
    assert "INVALID: 1 problem(s)" in result.output
    assert isinstance(result.exception, SystemExit)


def test_validate_on_a_directory_that_is_no_run_is_a_usage_error(tmp_path: Path) -> None:
    # no run.json, plan.json or manifest.json: nothing to validate (exit 2, as report says)
    result = CliRunner().invoke(main, ["validate", str(tmp_path)])
    assert result.exit_code == 2, result.output
    (line,) = result.output.splitlines()
    assert line.startswith(f"error: {tmp_path}") and "INVALID" not in result.output


def test_a_gate_whose_run_is_interrupted_exits_4_never_1(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Exit 1 is a regression to CI; an interrupted run of a side stops the gate with its own
    # code (GateExit.RUN_NOT_OK), as a run that ended failed does. Before, run_and_report
    # exited 1 for both commands.
    from server.engines import project_engine

    async def interrupted(*args: object, **kwargs: object) -> RunResult:
        raise KeyboardInterrupt

    monkeypatch.setattr(loadgen.run, "run_scenario", interrupted)
    ours = project_engine().version  # the project's own engine on both sides: nothing to build
    args = ["gate", "kv-preemption", "--baseline-vllm", ours, "--candidate-vllm", ours,
            "--out", str(tmp_path / "gate")]  # fmt: skip
    result = CliRunner().invoke(main, args)
    assert result.exit_code == GateExit.RUN_NOT_OK == 4, result.output
    assert "interrupted" in result.output


def test_a_kill_with_one_replica_is_one_sentence_on_the_command_line() -> None:
    result = CliRunner().invoke(main, ["run", "trace-replay", "--kill-replica", "1@5"])
    assert result.exit_code == 2
    assert result.output.splitlines()[-1] == (
        "Error: --kill-replica 1@5: with --replicas 1 no replica can be killed (replica 0 never "
        "is; give --replicas 2 or more)"
    )
    four = CliRunner().invoke(main, ["run", "trace-replay", "--replicas", "4", "--kill-replica",
                                     "4@5"])  # fmt: skip
    assert four.exit_code == 2
    assert four.output.splitlines()[-1] == (
        "Error: --kill-replica 4@5: there is no replica 4; with --replicas 4 only a replica from "
        "1 to 3 can be killed"
    )
