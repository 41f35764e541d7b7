"""Corrupt run files (``analysis.load`` shape checks): every reader keeps what is good, reports
what it skipped, and ``loadgen validate`` lists each as a problem without ever raising.

Each case damages one file of the synthetic run (``synthetic_run``: tested case ``TEST_CASE``,
29 requests a case, 6 per anchor phase) the way the black-box tester did.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import CliRunner

from analysis.compare import CompareError, compare_paths
from analysis.gate_file import load_gate
from analysis.integrity import IntegrityError
from analysis.load import load_run
from analysis.report import build_report, summarize
from analysis.validate import validate_run
from loadgen.cli import main
from loadgen.runformat import CaseInfo, RunFileError
from loadgen.runformat.layout import case_dir
from loadgen.runformat.manifest import write_manifest
from tests.support.synthetic_run import TEST_CASE, build_run

COMMAND = ["loadgen", "run", "prefix-eviction"]


@pytest.fixture(scope="module")
def clean(tmp_path_factory: pytest.TempPathFactory) -> Path:
    run_dir = tmp_path_factory.mktemp("clean")
    build_run(run_dir)
    build_report(run_dir)
    return run_dir


@pytest.fixture
def run_dir(clean: Path, tmp_path: Path) -> Path:
    copy = tmp_path / "run"
    shutil.copytree(clean, copy)
    return copy


def _replace_line(path: Path, lineno: int, change: Callable[[dict], object]) -> None:
    """Line ``lineno`` (1-based) of a JSON-lines file replaced by ``change(row)`` as JSON."""
    lines = path.read_text().splitlines()
    lines[lineno - 1] = json.dumps(change(json.loads(lines[lineno - 1])))
    path.write_text("\n".join(lines) + "\n")


# (file in the tested case, line, damage, the reason the reader gives, the row kind)
MISTYPED = [
    ("metrics/samples.jsonl", 6, lambda r: {"t_ns": "abc", "name": 5},
     "t_ns: Expected `int`, got `str`", "sample"),
    ("metrics/samples.jsonl", 7, lambda r: {k: v for k, v in r.items() if k != "value"},
     "value: missing (a required field)", "sample"),
    ("requests.jsonl", 1, lambda r: r | {"chunk_ns": "x"},
     "chunk_ns: Expected `array`, got `str`", "record"),
    ("requests.jsonl", 2, lambda r: r | {"sent_ns": 1.5},
     "sent_ns: Expected `int | null`, got `float`", "record"),
    ("phases.jsonl", 2, lambda r: r | {"start_ns": "x"},
     "start_ns: Expected `int`, got `str`", "phase"),
    ("metrics/scrapes.jsonl", 3, lambda r: r | {"late": "no"},
     "late: Expected `bool | null`, got `str`", "scrape"),
]  # fmt: skip


@pytest.mark.parametrize(("rel", "lineno", "damage", "why", "kind"), MISTYPED)
def test_a_mistyped_line_is_skipped_reported_and_the_rest_is_used(
    run_dir: Path, rel: str, lineno: int, damage: Callable[[dict], object], why: str, kind: str
) -> None:
    _replace_line(case_dir(run_dir, TEST_CASE) / rel, lineno, damage)
    expected = f"{rel}: line(s) {lineno} ({why}) are not well-typed {kind} rows and were skipped"
    case = load_run(run_dir).cases[0]
    assert case.file_problems == [expected]
    assert expected in summarize(run_dir)["cases"][TEST_CASE]["data_quality"]  # the good lines
    with pytest.raises(IntegrityError, match="not well-typed"):  # but no report of them
        build_report(run_dir)
    write_manifest(run_dir, "ok", COMMAND)
    assert f"{TEST_CASE}: {expected}" in validate_run(run_dir).problems


def test_a_nan_cached_count_in_a_record_is_not_a_record(run_dir: Path) -> None:
    # Python's json writes NaN for a float nan: that line is no well-typed record (an int or
    # null), so it is skipped, leaving 28 of the case's 29 records.
    path = case_dir(run_dir, TEST_CASE) / "requests.jsonl"
    lines = path.read_text().splitlines()
    lines[1] = lines[1].replace('"cached_tokens":0', '"cached_tokens":NaN')
    path.write_text("\n".join(lines) + "\n")
    case = load_run(run_dir).cases[0]
    assert len(case.records) == 28
    assert case.file_problems == [
        "requests.jsonl: line(s) 2 (cached_tokens: Expected `int | null`, got `float`) are not "
        "well-typed record rows and were skipped"
    ]


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("", "plan.json is empty"),
        ('{"scenario": "prefix-eviction", ', "plan.json is not valid JSON"),
        ("[]", "plan.json holds a list, not a JSON object"),
        ('{"scenario": 5}', "is not a valid plan"),
    ],
)
def test_a_broken_plan_is_one_clear_problem_everywhere(
    clean: Path, run_dir: Path, text: str, why: str
) -> None:
    (run_dir / "plan.json").write_text(text)
    with pytest.raises(RunFileError, match=why):
        load_run(run_dir)
    result = validate_run(run_dir)  # never raises
    assert any(why in p for p in result.problems), result.problems
    report = CliRunner().invoke(main, ["report", str(run_dir)])
    assert report.exit_code == 1 and why in report.output, report.output
    with pytest.raises(CompareError, match=why):
        compare_paths(clean, run_dir, load_gate())  # the broken run as the candidate


@pytest.mark.parametrize(
    ("name", "text", "problem"),
    [
        ("run.json", "[]", "run.json holds a list, not a JSON object; read as empty"),
        ("run.json", '{"status": 3}', "run.json is not well typed (status: Expected "
                                      "`str | null`, got `int`); read as empty"),
        ("report.json", "{\n", "report.json is not valid JSON"),
        ("report.json", "", "report.json is empty; read as empty"),
    ],
)  # fmt: skip
def test_a_broken_json_file_reads_as_empty_with_a_problem(
    run_dir: Path, name: str, text: str, problem: str
) -> None:
    write_manifest(run_dir, "ok", COMMAND)
    (run_dir / name).write_text(text)
    result = validate_run(run_dir)
    assert any(p.startswith(problem) for p in result.problems), result.problems
    if name == "run.json":
        assert load_run(run_dir).file_problems == [problem]


def test_a_broken_case_json_is_reported_and_the_case_still_summarised(run_dir: Path) -> None:
    (case_dir(run_dir, TEST_CASE) / "case.json").write_text('{"status": "ok", "failed_re')
    case = load_run(run_dir).cases[0]
    assert case.info == CaseInfo()
    assert case.file_problems[0].startswith("case.json is not valid JSON")
    assert len(case.records) == 29
    write_manifest(run_dir, "ok", COMMAND)
    assert any("case.json is not valid JSON" in p for p in validate_run(run_dir).problems)


def test_a_broken_manifest_is_a_problem_not_a_crash(run_dir: Path) -> None:
    (run_dir / "manifest.json").write_text('{"files": [')
    problems = validate_run(run_dir).problems
    assert problems[0].startswith("manifest.json cannot be read")


def test_report_without_a_manifest_refuses_a_run_with_skipped_lines_and_seals_nothing(
    run_dir: Path,
) -> None:
    _replace_line(case_dir(run_dir, TEST_CASE) / "metrics/samples.jsonl", 6,
                  lambda r: {"t_ns": "abc", "name": 5})  # fmt: skip
    (run_dir / "run.json").write_text("[]")
    (run_dir / "manifest.json").unlink(missing_ok=True)
    report_md = (run_dir / "report.md").read_bytes()
    result = CliRunner().invoke(main, ["report", str(run_dir)])
    assert result.exit_code == 1, result.output
    # One line: the first problem (run.json, read first) and how many more (the sample line).
    [line] = result.output.splitlines()
    assert line == (
        f"Error: refused: {run_dir} is broken: run.json holds a list, not a JSON object; read "
        f"as empty (and 1 more problem(s)); `loadgen validate {run_dir}` lists them"
    )
    assert not (run_dir / "manifest.json").exists()  # never sealed
    assert (run_dir / "report.md").read_bytes() == report_md  # nothing rewritten
