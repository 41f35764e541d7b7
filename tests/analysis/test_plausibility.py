"""Records that cannot be true are refused by every reader, with or without a manifest, and
``--reseal`` cannot launder them (``analysis.plausibility`` in the integrity rule).

Each example is a hand edit of the synthetic run (``synthetic_run``), whose numbers give the
expected lines: phase k starts at 1,000 s + k × 2 s and its request j is sent j × 150 ms
later (so request 0 is the phase's first send, its ``start_ns``); every request is 72 prompt
tokens (64 + 8) with ``max_tokens`` 4, streamed as 4 one-token chunks, HTTP 200; the tested
case's server holds 128 tokens of KV cache.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from analysis.integrity import check_run
from analysis.validate import validate_run
from loadgen.cli import main
from loadgen.runformat.layout import CASE_FILE, MANIFEST_FILE, REQUESTS_FILE, case_dir
from loadgen.runformat.manifest import write_manifest
from tests.support.synthetic_run import TEST_CASE, build_run

S = 1_000_000_000
COMMAND = ["loadgen", "run", "prefix-eviction"]
Edit = Callable[[dict[str, Any]], None]


def _edit_records(run_dir: Path, phase: str, indices: range, edit: Edit) -> None:
    path = case_dir(run_dir, TEST_CASE) / REQUESTS_FILE
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    for row in rows:
        if row["phase"] == phase and row["index"] in indices:
            edit(row)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def _sent_earlier(row: dict[str, Any]) -> None:
    row["sent_ns"] -= 1_000 * S


def _huge_prompt_usage(row: dict[str, Any]) -> None:
    row["usage_prompt_tokens"] = 10**18


def _http_500(row: dict[str, Any]) -> None:
    row["http_status"] = 500


def _usage_3_of_4(row: dict[str, Any]) -> None:
    row["usage_completion_tokens"] = 3


#: The issue's examples: (the edit, its phase and request indices, the line derived by hand).
EXAMPLES = {
    # The whole warm phase sent 1,000 s early: request 0 was its first send (start_ns), so it
    # lies exactly 1,000 s before; the TTFT of each would be ~1,000 s.
    "stamps 1000 s before the phase": (
        _sent_earlier, "warm", range(6),
        f"{TEST_CASE}: 6 record(s) with stamps outside their phase (by more than 1 s), e.g. "
        "warm-0000: sent 1000.000 s before the phase began",
    ),
    # 10^18 prompt tokens on a server whose whole KV cache holds 128.
    "usage.prompt_tokens 1e18": (
        _huge_prompt_usage, "cold", range(2, 3),
        f"{TEST_CASE}: 1 record(s) with usage beyond the plan's limits, e.g. cold-0002: "
        "usage.prompt_tokens 1000000000000000000 > the server's KV cache of 128 tokens",
    ),
    "status ok with HTTP 500": (
        _http_500, "revisit", range(1, 2),
        f"{TEST_CASE}: 1 record(s) with status ok but no HTTP 200, e.g. revisit-0001: HTTP 500",
    ),
    # 4 one-token chunks streamed, the final usage says 3.
    "usage disagrees with the streamed tokens": (
        _usage_3_of_4, "rewarm", range(0, 1),
        f"{TEST_CASE}: 1 record(s) whose usage disagrees with the streamed tokens, e.g. "
        "rewarm-0000: 4 token(s) streamed, usage.completion_tokens 3",
    ),
}  # fmt: skip


@pytest.fixture
def unsealed(tmp_path: Path) -> Path:
    """The synthetic run as a killed run leaves it: no report, no manifest."""
    run_dir = tmp_path / "run"
    build_run(run_dir)
    return run_dir


@pytest.mark.parametrize("example", list(EXAMPLES))
def test_a_run_without_manifest_is_refused_by_report_and_called_invalid(
    unsealed: Path, example: str
) -> None:
    edit, phase, indices, line = EXAMPLES[example]
    _edit_records(unsealed, phase, indices, edit)
    assert check_run(unsealed).implausible == [line]
    result = CliRunner().invoke(main, ["report", str(unsealed)])
    assert result.exit_code == 1
    assert result.output == f"cannot publish: {line}\n"
    assert not (unsealed / MANIFEST_FILE).exists()  # never sealed
    assert not (unsealed / "report.json").exists()  # no figure published
    validated = CliRunner().invoke(main, ["validate", str(unsealed)])
    assert validated.exit_code == 1
    assert f"problem: {line}\n" in validated.output
    # With it: no manifest, no report.json.
    assert validated.output.endswith("INVALID: 3 problem(s)\n")
    exported = CliRunner().invoke(main, ["export", str(unsealed)])
    assert exported.exit_code == 1 and line in exported.output


@pytest.mark.parametrize("example", list(EXAMPLES))
def test_a_sealed_run_of_such_records_is_refused_and_reseal_cannot_launder_it(
    unsealed: Path, example: str
) -> None:
    edit, phase, indices, line = EXAMPLES[example]
    _edit_records(unsealed, phase, indices, edit)
    write_manifest(unsealed, "ok", COMMAND)  # sealed as if its writer had written them
    manifest = (unsealed / MANIFEST_FILE).read_bytes()
    for extra in ([], ["--reseal", "the records are fine"]):
        result = CliRunner().invoke(main, ["report", *extra, str(unsealed)])
        assert result.exit_code == 1, extra
        assert result.output == f"cannot publish: {line}\n", extra
    assert (unsealed / MANIFEST_FILE).read_bytes() == manifest
    assert validate_run(unsealed).problems == [line, "report.json missing"]


def test_one_line_per_kind_with_its_count(unsealed: Path) -> None:
    for edit, phase, indices, _ in EXAMPLES.values():
        _edit_records(unsealed, phase, indices, edit)
    result = CliRunner().invoke(main, ["report", str(unsealed)])
    assert result.exit_code == 1
    # In the rule's order: stamps, limits, stream, status.
    lines = [list(EXAMPLES.values())[i][3] for i in (0, 1, 3, 2)]
    assert result.output.splitlines() == [f"cannot publish: {x}" for x in lines]


def test_a_prompt_sent_as_token_ids_must_be_counted_as_sent(unsealed: Path) -> None:
    # Without the server's capacity to bound it, the exact prompt still does: 72 token IDs
    # were sent, the usage says 10^18.
    info_path = case_dir(unsealed, TEST_CASE) / CASE_FILE
    info = json.loads(info_path.read_text())
    del info["server"]["capacity"]
    info_path.write_text(json.dumps(info))
    _edit_records(unsealed, "cold", range(2, 3), _huge_prompt_usage)
    assert check_run(unsealed).implausible == [
        f"{TEST_CASE}: 1 record(s) with usage beyond the plan's limits, e.g. cold-0002: "
        "usage.prompt_tokens 1000000000000000000, 72 prompt tokens sent"
    ]


def test_a_request_not_as_planned(unsealed: Path) -> None:
    def longer(row: dict[str, Any]) -> None:
        row["max_tokens"] = 40

    _edit_records(unsealed, "pollution", range(4, 5), longer)
    assert check_run(unsealed).implausible == [
        f"{TEST_CASE}: 1 record(s) not as planned, e.g. pollution-0004: max_tokens 40, planned 4"
    ]


def test_a_completion_usage_above_max_tokens_on_an_ok_record(unsealed: Path) -> None:
    def five(row: dict[str, Any]) -> None:
        row["usage_completion_tokens"] = 5

    _edit_records(unsealed, "cold", range(0, 1), five)
    assert check_run(unsealed).implausible == [
        f"{TEST_CASE}: 1 record(s) with usage beyond the plan's limits, e.g. cold-0000: "
        "usage.completion_tokens 5 > max_tokens 4",
        f"{TEST_CASE}: 1 record(s) whose usage disagrees with the streamed tokens, e.g. "
        "cold-0000: 4 token(s) streamed, usage.completion_tokens 5",
    ]


def test_stamps_within_the_tolerance_are_plausible(unsealed: Path) -> None:
    # 0.9 s before the phase's first send: inside the stated 1 s.
    def early(row: dict[str, Any]) -> None:
        row["sent_ns"] -= 900_000_000

    _edit_records(unsealed, "warm", range(0, 1), early)
    assert check_run(unsealed).implausible == []


def test_a_clean_run_and_a_run_of_workers_on_other_clocks_are_plausible(tmp_path: Path) -> None:
    from tests.support.synthetic_run import Options

    build_run(tmp_path / "clean")
    build_run(tmp_path / "workers", Options(workers=3, worker_clock_ahead_ns=5 * S))
    assert check_run(tmp_path / "clean").problems == []
    assert check_run(tmp_path / "workers").problems == []
