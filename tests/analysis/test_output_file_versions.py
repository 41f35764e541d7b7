"""The files the analysis writes are typed and versioned as the run's own files are:
``report.json`` (``RunSummary``), ``compare.json`` (``CompareFile``) and each line of a
sequential gate's ``looks.jsonl`` (``Look``) carry ``format_version`` 1, read back to the
model that wrote them; a file of another version is refused in one line naming both."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from analysis.compare_report import (
    COMPARE_FORMAT_VERSION,
    CompareFileError,
    read_compare_file,
)
from analysis.gate_sequential import LOOK_FORMAT_VERSION, Look, decision_of
from analysis.models import REPORT_FORMAT_VERSION
from analysis.report import build_report
from analysis.report_file import ReportFileError, read_report
from analysis.validate import validate_run
from loadgen.cli import main
from loadgen.runformat.layout import COMPARE_JSON, REPORT_JSON
from loadgen.runformat.manifest import write_manifest
from tests.support.spec_decode_run import build_run as build_spec_decode_run
from tests.support.synthetic_run import build_run

COMMAND = ["loadgen", "run", "prefix-eviction"]


@pytest.fixture(scope="module")
def sealed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    run_dir = tmp_path_factory.mktemp("sealed")
    build_run(run_dir)
    build_report(run_dir)
    write_manifest(run_dir, "ok", COMMAND)
    return run_dir


def test_the_versions_start_at_1() -> None:
    assert (REPORT_FORMAT_VERSION, COMPARE_FORMAT_VERSION, LOOK_FORMAT_VERSION) == (1, 1, 1)


def test_report_json_carries_its_version_and_reads_back_to_the_report(tmp_path: Path) -> None:
    for name, build in (("prefix", build_run), ("spec", build_spec_decode_run)):
        run_dir = tmp_path / name
        build(run_dir)
        built = build_report(run_dir)
        assert json.loads((run_dir / REPORT_JSON).read_text())["format_version"] == 1
        assert read_report(run_dir) == built.summary, name


def _edit_report(run_dir: Path, tmp_path: Path, change: dict[str, object]) -> Path:
    copy = tmp_path / "copy"
    shutil.copytree(run_dir, copy)
    report = json.loads((copy / REPORT_JSON).read_text()) | change
    (copy / REPORT_JSON).write_text(json.dumps(report))
    write_manifest(copy, "ok", COMMAND)  # as if its writer had sealed it so
    return copy


def test_a_report_of_another_version_is_refused_in_one_line(sealed: Path, tmp_path: Path) -> None:
    run_dir = _edit_report(sealed, tmp_path, {"format_version": 2})
    expected = (f"{run_dir / REPORT_JSON}: report format version 2, this loadgen reads "
                "version 1; `loadgen report RUN` rebuilds it in this version")  # fmt: skip
    with pytest.raises(ReportFileError) as refused:
        read_report(run_dir)
    assert str(refused.value) == expected
    assert validate_run(run_dir).problems == [expected]
    # The run's own files are intact: report rebuilds the file in this version.
    rebuilt = CliRunner().invoke(main, ["report", "--reseal", "report of version 2", str(run_dir)])
    assert rebuilt.exit_code == 0, rebuilt.output
    assert read_report(run_dir).format_version == 1


def test_a_report_written_before_versions_reads_as_version_1(sealed: Path, tmp_path: Path) -> None:
    run_dir = tmp_path / "copy"
    shutil.copytree(sealed, run_dir)
    report = json.loads((run_dir / REPORT_JSON).read_text())
    del report["format_version"]
    (run_dir / REPORT_JSON).write_text(json.dumps(report))
    write_manifest(run_dir, "ok", COMMAND)
    assert read_report(run_dir).format_version == 1
    assert validate_run(run_dir).problems == []


def test_a_mistyped_report_is_a_problem_of_validate(sealed: Path, tmp_path: Path) -> None:
    run_dir = _edit_report(sealed, tmp_path, {"phases": "cold"})
    assert validate_run(run_dir).problems == [
        f"{run_dir / REPORT_JSON} is not a well-typed report (1 error(s), first: phases: "
        "Input should be a valid list)"
    ]


def test_compare_json_carries_its_version_and_reads_back(sealed: Path, tmp_path: Path) -> None:
    out = tmp_path / "cmp"
    twin = tmp_path / "twin"  # a copy: a run compared with itself is refused
    shutil.copytree(sealed, twin)
    result = CliRunner().invoke(main, ["compare", str(sealed), str(twin), "--out", str(out)])
    assert result.exit_code in (0, 3), result.output
    data = json.loads((out / COMPARE_JSON).read_text())
    assert data["format_version"] == 1
    typed = read_compare_file(out)
    assert typed.exit_code == result.exit_code == typed.decision.exit_code
    assert decision_of(out) == typed.decision
    data["format_version"] = 7
    (out / COMPARE_JSON).write_text(json.dumps(data))
    with pytest.raises(CompareFileError) as refused:
        read_compare_file(out)
    assert str(refused.value) == (
        f"{out / COMPARE_JSON}: compare format version 7, this loadgen reads version 1"
    )


def test_a_look_line_carries_its_version() -> None:
    look = Look(look=1, looks=2, pairs=2, confidence=0.975, headline="inconclusive",
                exit_code=3, line="INCONCLUSIVE", stop=False, why="one more pair",
                at="2026-12-02T10:00:00Z")  # fmt: skip
    assert json.loads(look.model_dump_json())["format_version"] == 1
