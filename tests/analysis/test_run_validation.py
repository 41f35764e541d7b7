"""Manifest + analysis.validate on a synthetic run: what a valid run is, and each way
a run can be broken (changed, deleted or extra files, bad values, inconsistent counts)."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import CliRunner

from analysis.report import summarize
from analysis.validate import validate_run
from loadgen.cli import main
from loadgen.runformat.layout import MANIFEST_FILE, REPORT_JSON, case_dir, read_json
from loadgen.runformat.manifest import verify_manifest, write_manifest
from tests.support.synthetic_run import CONTROL_CASE, TEST_CASE, Options, build_run

REQUESTS = f"cases/{TEST_CASE}/requests.jsonl"
COMMAND = ["loadgen", "run", "prefix-eviction", "--cache", "1GiB"]


def finish(run_dir: Path, before_manifest: Callable[[Path], None] | None = None) -> None:
    """Report (JSON only: validation does not read plots), optional damage, manifest last."""
    (run_dir / REPORT_JSON).write_text(json.dumps(summarize(run_dir), indent=2) + "\n")
    if before_manifest is not None:
        before_manifest(run_dir)
    write_manifest(run_dir, "ok", COMMAND)


@pytest.fixture(scope="module")
def sealed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    run_dir = tmp_path_factory.mktemp("sealed")
    build_run(run_dir)
    finish(run_dir)
    return run_dir


@pytest.fixture
def run_copy(sealed: Path, tmp_path: Path) -> Path:
    run_dir = tmp_path / "run"
    shutil.copytree(sealed, run_dir)
    return run_dir


def test_a_complete_run_is_valid(run_copy: Path) -> None:
    result = validate_run(run_copy)
    assert result.problems == []
    assert result.ok
    # 4 anchor phases × 6 + 5 pollution = 29 requests per case.
    assert result.facts == {
        TEST_CASE: {"status": "ok", "requests": 29, "failed": 0},
        CONTROL_CASE: {"status": "ok", "requests": 29, "failed": 0},
    }


def test_manifest_lists_every_file_with_size_and_hash(run_copy: Path) -> None:
    manifest = read_json(run_copy / MANIFEST_FILE)
    assert manifest["status"] == "ok"
    assert manifest["command"] == COMMAND
    files = {f["path"]: f for f in manifest["files"]}  # type: ignore[union-attr]
    assert set(files) == {
        "run.json",
        "plan.json",
        "report.json",
        *(
            f"cases/{c}/{name}"
            for c in (TEST_CASE, CONTROL_CASE)
            for name in (
                "case.json",
                "requests.jsonl",
                "phases.jsonl",
                "metrics/samples.jsonl",
                "metrics/scrapes.jsonl",
            )
        ),
    }
    assert files[REQUESTS]["bytes"] == (run_copy / REQUESTS).stat().st_size
    assert len(str(files[REQUESTS]["sha256"])) == 64
    assert manifest["versions"]["numpy"]  # type: ignore[index]


def test_a_changed_file_is_detected_by_its_hash(run_copy: Path) -> None:
    path = run_copy / REQUESTS
    text = path.read_text()
    # Same size, still valid JSON, still a record that can be true: only the hash can tell.
    changed = text.replace('"cached_tokens":64', '"cached_tokens":63', 1)
    assert len(changed) == len(text) and changed != text
    path.write_text(changed)
    assert validate_run(run_copy).problems == [
        f"{REQUESTS}: size or sha256 differs from the manifest"
    ]


def test_a_deleted_file_is_detected(run_copy: Path) -> None:
    (run_copy / f"cases/{CONTROL_CASE}/metrics/scrapes.jsonl").unlink()
    assert validate_run(run_copy).problems == [
        f"cases/{CONTROL_CASE}/metrics/scrapes.jsonl: listed in the manifest but missing",
        f"{CONTROL_CASE}: metrics/scrapes.jsonl missing",
    ]


def test_an_unlisted_file_is_detected(run_copy: Path) -> None:
    (run_copy / "notes.txt").write_text("added later\n")
    assert validate_run(run_copy).problems == ["notes.txt: present but not in the manifest"]


def test_a_run_without_manifest_is_incomplete(run_copy: Path) -> None:
    (run_copy / MANIFEST_FILE).unlink()
    assert verify_manifest(run_copy) == ["manifest.json missing: the run is incomplete"]
    assert validate_run(run_copy).problems == ["manifest.json missing: the run is incomplete"]


def test_a_non_finite_sample_is_dropped_and_warned_about_not_fatal(tmp_path: Path) -> None:
    # Older scrapers wrote a NaN gauge as a bare NaN: the sample is dropped and counted, and
    # the run stays valid (the report was built from the finite samples).
    build_run(tmp_path, Options(nan_sample=True))
    finish(tmp_path)
    result = validate_run(tmp_path)
    assert result.problems == []
    assert result.warnings == [f"{TEST_CASE}: 1 non-finite metric samples dropped"]


def test_failure_count_mismatch_between_case_json_and_records(tmp_path: Path) -> None:
    build_run(tmp_path, Options(failed_request=True, case_json_failed=0))
    finish(tmp_path)
    result = validate_run(tmp_path)
    assert result.problems == [f"{TEST_CASE}: case.json says 0 failed, records say 1"]
    assert result.facts[TEST_CASE] == {"status": "failed", "requests": 29, "failed": 1}


def test_consistent_failures_are_valid(tmp_path: Path) -> None:
    build_run(tmp_path, Options(failed_request=True))
    finish(tmp_path)
    result = validate_run(tmp_path)
    assert result.problems == []
    assert result.facts[TEST_CASE] == {"status": "failed", "requests": 29, "failed": 1}


def test_failure_count_mismatch_between_report_and_records(tmp_path: Path) -> None:
    def edit_report(run_dir: Path) -> None:
        report = json.loads((run_dir / REPORT_JSON).read_text())
        report["cases"][CONTROL_CASE]["requests_failed"] = 5
        (run_dir / REPORT_JSON).write_text(json.dumps(report))

    build_run(tmp_path)
    finish(tmp_path, edit_report)
    assert validate_run(tmp_path).problems == [
        f"{CONTROL_CASE}: report says 5 failed, records say 0"
    ]


def test_a_nan_in_report_json_is_detected(tmp_path: Path) -> None:
    def add_nan(run_dir: Path) -> None:
        report = json.loads((run_dir / REPORT_JSON).read_text())
        report["extra"] = float("nan")
        (run_dir / REPORT_JSON).write_text(json.dumps(report))

    build_run(tmp_path)
    finish(tmp_path, add_nan)
    assert validate_run(tmp_path).problems == ["report.json: non-finite value (NaN)"]


def test_broken_records_are_reported(tmp_path: Path) -> None:
    base = {
        "case": TEST_CASE,
        "phase": "warm",
        "index": 99,
        "group": None,
        "prompt_tokens_sent": 72,
        "max_tokens": 4,
        "scheduled_ns": 0,
        "status": "ok",
    }
    bad = [
        base
        | {"request_id": "x-order", "sent_ns": 50, "chunk_ns": [40, 60], "chunk_tokens": [1, 1]},
        base | {"request_id": "x-empty", "sent_ns": 50, "chunk_ns": [], "chunk_tokens": []},
        base | {"request_id": "x-len", "sent_ns": 50, "chunk_ns": [60, 70], "chunk_tokens": [1]},
    ]

    def append(run_dir: Path) -> None:
        with open(case_dir(run_dir, TEST_CASE) / "requests.jsonl", "a") as fh:
            fh.writelines(json.dumps(r) + "\n" for r in bad)

    build_run(tmp_path)
    finish(tmp_path, append)
    # The three records are also three of one request (warm, index 99) in a warm phase whose
    # row says 6 were sent: 6 + 3 = 9 records. And none can be true: stamped near 0 ns while
    # warm (phase 1) began at 1,002 s (x-order's first token, 40 ns, is the furthest out),
    # index 99 of a 6-request phase, ok without a final usage or an HTTP status.
    assert validate_run(tmp_path).problems == [
        f"{TEST_CASE}/x-order: timestamps not in order",
        f"{TEST_CASE}/x-empty: status ok but no token arrived",
        f"{TEST_CASE}/x-len: chunk_ns and chunk_tokens differ in length",
        f"{TEST_CASE}: 1 request(s) recorded more than once (same phase and index, "
        "e.g. ('warm', 99))",
        f"{TEST_CASE}: 3 record(s) with stamps outside their phase (by more than 1 s), e.g. "
        "x-order: first token 1002.000 s before the phase began",
        f"{TEST_CASE}: 3 record(s) not as planned, e.g. x-order: phase warm plans 6 "
        "requests, not index 99",
        f"{TEST_CASE}: 3 record(s) whose usage disagrees with the streamed tokens, e.g. "
        "x-order: status ok without a final usage",
        f"{TEST_CASE}: 3 record(s) with status ok but no HTTP 200, e.g. x-order: no HTTP status",
        f"{TEST_CASE}/warm: 9 request record(s), but its phase row says 6 were sent",
    ]


def test_a_record_cut_short_by_a_crash_is_reported_and_the_rest_kept(tmp_path: Path) -> None:
    def truncate(run_dir: Path) -> None:
        with open(case_dir(run_dir, TEST_CASE) / "requests.jsonl", "a") as fh:
            fh.write('{"request_id": "cut-sh')  # no newline: the writer died mid-line

    build_run(tmp_path)
    finish(tmp_path, truncate)
    result = validate_run(tmp_path)
    [problem] = result.problems
    assert problem.startswith(f"{TEST_CASE}: the last line of requests.jsonl is cut short")
    assert result.facts[TEST_CASE]["requests"] == 29  # every complete record still read


def test_a_corrupt_complete_record_line_is_reported_with_its_line_number(tmp_path: Path) -> None:
    def corrupt(run_dir: Path) -> None:
        with open(case_dir(run_dir, TEST_CASE) / "requests.jsonl", "a") as fh:
            fh.write('{"request_id": "bad"\n')  # a whole line that is not JSON

    build_run(tmp_path)
    finish(tmp_path, corrupt)
    result = validate_run(tmp_path)
    assert result.problems == [
        f"{TEST_CASE}: requests.jsonl: line(s) 30 are not valid JSON objects and were skipped"
    ]
    assert result.facts[TEST_CASE]["requests"] == 29  # the other records are all counted


def test_validate_command_exit_status(run_copy: Path) -> None:
    ok = CliRunner().invoke(main, ["validate", "--json", str(run_copy)])
    assert ok.exit_code == 0, ok.output
    assert json.loads(ok.output)["ok"] is True
    (run_copy / "run.json").write_text("{}\n")
    bad = CliRunner().invoke(main, ["validate", str(run_copy)])
    assert bad.exit_code == 1
    assert "INVALID: 1 problem(s)" in bad.output


def test_impossible_record_values_are_problems(tmp_path: Path) -> None:
    def damage(run_dir: Path) -> None:
        path = case_dir(run_dir, TEST_CASE) / "requests.jsonl"
        lines = path.read_text().splitlines()
        first = json.loads(lines[0])
        first["cached_tokens"] = 99_999  # more than the 72-token prompt
        first["usage_completion_tokens"] = -3
        first["end_ns"] = first["sent_ns"] - 1
        path.write_text("\n".join([json.dumps(first), *lines[1:]]) + "\n")

    build_run(tmp_path)
    finish(tmp_path, damage)
    problems = validate_run(tmp_path).problems
    assert any("cached_tokens 99999 outside 0..72" in p for p in problems)
    assert any("usage_completion_tokens is negative (-3)" in p for p in problems)
    assert any("ends before it was sent" in p for p in problems)


def test_report_refuses_to_reseal_raw_files_changed_after_the_run(run_copy: Path) -> None:
    path = run_copy / REQUESTS
    path.write_text(path.read_text().replace('"status":"ok"', '"status":"error"', 1))
    result = CliRunner().invoke(main, ["report", str(run_copy)])
    assert result.exit_code == 1
    assert "raw files differ from the run's manifest" in result.output
    assert f"{REQUESTS}: size or sha256 differs" in result.output
    assert not validate_run(run_copy).ok  # still flagged: nothing was re-sealed


@pytest.mark.parametrize("command", [["report"], ["export"], ["export", "--format", "vllm-bench"]])
def test_a_directory_without_a_plan_is_no_run_to_report_or_export(
    tmp_path: Path, command: list[str]
) -> None:
    # The one check every reader makes: one line, exit 2 (a usage error), nothing written.
    result = CliRunner().invoke(main, [*command, str(tmp_path)])
    assert result.exit_code == 2, result.output
    assert result.output == f"error: {tmp_path} has no plan.json: not a run directory\n"
    assert list(tmp_path.iterdir()) == []


def test_a_case_interrupted_before_its_first_phase_is_valid_with_attention(
    tmp_path: Path,
) -> None:
    # A group SIGTERM while the case was still starting (no phase began): no records and no
    # phases.jsonl, case and run say interrupted. Nothing was sent, so nothing is missing:
    # the run is valid and needs attention, and the case's facts are its status and cause.
    build_run(tmp_path)
    cdir = case_dir(tmp_path, TEST_CASE)
    (cdir / "requests.jsonl").unlink()
    (cdir / "phases.jsonl").unlink()
    why = "interrupted (Ctrl-C or SIGTERM)"
    for path in (cdir / "case.json", tmp_path / "run.json"):
        info = read_json(path)
        info.update(status="interrupted", error=why)
        path.write_text(json.dumps(info))
    finish(tmp_path)
    result = validate_run(tmp_path)
    assert result.problems == []
    assert result.facts[TEST_CASE] == {"status": "interrupted", "error": why}
