"""``loadgen run trace-replay``: a bad trace is refused before anything starts (exit 2, the
line number and reason, no run directory), as any bad parameter is; without a trace the
built-in fleet workload is replayed."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from loadgen.cli import main
from scenarios.trace_replay import TraceReplayParams, select


def test_a_bad_trace_line_exits_2_naming_the_line_and_leaves_no_run_directory(
    tmp_path: Path,
) -> None:
    trace = tmp_path / "bad.jsonl"
    good = {"timestamp": 0, "input_length": 600, "output_length": 5, "hash_ids": [1, 2]}
    backwards = {"timestamp": -1, "input_length": 600, "output_length": 5, "hash_ids": [1, 2]}
    trace.write_text("\n".join(json.dumps(x) for x in (good, good, backwards)) + "\n")
    out = tmp_path / "run"
    result = CliRunner().invoke(
        main, ["run", "trace-replay", "--trace", str(trace), "--out", str(out)]
    )
    assert result.exit_code == 2, result.output
    assert f"{trace}:3:" in result.output
    assert "timestamp" in result.output
    assert not out.exists()


def test_a_missing_trace_is_a_usage_error(tmp_path: Path) -> None:
    result = CliRunner().invoke(main, ["run", "trace-replay", "--trace", str(tmp_path / "no")])
    assert result.exit_code == 2
    assert "cannot read the trace" in result.output


def test_without_a_trace_the_builtin_fleet_workload_is_replayed_whole_at_its_own_pace() -> None:
    p = TraceReplayParams.model_validate({"replicas": 2})
    assert (p.trace, p.window, p.token_scale, p.speedup) == (None, "all", "1", "1")
    assert len(select(p).requests) == 105
    # Given flags win over the built-in's own.
    given = TraceReplayParams.model_validate({"window": "0-10s", "speedup": "2"})
    assert (given.window, given.speedup, len(select(given).requests)) == ("0-10s", "2", 17)


def test_gate_takes_the_same_trace_check(tmp_path: Path) -> None:
    trace = tmp_path / "bad.jsonl"
    trace.write_text('{"timestamp": 0, "input_length": 5, "output_length": 1, "hash_ids": []}\n')
    out = tmp_path / "gate"
    result = CliRunner().invoke(
        main,
        ["gate", "trace-replay", "--trace", str(trace), "--baseline-vllm", "0.32.0",
         "--candidate-vllm", "0.32.0", "--out", str(out)],
    )  # fmt: skip
    assert result.exit_code == 2, result.output
    assert f"{trace}:1:" in result.output
    assert not out.exists()


def test_help_says_what_runs_without_a_trace() -> None:
    result = CliRunner().invoke(main, ["run", "trace-replay", "--help"])
    assert result.exit_code == 0
    assert "built-in fleet workload" in result.output and "PydanticUndefined" not in result.output
