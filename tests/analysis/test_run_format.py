"""The run format (``loadgen.runformat``): every row kind written by its writer and read back
by the readers as the same row; ``FORMAT_VERSION`` in ``run.json``; a run of another version
refused by every reader with one line; a version-0 run read through its one migration."""

from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path

import msgspec
import pytest
from click.testing import CliRunner

from analysis.compare import CompareError, compare_paths
from analysis.gate_file import load_gate
from analysis.load import load_case, load_run
from analysis.report import build_report
from analysis.validate import validate_run
from gateway.breaker import BreakerState, Transition
from gateway.events import EventsFile
from loadgen.cli import main
from loadgen.records import RecordWriter
from loadgen.runformat import (
    FORMAT_VERSION,
    CaseInfo,
    ClockOffsetRow,
    FaultRow,
    FormatVersionError,
    GatewayEvent,
    Manifest,
    PhaseRow,
    RawScrape,
    ReadRecord,
    RequestRecord,
    RunInfo,
    SampleRow,
    ScrapeTick,
    WorkerPhaseRow,
    run_format_version,
)
from loadgen.runformat.layout import (
    CASE_FILE,
    CLOCK_OFFSETS_FILE,
    FAULTS_FILE,
    GATEWAY_EVENTS_FILE,
    MANIFEST_FILE,
    PHASES_FILE,
    RAW_FILE,
    REQUESTS_FILE,
    RUN_FILE,
    SAMPLES_FILE,
    SCRAPES_FILE,
    append_jsonl,
    case_dir,
    worker_requests_file,
    write_json,
)
from loadgen.runformat.manifest import list_files, verify_manifest, write_manifest
from loadgen.runformat.reading import read_json_file, read_jsonl
from loadgen.runformat.record_files import read_records
from metrics.samples import Sample
from metrics.scraper import _open_files
from metrics.store import sample_row
from scenarios.plan import CaseSpec
from tests.support.synthetic_run import TEST_CASE, build_run

S = 1_000_000_000

RECORD = RequestRecord(
    request_id="p-0001", case="c", phase="p", index=1, group="anchors-0",
    prompt_tokens_sent=72, max_tokens=4, scheduled_ns=10 * S, admitted_ns=10 * S + 1,
    sent_ns=10 * S + 2, connection_ready_ns=10 * S + 3, new_connection=True,
    request_sent_ns=10 * S + 4, headers_ns=10 * S + 5,
    chunk_ns=[10 * S + 20, 10 * S + 30], chunk_tokens=[1, 3], token_timing="usage",
    end_ns=10 * S + 31, http_status=200, status="ok", usage_prompt_tokens=72,
    usage_completion_tokens=4, cached_tokens=64, finish_reason="length", upstream="http://u:1",
)  # fmt: skip
PHASE = PhaseRow(
    phase="p", start_ns=10 * S, last_end_ns=11 * S, end_ns=12 * S, settle_s=1.0, requests=1,
    resolved={"rate_rps": 2.5}, measurement={"window_s": 1.0}, derived={"slo": {"value": 3.0}},
    loop_lag_max_ms=0.5, loop_lag_p99_ms=0.25, late_sends=0, warmup_connections=2,
    warmup_opened=2, warmup_failed=0, warmup_ms=1.5, server_idle_after=True,
    requested_concurrency=4, post_scrape_start_ns=11 * S + 7, post_scrape_waited_s=0.1,
    workers=[WorkerPhaseRow(worker=0, node="n0", requests=1, statuses={"ok": 1},
                            loop_lag_max_ms=0.5, loop_lag_p99_ms=0.25, late_sends=0,
                            warmup_connections=2, warmup_opened=2, warmup_failed=0,
                            warmup_ms=1.5, clock_offset_ns=0, clock_offset_bound_ns=100)],
)  # fmt: skip
OFFSET = ClockOffsetRow(phase="p", worker=0, node="n0", offset_ns=0, rtt_ns=200, bound_ns=100,
                        samples=10)  # fmt: skip
FAULTS = [
    FaultRow(fault="kill_replica", replica=1, url="http://u:2", killed_ns=10 * S + 5,
             stopped_ns=10 * S + 9),
    FaultRow(fault="restarted", replica=1, url="http://u:2", healthy_ns=11 * S, startup_s=20.5),
]  # fmt: skip
SAMPLE = Sample(10 * S + 100, "prefix_cache_hits", (("model_name", "m"),), 64.0)
TICKS = [
    ScrapeTick(tick=0, deadline_ns=10 * S, outcome="ok", scrape=0, start_ns=10 * S + 1,
               end_ns=10 * S + 100, late=False, bytes=50_000, samples=1, nan_dropped=0,
               duplicates_dropped=0, aliases={"prefix_cache_hits": "vllm:prefix_cache_hits"},
               missing=["num_preemptions"]),
    ScrapeTick(tick=1, deadline_ns=10 * S + S // 4, outcome="failed", scrape=1,
               start_ns=10 * S + S // 4, end_ns=10 * S + S // 2, late=False,
               error="ReadTimeout: "),
    ScrapeTick(tick=2, deadline_ns=10 * S + S // 2, outcome="skipped",
               reason="previous scrape still running"),
]  # fmt: skip
TRANSITION = Transition("http://u:2", BreakerState.CLOSED, BreakerState.OPEN, 10.5, "3 failures")
CASE_INFO = CaseInfo(
    case={"name": "c"}, server={"url": "http://u:1", "version": "0.32.0"}, status="ok",
    requests=1, failed_requests=0, client=[{"policy": "other", "cpus": [1], "reason": "r",
                                           "problem": None}],
)  # fmt: skip
RUN_INFO = RunInfo(
    format_version=FORMAT_VERSION, scenario="prefix-eviction", command=["loadgen", "run"],
    started_at="2026-12-02T07:00:00Z", clock={"wall_ns": 1, "monotonic_ns": 2},
    versions={"python": "3.11"}, model_variant=None, load_generator={"workers": 1},
    status="ok", wall_s=12.5,
)  # fmt: skip


def _write_every_row_kind(run_dir: Path) -> Path:
    """A case directory with one or more rows of every kind, each written by its writer."""
    cdir = case_dir(run_dir, "c")
    write_json(run_dir / RUN_FILE, RUN_INFO)
    write_json(cdir / CASE_FILE, CASE_INFO)
    with RecordWriter(cdir / REQUESTS_FILE) as writer:
        writer.write(RECORD)
    with RecordWriter(cdir / worker_requests_file(0)) as writer:
        writer.write(msgspec.structs.replace(RECORD, request_id="p-0002", index=2))
    append_jsonl(cdir / PHASES_FILE, PHASE)
    append_jsonl(cdir / CLOCK_OFFSETS_FILE, OFFSET)
    for fault in FAULTS:
        append_jsonl(cdir / FAULTS_FILE, fault)
    EventsFile(cdir / GATEWAY_EVENTS_FILE).on_breaker_transition(TRANSITION)
    with _open_files(cdir) as files:
        files.page(0, SAMPLE.t_ns, "vllm:prefix_cache_hits 64\n", [SAMPLE])
        for tick in TICKS:
            files.tick(tick)
    return cdir


def test_every_row_kind_reads_back_as_the_row_its_writer_wrote(tmp_path: Path) -> None:
    cdir = _write_every_row_kind(tmp_path)
    assert run_format_version(tmp_path) == FORMAT_VERSION
    assert read_json_file(tmp_path / RUN_FILE, RunInfo).data == RUN_INFO
    assert read_json_file(cdir / CASE_FILE, CaseInfo).data == CASE_INFO
    merged = read_records(cdir)
    single, worker = merged.records  # finish order: equal end stamps keep file order
    assert single == msgspec.convert(msgspec.to_builtins(RECORD), ReadRecord)
    assert (single.worker, worker.worker, worker.request_id) == (None, 0, "p-0002")
    assert merged.offsets == [OFFSET]
    assert read_jsonl(cdir / PHASES_FILE, PhaseRow).rows == [PHASE]
    assert read_jsonl(cdir / FAULTS_FILE, FaultRow).rows == FAULTS
    [event] = read_jsonl(cdir / GATEWAY_EVENTS_FILE, GatewayEvent).rows
    # 10.5 s on the breaker's clock is 10.5e9 ns; states as the file spells them.
    assert event == GatewayEvent(
        t_ns=10_500_000_000,
        upstream="http://u:2",
        from_state="closed",
        to_state="open",
        reason="3 failures",
    )
    assert '"from":"closed","to":"open"' in (cdir / GATEWAY_EVENTS_FILE).read_text()
    assert read_jsonl(cdir / SAMPLES_FILE, SampleRow).rows == [sample_row(SAMPLE, 0)]
    assert read_jsonl(cdir / SCRAPES_FILE, ScrapeTick).rows == TICKS
    with gzip.open(cdir / RAW_FILE, "rt") as fh:
        [raw] = [msgspec.json.decode(line, type=RawScrape) for line in fh]
    assert raw == RawScrape(scrape=0, t_ns=SAMPLE.t_ns, text="vllm:prefix_cache_hits 64\n")
    # The case as analysis loads it: the same rows, nothing reported wrong.
    case = load_case(tmp_path, CaseSpec(name="c"))
    assert case.file_problems == []
    assert (case.phases, case.faults, case.scrapes) == ([PHASE], FAULTS, TICKS)
    assert case.transitions == [event] and case.transitions_source == "events"
    assert case.samples == [SAMPLE] and case.clock_offsets == [OFFSET]
    assert case.info == CASE_INFO and len(case.records) == 2
    # The manifest, written last, reads back as its type and verifies.
    write_manifest(tmp_path, "ok", ["loadgen", "run"])
    manifest = msgspec.json.decode((tmp_path / MANIFEST_FILE).read_bytes(), type=Manifest)
    assert manifest.files == list_files(tmp_path) and manifest.status == "ok"
    assert verify_manifest(tmp_path) == []


@pytest.fixture(scope="module")
def synthetic(tmp_path_factory: pytest.TempPathFactory) -> Path:
    run_dir = tmp_path_factory.mktemp("synthetic")
    build_run(run_dir)
    build_report(run_dir)
    write_manifest(run_dir, "ok", ["loadgen", "run", "prefix-eviction"])
    return run_dir


def _with_version(synthetic: Path, tmp_path: Path, version: object) -> Path:
    run_dir = tmp_path / "run"
    shutil.copytree(synthetic, run_dir)
    info = json.loads((run_dir / RUN_FILE).read_text())
    if version is None:
        info.pop("format_version")
    else:
        info["format_version"] = version
    (run_dir / RUN_FILE).write_text(json.dumps(info))
    write_manifest(run_dir, "ok", ["loadgen", "run", "prefix-eviction"])  # as its writer sealed it
    return run_dir


@pytest.mark.parametrize("version", [2, 99, -1, "1", 1.0])
def test_a_run_of_another_version_is_refused_by_every_reader_in_one_line(
    synthetic: Path, tmp_path: Path, version: object
) -> None:
    run_dir = _with_version(synthetic, tmp_path, version)
    expected = (f"{run_dir}: run format version {version!r}, this loadgen reads version 1 (and "
                "0 through its migration); use the loadgen that wrote it")  # fmt: skip
    with pytest.raises(FormatVersionError) as refused:
        load_run(run_dir)
    assert str(refused.value) == expected
    with pytest.raises(FormatVersionError):
        validate_run(run_dir)
    with pytest.raises(CompareError, match="run format version"):
        compare_paths(synthetic, run_dir, load_gate())
    runner = CliRunner()
    for command in (["report"], ["validate"], ["validate", "--json"], ["export"],
                    ["export", "--format", "vllm-bench"]):  # fmt: skip
        result = runner.invoke(main, [*command, str(run_dir)])
        assert result.exit_code == 2, (command, result.output)
        assert result.output == f"error: {expected}\n", command
    # compare (and gate, through the same compare_paths) says it in one line, exit 2, with no
    # usage banner: the command line was right, the run cannot be compared.
    compared = runner.invoke(main, ["compare", str(synthetic), str(run_dir)])
    assert compared.exit_code == 2
    assert compared.output == f"error: could not compare: {expected}\n", compared.output
    assert "format_version" in (run_dir / RUN_FILE).read_text()  # nothing was rewritten


def test_the_writers_record_the_current_version(synthetic: Path) -> None:
    assert json.loads((synthetic / RUN_FILE).read_text())["format_version"] == FORMAT_VERSION
    assert load_run(synthetic).format_version == FORMAT_VERSION
    assert "Run format: version 1\n" in (synthetic / "report.md").read_text()


def test_a_version_0_run_reads_through_the_migration_to_the_same_report(
    synthetic: Path, tmp_path: Path
) -> None:
    run_dir = _with_version(synthetic, tmp_path, None)
    assert load_run(run_dir).format_version == 0
    build_report(run_dir)
    old = (run_dir / "report.md").read_text().splitlines()
    new = (synthetic / "report.md").read_text().splitlines()
    differ = [(a, b) for a, b in zip(old, new, strict=True) if a != b]
    assert differ == [("Run format: version 0 (written before versions were recorded; read "
                       "through its migration)", "Run format: version 1")]  # fmt: skip
    assert (
        json.loads((run_dir / "report.json").read_text())["cases"]
        == json.loads((synthetic / "report.json").read_text())["cases"]
    )


def test_the_migration_upgrades_the_shapes_of_older_version_0_writers(
    synthetic: Path, tmp_path: Path
) -> None:
    # A scraper from before tick accounting wrote ``ok`` and no tick or deadline; a plan of
    # that time had report-only settings the plan no longer has.
    run_dir = _with_version(synthetic, tmp_path, None)
    path = case_dir(run_dir, TEST_CASE) / SCRAPES_FILE
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    old = [{k: v for k, v in r.items() if k not in ("outcome", "tick", "deadline_ns")}
           | {"ok": i != 3} for i, r in enumerate(rows)]  # fmt: skip
    path.write_text("".join(json.dumps(r) + "\n" for r in old))
    plan = json.loads((run_dir / "plan.json").read_text())
    plan |= {"probe_phases": ["cold", "warm"], "compare_phases": [["revisit", "warm"]]}
    (run_dir / "plan.json").write_text(json.dumps(plan))
    data = load_run(run_dir)
    case = data.cases[0]
    assert data.plan.scenario == "prefix-eviction"
    # Outcome from ``ok``, the line's position as tick, its start as deadline.
    assert [s.outcome for s in case.scrapes[:5]] == ["ok", "ok", "ok", "failed", "ok"]
    assert [s.tick for s in case.scrapes] == list(range(len(rows)))
    assert case.scrapes[0].deadline_ns == rows[0]["start_ns"]
    assert case.scrape_index_without_ticks and case.file_problems == []
    write_manifest(run_dir, "ok", ["loadgen", "run", "prefix-eviction"])  # as its writer did
    build_report(run_dir)
    write_manifest(run_dir, "ok", ["loadgen", "run", "prefix-eviction"])
    result = validate_run(run_dir)
    assert result.problems == []
    assert result.warnings == [
        f"{TEST_CASE}: the scrape index predates per-tick accounting (ticks skipped while a "
        "scrape ran are not listed)"
    ]
    # The same files marked version 1 are not upgraded: the old lines are mistyped, the old
    # plan invalid.
    info = json.loads((run_dir / RUN_FILE).read_text()) | {"format_version": FORMAT_VERSION}
    (run_dir / RUN_FILE).write_text(json.dumps(info))
    with pytest.raises(ValueError, match="probe_phases"):
        load_run(run_dir)


def test_the_run_format_page_is_what_the_types_generate() -> None:
    from loadgen.runformat.doc import PAGE, render

    assert PAGE.read_text() == render(), "run: python -m loadgen.runformat.doc"
