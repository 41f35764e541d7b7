"""analysis.load: every JSON-lines file of a run is read the same tolerant way."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import msgspec
import pytest

from analysis.integrity import IntegrityError
from analysis.load import load_run, rebuild_missing_phases
from analysis.report import build_report, summarize
from analysis.validate import validate_run
from loadgen.runformat import (
    FaultRow,
    GatewayEvent,
    PhaseRow,
    ReadRecord,
    SampleRow,
    ScrapeTick,
)
from loadgen.runformat.layout import case_dir
from loadgen.runformat.manifest import write_manifest
from loadgen.runformat.reading import read_jsonl
from tests.support.row_builders import record
from tests.support.synthetic_run import TEST_CASE, build_run

ROW_TYPES: dict[str, type[msgspec.Struct]] = {
    "requests.jsonl": ReadRecord,
    "phases.jsonl": PhaseRow,
    "metrics/samples.jsonl": SampleRow,
    "metrics/scrapes.jsonl": ScrapeTick,
    "faults.jsonl": FaultRow,
    "gateway_events.jsonl": GatewayEvent,
}
JSONL_FILES = tuple(ROW_TYPES)


class Row(msgspec.Struct):
    """A row kind for the reading tests alone: one integer."""

    a: int


def test_read_jsonl_keeps_good_lines_and_reports_a_torn_tail_and_bad_lines(tmp_path: Path) -> None:
    path = tmp_path / "x.jsonl"
    path.write_text('{"a": 1}\nnot json\n[1, 2]\n\n{"a": 2}\n{"a": 3, "b"')
    got = read_jsonl(path, Row)
    assert got.rows == [Row(1), Row(2)]
    assert got.bad_lines == (2, 3)  # a broken line and a line that is not an object
    assert got.torn_tail is True
    assert got.problems("x.jsonl") == [
        "the last line of x.jsonl is cut short (a crash while writing it); "
        "the lines before it are intact",
        "x.jsonl: line(s) 2, 3 are not valid JSON objects and were skipped",
    ]


def test_a_complete_last_line_without_newline_is_kept(tmp_path: Path) -> None:
    path = tmp_path / "x.jsonl"
    path.write_text('{"a": 1}\n{"a": 2}')  # the newline was lost, the object is whole
    got = read_jsonl(path, Row)
    assert (got.rows, got.torn_tail, got.bad_lines) == ([Row(1), Row(2)], False, ())


def test_a_missing_file_reads_as_empty(tmp_path: Path) -> None:
    got = read_jsonl(tmp_path / "nope.jsonl", Row)
    assert (got.rows, got.exists, got.problems("nope.jsonl")) == ([], False, [])


@pytest.fixture(scope="module")
def clean_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    run_dir = tmp_path_factory.mktemp("clean")
    build_run(run_dir)
    return run_dir


@pytest.mark.parametrize("rel", JSONL_FILES)
def test_a_torn_last_line_in_any_file_is_skipped_reported_and_the_report_refused(
    clean_run: Path, tmp_path: Path, rel: str
) -> None:
    run_dir = tmp_path / "run"
    shutil.copytree(clean_run, run_dir)
    path = case_dir(run_dir, TEST_CASE) / rel
    before = len(read_jsonl(path, ROW_TYPES[rel]).rows)
    with open(path, "a") as fh:
        fh.write('{"t_ns": 12, "na')  # the writer died mid-line
    assert len(read_jsonl(path, ROW_TYPES[rel]).rows) == before
    case = load_run(run_dir).cases[0]
    expected = (
        f"the last line of {rel} is cut short (a crash while writing it); "
        "the lines before it are intact"
    )
    assert case.file_problems == [expected]
    assert expected in summarize(run_dir)["cases"][TEST_CASE]["data_quality"]  # the reader's
    # The integrity rule: what validate calls invalid gets no report (nothing written).
    with pytest.raises(IntegrityError, match=f"is broken: {TEST_CASE}: the last line of {rel}"):
        build_report(run_dir)
    assert not (run_dir / "report.json").exists()
    (run_dir / "report.json").write_text(json.dumps(summarize(run_dir)))
    write_manifest(run_dir, "failed", ["loadgen", "run", "prefix-eviction"])
    assert validate_run(run_dir).problems == [f"{TEST_CASE}: {expected}"]


def test_a_gap_in_the_tick_numbers_is_a_problem(clean_run: Path, tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    shutil.copytree(clean_run, run_dir)
    path = case_dir(run_dir, TEST_CASE) / "metrics/scrapes.jsonl"
    lines = path.read_text().splitlines()
    path.write_text("\n".join(lines[:4] + lines[5:]) + "\n")  # tick 4 vanished
    with pytest.raises(IntegrityError, match="scrape ticks are not 0"):
        build_report(run_dir)
    (run_dir / "report.json").write_text(json.dumps(summarize(run_dir)))
    write_manifest(run_dir, "ok", ["loadgen", "run", "prefix-eviction"])
    [problem] = validate_run(run_dir).problems
    assert problem.startswith(f"{TEST_CASE}: scrape ticks are not 0…")
    assert "missing [4]" in problem


def test_a_phase_killed_before_its_row_was_written_is_rebuilt_from_its_records_and_flagged(
    clean_run: Path, tmp_path: Path
) -> None:
    # kill -9 during rewarm (phase 4) after its first 4 requests finished: no phases.jsonl row.
    run_dir = tmp_path / "run"
    shutil.copytree(clean_run, run_dir)
    cdir = case_dir(run_dir, TEST_CASE)
    phases = cdir / "phases.jsonl"
    phases.write_text("".join(phases.read_text().splitlines(keepends=True)[:4]))
    records = cdir / "requests.jsonl"
    kept = [line for line in records.read_text().splitlines(keepends=True)
            if not ('"phase":"rewarm"' in line and json.loads(line)["index"] >= 4)]  # fmt: skip
    records.write_text("".join(kept))
    case = load_run(run_dir).cases[0]
    rewarm = case.phases[-1]
    # synthetic_run: rewarm starts at BASE + 4 × 2 s, request j is sent 150 ms × j later, all
    # hit (first token after 20 ms), 4 tokens 10 ms apart, end 1 ms after the last: request 3
    # ends at 450 + 20 + 30 + 1 = 501 ms. No settle: end = last end.
    start = 1_000 * 10**9 + 8 * 10**9
    assert rewarm == PhaseRow(phase="rewarm", start_ns=start, last_end_ns=start + 501 * 10**6,
                              end_ns=start + 501 * 10**6, requests=4,
                              rebuilt_from_records=True)  # fmt: skip
    report = build_report(run_dir)
    summary = report.summary.cases[TEST_CASE]
    assert summary.phases["rewarm"].requests == 4
    assert summary.phases["rewarm"].incomplete is not None
    assert any(q.startswith("phase rewarm is incomplete: the run ended during it")
               for q in summary.data_quality)  # fmt: skip
    probes = next(v for v in report.summary.verdicts
                  if v.case == TEST_CASE and v.check == "rewarm probes hit")  # fmt: skip
    assert probes.passed is True  # its 2 probes (indices 0, 1) ran: decided, and marked
    assert probes.detail.endswith("[phase rewarm incomplete: see data quality]")
    md = (run_dir / "report.md").read_text()
    assert "| rewarm (incomplete) | 4 |" in md


def test_a_phase_none_of_whose_requests_was_sent_gets_no_rebuilt_row() -> None:
    unsent = record(phase="warm", status="not_sent", sent_ns=None)
    assert rebuild_missing_phases([], [unsent]) == []
