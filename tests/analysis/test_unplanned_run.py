"""A run that ended before its plan was made (its server could not be reached, say) is a
complete run with nothing in it: validate says so with exit 4, report says there is nothing
to report; a run that lost its plan.json after cases ran stays invalid."""

from __future__ import annotations

from pathlib import Path

import msgspec
from click.testing import CliRunner

from analysis.validate import validate_run
from loadgen.cli import main
from loadgen.runformat import RunInfo
from loadgen.runformat.manifest import write_manifest

ERROR = "ServerStartError: cannot reach http://127.0.0.1:9/health: ECONNREFUSED"


def _run(tmp_path: Path, status: str) -> Path:
    run = tmp_path / "run"
    run.mkdir()
    info = RunInfo(format_version=1, scenario="disconnect-abort", status=status, error=ERROR)
    (run / "run.json").write_bytes(msgspec.json.encode(info))
    write_manifest(run, status, ["loadgen", "run", "disconnect-abort"])
    return run


def test_a_run_that_failed_before_planning_is_valid_and_needs_attention(tmp_path: Path) -> None:
    run = _run(tmp_path, "failed")
    result = validate_run(run)
    assert result.problems == []
    assert result.attention == [
        f"the run ended before it was planned (status failed: {ERROR}); no case ran"
    ]
    out = CliRunner().invoke(main, ["validate", str(run)])
    assert out.exit_code == 4
    # Every reader says so through the one check (loadgen.runformat.open_run), in one line.
    ended = f"{run}: the run ended before it was planned (status failed: {ERROR}); no case ran"
    for command, what in ((["report"], "report"), (["export"], "export")):
        out = CliRunner().invoke(main, [*command, str(run)])
        assert out.exit_code == 1, out.output
        assert out.output == f"error: {ended}: there is nothing to {what}\n"
    out = CliRunner().invoke(main, ["compare", str(run), str(run)])
    assert out.exit_code == 2
    assert out.output == f"error: could not compare: {ended}\n"
    assert sorted(p.name for p in run.iterdir()) == ["manifest.json", "run.json"]


def test_an_ok_run_without_its_plan_is_invalid(tmp_path: Path) -> None:
    result = validate_run(_run(tmp_path, "ok"))
    assert "plan.json missing" in result.problems


def test_a_failed_run_whose_cases_sent_requests_needs_its_plan(tmp_path: Path) -> None:
    run = _run(tmp_path, "failed")
    (run / "cases" / "direct").mkdir(parents=True)
    (run / "cases" / "direct" / "requests.jsonl").write_text("")
    result = validate_run(run)
    assert "plan.json missing" in result.problems
