"""The one integrity rule (``analysis.integrity``): what ``validate`` calls invalid, ``report``
refuses (exit 1, one line, nothing written, nothing sealed) and ``compare`` refuses; only
``report --reseal REASON`` seals changed files, and says so in the manifest, the report and
``validate`` (exit 4).

The synthetic run (``synthetic_run``): tested case ``1GiB``, phases cold 6, warm 6, pollution
5, revisit 6, rewarm 6 requests (29). Phase k starts at 1000 s + k × 2 s, request j is sent at
start + j × 150 ms, its first token 20 ms (hit) or 80 ms (miss) later, 4 one-token chunks
10 ms apart, end 1 ms after the last: a cold probe (j = 0, a miss) ends at sent + 111 ms.
"""

from __future__ import annotations

import gzip
import json
import math
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from analysis.compare import CompareError, compare_paths
from analysis.gate_file import load_gate
from analysis.integrity import (
    check_phase_row,
    check_record,
    check_run,
    record_identity_problems,
)
from analysis.report import build_report
from loadgen.cli import main
from loadgen.runformat.layout import MANIFEST_FILE, REPORT_JSON, REPORT_MD, case_dir, read_json
from loadgen.runformat.manifest import write_manifest
from server.net.exit_codes import ValidateExit
from tests.support.row_builders import phase_row, record
from tests.support.synthetic_run import TEST_CASE, build_run

COMMAND = ["loadgen", "run", "prefix-eviction"]
S = 1_000_000_000
MS = 1_000_000


@pytest.fixture(scope="module")
def sealed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    run_dir = tmp_path_factory.mktemp("sealed")
    build_run(run_dir)
    build_report(run_dir)
    write_manifest(run_dir, "ok", COMMAND)
    return run_dir


@pytest.fixture
def run(sealed: Path, tmp_path: Path) -> Path:
    copy = tmp_path / "run"
    shutil.copytree(sealed, copy)
    return copy


def _cli(*args: str) -> Result:
    return CliRunner().invoke(main, list(args))


def _requests(run_dir: Path) -> Path:
    return case_dir(run_dir, TEST_CASE) / "requests.jsonl"


def _refused_and_untouched(run_dir: Path, why: str) -> None:
    """``loadgen report`` exits 1 with one line containing ``why``, rewrites no report and
    writes no manifest where there was none (and leaves an old one as it was)."""
    before = {p: (run_dir / p).read_bytes() if (run_dir / p).exists() else None
              for p in (REPORT_JSON, REPORT_MD, MANIFEST_FILE)}  # fmt: skip
    result = _cli("report", str(run_dir))
    assert result.exit_code == 1, result.output
    [line] = result.output.splitlines()
    assert line.startswith("Error: refused: ") and why in line, line
    after = {p: (run_dir / p).read_bytes() if (run_dir / p).exists() else None for p in before}
    assert after == before


def _invalid(run_dir: Path, *problems: str) -> None:
    result = _cli("validate", str(run_dir))
    assert result.exit_code == 1, result.output
    assert "INVALID" in result.output
    for problem in problems:
        assert f"problem: {problem}" in result.output, result.output


def test_a_clean_sealed_run_is_intact_and_valid_with_exit_0(run: Path) -> None:
    found = check_run(run)
    assert (found.problems, found.attention, found.sealed) == ([], [], True)
    result = _cli("validate", str(run))
    assert (result.exit_code, result.output.splitlines()[-1]) == (0, "valid")


def test_an_emptied_requests_file_without_its_manifest_is_refused_not_laundered(
    run: Path,
) -> None:
    # The laundering: records emptied and the manifest removed. The phase rows still
    # say 6, 6, 5, 6, 6 were sent: five problems, the first the first phase's.
    _requests(run).write_text("")
    (run / MANIFEST_FILE).unlink()
    expected = [f"{TEST_CASE}/{p}: 0 request record(s), but its phase row says {n} were sent"
                for p, n in (("cold", 6), ("warm", 6), ("pollution", 5), ("revisit", 6),
                             ("rewarm", 6))]  # fmt: skip
    assert check_run(run).problems == expected
    _refused_and_untouched(run, f"is broken: {expected[0]} (and 4 more problem(s))")
    assert not (run / MANIFEST_FILE).exists()
    _invalid(run, f"{MANIFEST_FILE} missing: the run is incomplete", *expected)


def test_an_emptied_requests_file_of_a_sealed_run_is_refused_for_its_hash(run: Path) -> None:
    _requests(run).write_text("")
    changed = f"cases/{TEST_CASE}/requests.jsonl: size or sha256 differs from the manifest"
    _refused_and_untouched(run, f"raw files differ from the run's manifest ({changed})")
    _invalid(run, changed)


@pytest.mark.parametrize(
    ("content", "why"),
    [
        # Not a gzip stream at all: its first two bytes are "no", not the magic 1f 8b.
        (b"not gzip, just bytes\n", "is not gzip (Not a gzipped file (b'no'))"),
        # A whole gzip stream cut in half: the stream ends before its end marker.
        (gzip.compress(b'{"scrape": 0}\n' * 200)[:40], "is cut short (the gzip stream ends"),
        # Gzip, but its second line is no JSON object.
        (gzip.compress(b'{"scrape": 0}\n[1, 2]\n'), "line 2 is not a JSON object"),
    ],
)
def test_a_raw_file_that_is_not_what_its_name_says_is_refused(
    run: Path, content: bytes, why: str
) -> None:
    (case_dir(run, TEST_CASE) / "metrics/raw.jsonl.gz").write_bytes(content)
    (run / MANIFEST_FILE).unlink()
    problem = f"{TEST_CASE}: metrics/raw.jsonl.gz {why}"
    assert any(p.startswith(problem) for p in check_run(run).problems), check_run(run).problems
    _refused_and_untouched(run, problem)
    assert not (run / MANIFEST_FILE).exists()
    _invalid(run, problem)


def test_a_whole_gzip_raw_file_of_json_lines_is_intact(run: Path) -> None:
    (case_dir(run, TEST_CASE) / "metrics/raw.jsonl.gz").write_bytes(
        gzip.compress(b'{"scrape": 0}\n{"scrape": 1}\n')
    )
    (run / MANIFEST_FILE).unlink()
    assert check_run(run).problems == []


def test_a_record_ending_before_it_was_sent_gives_no_figures(run: Path) -> None:
    # The issue: sent_ns 1,000 s after end_ns. The cold probe j = 0 is sent at 1000 s, its
    # first token at +80 ms, its end at +111 ms; moved to end + 1000 s its TTFT would be
    # 80 − 1,000,111 = −1,000,031 ms and cold's TTFT mean (−1,000,031 + 80 + 4 × 20) / 6 =
    # −166,645.2 ms: a figure the report must never publish.
    lines = _requests(run).read_text().splitlines()
    first = json.loads(lines[0])
    assert (first["phase"], first["index"], first["end_ns"] - first["sent_ns"]) == (
        "cold",
        0,
        111 * MS,
    )
    first["sent_ns"] = first["end_ns"] + 1_000 * S
    _requests(run).write_text("\n".join([json.dumps(first), *lines[1:]]) + "\n")
    (run / MANIFEST_FILE).unlink()
    where = f"{TEST_CASE}/{first['request_id']}"
    # Its chunks came before its send, and its end too; and it was sent after its phase
    # ended: cold's last request (j = 5, sent at +750 ms, 4 hit chunks) ended at 1000.801 s,
    # the row's end 0.5 s of settle later, 1001.301 s; 2000.111 − 1001.301 = 998.810 s.
    stamps = (f"{TEST_CASE}: 1 record(s) with stamps outside their phase (by more than 1 s), "
              f"e.g. {first['request_id']}: sent 998.810 s after the phase ended")  # fmt: skip
    assert check_run(run).problems == [f"{where}: timestamps not in order",
                                       f"{where}: ends before it was sent", stamps]  # fmt: skip
    before = {p: (run / p).read_bytes() for p in (REPORT_JSON, REPORT_MD)}
    result = _cli("report", str(run))
    assert result.exit_code == 1, result.output
    assert result.output.splitlines() == [
        f"cannot publish: {stamps}",
        f"Error: refused: {run} is broken: {where}: timestamps not in order (and 2 more "
        f"problem(s)); `loadgen validate {run}` lists them",
    ]
    assert {p: (run / p).read_bytes() for p in before} == before
    assert not (run / MANIFEST_FILE).exists()
    ttft = read_json(run / REPORT_JSON)["cases"][TEST_CASE]["phases"]["cold"]["ttft_ms"]
    assert ttft["mean"] == pytest.approx((80 + 80 + 4 * 20) / 6)  # the old report, untouched
    _invalid(run, f"{where}: ends before it was sent")


def test_a_truncated_manifest_listed_file_is_refused_with_or_without_its_manifest(
    run: Path,
) -> None:
    # The last 10 bytes of requests.jsonl cut: its last line (rewarm's 6th record) loses its
    # end and newline, so it is torn, and rewarm has 5 records where its row says 6.
    data = _requests(run).read_bytes()
    _requests(run).write_bytes(data[:-10])
    changed = f"cases/{TEST_CASE}/requests.jsonl: size or sha256 differs from the manifest"
    _refused_and_untouched(run, changed)
    _invalid(run, changed)
    (run / MANIFEST_FILE).unlink()
    torn = (f"{TEST_CASE}: the last line of requests.jsonl is cut short (a crash while writing "
            "it); the lines before it are intact")  # fmt: skip
    short = f"{TEST_CASE}/rewarm: 5 request record(s), but its phase row says 6 were sent"
    assert check_run(run).problems == [torn, short]
    _refused_and_untouched(run, f"is broken: {torn} (and 1 more problem(s))")
    assert not (run / MANIFEST_FILE).exists()
    _invalid(run, torn, short)


def test_reseal_is_refused_for_broken_data_too(run: Path) -> None:
    _requests(run).write_text("")
    manifest = (run / MANIFEST_FILE).read_bytes()
    result = _cli("report", str(run), "--reseal", "I emptied it")
    assert result.exit_code == 1
    assert "is broken: 1GiB/cold: 0 request record(s)" in result.output
    assert (run / MANIFEST_FILE).read_bytes() == manifest


def test_reseal_records_when_and_why_and_validate_says_resealed_with_exit_4(run: Path) -> None:
    # A fact corrected by hand: the server's start-up time, 31.5 → 32.0 s.
    case_json = case_dir(run, TEST_CASE) / "case.json"
    info = json.loads(case_json.read_text())
    info["server"]["startup_s"] = 32.0
    case_json.write_text(json.dumps(info))
    changed = f"cases/{TEST_CASE}/case.json: size or sha256 differs from the manifest"
    _refused_and_untouched(run, changed)  # not without --reseal
    reason = "startup_s corrected from the server log"
    result = _cli("report", str(run), "--reseal", reason)
    assert result.exit_code == 0, result.output
    [entry] = read_json(run / MANIFEST_FILE)["resealed"]  # type: ignore[misc]
    assert (entry["reason"], entry["changed"]) == (reason, [changed])
    at = entry["at"]
    assert len(at) == len("2026-12-02T13:00:00Z") and at.endswith("Z")
    assert read_json(run / REPORT_JSON)["run"]["resealed"] == [entry]
    assert f"**Resealed** at {at}: {reason}" in (run / REPORT_MD).read_text()
    checked = _cli("validate", str(run))
    assert checked.exit_code == ValidateExit.ATTENTION == 4, checked.output
    assert f"attention: resealed at {at}: {reason}" in checked.output
    assert checked.output.splitlines()[-1] == f"valid, needs attention: resealed at {at}: {reason}"
    # A later plain rebuild keeps the mark: the files match the resealed manifest.
    assert _cli("report", str(run)).exit_code == 0
    assert read_json(run / MANIFEST_FILE)["resealed"] == [entry]
    assert _cli("validate", str(run)).exit_code == 4


def test_reseal_of_a_run_without_a_manifest_says_so(run: Path) -> None:
    (run / MANIFEST_FILE).unlink()
    result = _cli("report", str(run), "--reseal", "sealed after the fact")
    assert result.exit_code == 0, result.output
    [entry] = read_json(run / MANIFEST_FILE)["resealed"]  # type: ignore[misc]
    assert entry["changed"] == [f"{MANIFEST_FILE} was missing"]


def test_reseal_needs_a_reason(run: Path) -> None:
    result = _cli("report", str(run), "--reseal", "  ")
    assert result.exit_code == 2
    assert "--reseal needs a reason" in result.output


@pytest.mark.parametrize("reason", ["line1\n**Resealed** forged", "red \x1b[31mtext", "tab\there"])
def test_a_reseal_reason_is_one_line_of_plain_text(run: Path, reason: str) -> None:
    manifest = (run / MANIFEST_FILE).read_bytes()
    result = _cli("report", str(run), "--reseal", reason)
    assert result.exit_code == 2
    assert "--reseal takes one line of text" in result.output
    assert (run / MANIFEST_FILE).read_bytes() == manifest


@pytest.mark.parametrize(
    ("status", "attention"),
    [("interrupted", "run status interrupted"), ("failed", "run status failed: disk on fire")],
)
def test_a_run_that_did_not_end_ok_is_valid_but_exits_4(
    run: Path, status: str, attention: str
) -> None:
    run_json = run / "run.json"
    info = json.loads(run_json.read_text()) | {"status": status}
    if status == "failed":
        info["error"] = "disk on fire"
    run_json.write_text(json.dumps(info))
    write_manifest(run, status, COMMAND)  # as the run sealed it
    result = _cli("validate", "--json", str(run))
    assert result.exit_code == 4, result.output
    out = json.loads(result.output)
    assert (out["ok"], out["exit_code"], out["attention"]) == (True, 4, [attention])


def test_an_interrupted_phase_is_valid_but_exits_4(run: Path) -> None:
    phases = case_dir(run, TEST_CASE) / "phases.jsonl"
    rows = [json.loads(x) for x in phases.read_text().splitlines()]
    rows[-1]["interrupted"] = True
    phases.write_text("".join(json.dumps(r) + "\n" for r in rows))
    write_manifest(run, "ok", COMMAND)
    out = json.loads(_cli("validate", "--json", str(run)).output)
    assert out["exit_code"] == 4
    assert [a.split(": phase incomplete")[0] for a in out["attention"]] == [f"{TEST_CASE}/rewarm"]


def test_compare_refuses_a_broken_run(run: Path, sealed: Path) -> None:
    _requests(run).write_text("")
    write_manifest(run, "ok", COMMAND)  # even sealed over: its records are missing
    with pytest.raises(CompareError, match="is broken: 1GiB/cold: 0 request record"):
        compare_paths(sealed, run, load_gate())
    result = _cli("compare", str(sealed), str(run), "--out", str(run.parent / "cmp"))
    assert result.exit_code == 2, result.output


def test_record_stamps_out_of_order_are_each_named() -> None:
    # headers 5 ns before the send; end 1 ns before the last of chunks at 20, 30 ns.
    rec = record(sent_ns=10, headers_ns=5, chunk_ns=[20, 30], chunk_tokens=[1, 1], end_ns=29,
                 status="ok")  # fmt: skip
    assert check_record(rec, "c/r") == ["c/r: timestamps not in order",
                                        "c/r: ends before its last token arrived"]  # fmt: skip
    fine = record(sent_ns=10, headers_ns=15, chunk_ns=[20, 30], chunk_tokens=[1, 1], end_ns=31,
                  status="ok")  # fmt: skip
    assert check_record(fine, "c/r") == []


def test_a_phase_row_running_backwards_or_not_finite_is_a_problem() -> None:
    row = phase_row(phase="p", start_ns=10, last_end_ns=5, end_ns=20, settle_s=math.nan,
                    requests=3)  # fmt: skip
    assert check_phase_row(row, 3, "c/p") == [
        "c/p: phase window out of order (start_ns 10, last_end_ns 5, end_ns 20)",
        "c/p: settle_s is not finite (nan)",
    ]
    # A row written when the phase was cut short gives its planned count (3), not how many
    # were sent: 1 record is no problem there.
    cut = phase_row(phase="p", start_ns=1, last_end_ns=2, end_ns=2, requests=3, interrupted=True)
    assert check_phase_row(cut, 1, "c/p") == []
    # A row rebuilt from its records counts them by construction: no count check.
    rebuilt = phase_row(phase="p", start_ns=1, last_end_ns=2, end_ns=2, requests=4,
                        rebuilt_from_records=True)  # fmt: skip
    assert check_phase_row(rebuilt, 0, "c/p") == []


def test_export_refuses_a_broken_run_and_writes_nothing(run: Path) -> None:
    _requests(run).write_text("")
    (run / MANIFEST_FILE).unlink()
    result = _cli("export", str(run), "--format", "csv")
    assert result.exit_code == 1, result.output
    assert "refused: " in result.output and "1GiB/cold: 0 request record(s)" in result.output
    assert not (run / "export").exists()


def test_an_export_into_the_run_leaves_its_seal_intact(run: Path) -> None:
    # `loadgen export RUN` writes RUN/export/requests.csv by default: derived output that no
    # reader reads, so the run stays valid and rebuildable.
    result = _cli("export", str(run), "--format", "csv")
    assert result.exit_code == 0, result.output
    assert (run / "export" / "requests.csv").exists()
    assert _cli("validate", str(run)).exit_code == 0
    assert _cli("report", str(run)).exit_code == 0


def test_a_duplicated_record_is_refused_even_with_reseal(run: Path) -> None:
    # The synthetic run's cold phase has 6 records for a row that says 6 were sent; appending
    # its first record again gives 7 records, two of request cold-0000 (phase cold, index 0).
    lines = _requests(run).read_text().splitlines()
    first = json.loads(lines[0])
    assert (first["phase"], first["index"]) == ("cold", 0)
    _requests(run).write_text("\n".join([*lines, lines[0]]) + "\n")
    (run / MANIFEST_FILE).unlink()
    result = _cli("report", str(run), "--reseal", "appended by hand")
    assert result.exit_code == 1, result.output
    _invalid(
        run,
        f"{TEST_CASE}: 1 request(s) recorded more than once (same phase and index, "
        "e.g. ('cold', 0))",
        f"{TEST_CASE}/cold: 7 request record(s), but its phase row says 6 were sent",
    )


def test_records_of_another_case_are_out_of_place() -> None:
    # Two records filed under case "1GiB": one of its own, one that says case "control".
    own = record(request_id="cold-0", case="1GiB", phase="cold", index=0)
    foreign = record(request_id="cold-1", case="control", phase="cold", index=1)
    assert record_identity_problems([own, foreign], "1GiB") == [
        "1GiB: 1 record(s) of case 'control' in its requests.jsonl"
    ]


def test_a_phase_row_claiming_fewer_sends_than_its_records_is_a_problem() -> None:
    # A row lowered by hand from 64 to 10 sent, with 64 records: more records than sends.
    row = phase_row(phase="c1", start_ns=0, last_end_ns=5, end_ns=9, requests=10)
    assert check_phase_row(row, 64, "1GiB/c1") == [
        "1GiB/c1: 64 request record(s), but its phase row says 10 were sent"
    ]
