"""Reading a run directory back for the analysis: the :class:`RunData` every statistic, report,
comparison and export works on.

The files are read by the run format's own readers (``loadgen.runformat``: one reader per
file, beside its writer; the tolerant JSON-lines reading, the merged worker records, the
metrics files), after the one check every reader makes (``loadgen.runformat.open_run``:
format version, a run that ended before its plan, not a run). Problems of a file (a torn
tail, a mistyped line, an unusable ``run.json`` or ``case.json``) are collected per run and
case (``file_problems``), never raised; only a ``plan.json`` that cannot be read stops the
reading (``RunFileError``), as nothing can be analysed without it.

A phase that has records but no ``phases.jsonl`` row (the load generator was killed during
it, so nobody wrote its boundaries) is rebuilt from its records: its window runs from the
first request sent to the last one that finished, without settle, and the row says
``rebuilt_from_records`` so every reader can flag the phase incomplete.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from loadgen.runformat import (
    CaseInfo,
    ClockOffsetRow,
    FaultRow,
    GatewayEvent,
    PhaseRow,
    ReadRecord,
    RunInfo,
    ScrapeTick,
    migrate_v0,
    run_format_version,
)
from loadgen.runformat.layout import (
    CASE_FILE,
    FAULTS_FILE,
    GATEWAY_EVENTS_FILE,
    GATEWAY_LOG,
    PHASES_FILE,
    RUN_FILE,
    SAMPLES_FILE,
    SCRAPES_FILE,
    case_dir,
)
from loadgen.runformat.metric_files import read_sample_file
from loadgen.runformat.opening import read_plan
from loadgen.runformat.reading import JsonlFile, read_json_file, read_jsonl
from loadgen.runformat.record_files import read_records
from metrics.samples import Sample
from scenarios.plan import CaseSpec, Plan


@dataclass
class CaseData:
    """Raw data of one case, as written by the run.

    Attributes:
        name: case name; ``spec`` its plan entry (``None`` in hand-built test data).
        info: ``case.json`` (status, error, server facts).
        records: request records, merged over the case's record files (:func:`read_records`).
        phases: phase boundaries (``phases.jsonl``).
        samples: finite metric samples (``metrics/samples.jsonl``), in file order.
        scrapes: one entry per scrape tick (``metrics/scrapes.jsonl``).
        faults: injected faults (``faults.jsonl``).
        transitions: gateway breaker transitions (``gateway_events.jsonl``).
        transitions_source: ``events``, ``log`` (a version-0 run without the events file,
            read through its migration) or ``None`` (no gateway).
        nonfinite_samples: samples dropped because their value was not finite.
        duplicate_samples: samples dropped because their series (name, labels) was already
            read at the same scrape (the scraper writes none: ``metrics.parse``).
        scrape_index_without_ticks: the scrape index does not list skipped ticks (a version-0
            run from before per-tick accounting, read through its migration).
        file_problems: torn tails and unreadable lines, per file (for ``validate``/report).
        workers: load-generator workers whose record files were merged (0: one process).
        clock_offsets: the worker clock offsets applied (``clock_offsets.jsonl`` rows).
    """

    name: str
    info: CaseInfo
    records: list[ReadRecord]
    phases: list[PhaseRow]
    samples: list[Sample]
    scrapes: list[ScrapeTick]
    faults: list[FaultRow] = field(default_factory=list)
    transitions: list[GatewayEvent] = field(default_factory=list)
    transitions_source: str | None = None
    nonfinite_samples: int = 0
    duplicate_samples: int = 0
    file_problems: list[str] = field(default_factory=list)
    spec: CaseSpec | None = None
    scrape_index_without_ticks: bool = False
    workers: int = 0
    clock_offsets: list[ClockOffsetRow] = field(default_factory=list)


@dataclass
class RunData:
    """Raw data of a run: its plan, run facts and cases (in plan order); ``file_problems``
    says what was wrong with ``run.json`` (it then reads as empty); ``format_version`` is the
    version the run was written in (0: read through ``loadgen.runformat.migrate_v0``)."""

    run_dir: Path
    plan: Plan
    run: RunInfo
    cases: list[CaseData]
    file_problems: list[str] = field(default_factory=list)
    format_version: int = 1


def _transitions(
    cdir: Path, events: JsonlFile[GatewayEvent], version: int
) -> tuple[list[GatewayEvent], str | None]:
    if events.exists:
        return events.rows, "events"
    log = cdir / GATEWAY_LOG
    if version == migrate_v0.FROM_VERSION and log.exists():
        return migrate_v0.transitions_from_log(log), "log"
    return [], None


def rebuild_missing_phases(phases: list[PhaseRow], records: list[ReadRecord]) -> list[PhaseRow]:
    """``phases`` plus a row for every phase that has records but no row (module docstring):
    ``start_ns`` = first ``sent_ns``, ``last_end_ns`` = ``end_ns`` = last ``end_ns`` (the
    last chunk or the send where a record has no end), ``rebuilt_from_records`` true; rows in
    time order. A phase none of whose requests was sent has no window and gets no row.
    """
    have = {p.phase for p in phases}
    sent: dict[str, list[int]] = {}
    ends: dict[str, list[int]] = {}
    for r in records:
        if r.phase in have or r.sent_ns is None:
            continue
        sent.setdefault(r.phase, []).append(r.sent_ns)
        end = r.end_ns or max(r.chunk_ns or [r.sent_ns])
        ends.setdefault(r.phase, []).append(end)
    rebuilt = [
        PhaseRow(phase=name, start_ns=min(starts), last_end_ns=max(ends[name]),
                 end_ns=max(ends[name]), requests=len(starts), rebuilt_from_records=True)
        for name, starts in sent.items()
    ]  # fmt: skip
    if not rebuilt:
        return phases
    return sorted([*phases, *rebuilt], key=lambda p: p.start_ns)


def load_case(run_dir: Path, spec: CaseSpec, version: int | None = None) -> CaseData:
    """Everything recorded for case ``spec`` (empty lists for files it never wrote); files of
    a version-0 run (``version``; checked from ``run.json`` when ``None``) go through its
    migration.

    Raises:
        FormatVersionError: the run's format version cannot be read.
    """
    version = run_format_version(run_dir) if version is None else version
    v0 = version == migrate_v0.FROM_VERSION
    cdir = case_dir(run_dir, spec.name)
    info = read_json_file(cdir / CASE_FILE, CaseInfo)
    merged = read_records(cdir)
    phases = read_jsonl(cdir / PHASES_FILE, PhaseRow)
    scrapes = read_jsonl(cdir / SCRAPES_FILE, ScrapeTick, migrate_v0.scrape if v0 else None)
    sample_file = read_sample_file(cdir / SAMPLES_FILE)
    faults = read_jsonl(cdir / FAULTS_FILE, FaultRow)
    events = read_jsonl(cdir / GATEWAY_EVENTS_FILE, GatewayEvent)
    files: dict[str, JsonlFile[Any]] = {PHASES_FILE: phases, SCRAPES_FILE: scrapes}
    files.update(merged.files)
    files |= {SAMPLES_FILE: sample_file.file, FAULTS_FILE: faults, GATEWAY_EVENTS_FILE: events}
    transitions, source = _transitions(cdir, events, version)
    problems = [info.problem] if info.problem else []
    problems += [p for rel, f in files.items() for p in f.problems(rel)]
    return CaseData(
        name=spec.name,
        info=info.data,
        records=merged.records,
        phases=rebuild_missing_phases(phases.rows, merged.records),
        samples=sample_file.samples,
        scrapes=scrapes.rows,
        faults=faults.rows,
        transitions=transitions,
        transitions_source=source,
        nonfinite_samples=sample_file.nonfinite,
        duplicate_samples=sample_file.duplicates,
        file_problems=problems,
        spec=spec,
        scrape_index_without_ticks=v0 and migrate_v0.scrape_index_predates_ticks(scrapes.raw),
        workers=merged.workers,
        clock_offsets=merged.offsets,
    )


def load_run(run_dir: Path) -> RunData:
    """Load everything analysis needs from ``run_dir``; broken files other than the plan are
    read as far as they are good and reported (``file_problems`` of the run and its cases).

    Raises:
        UnreadableRun: ``loadgen.runformat.open_run`` refused it (another format version, a
            run that ended before its plan was made, not a run).
        RunFileError: ``plan.json`` cannot be read or is not a valid plan.
    """
    plan = read_plan(run_dir)
    version = run_format_version(run_dir)
    run = read_json_file(run_dir / RUN_FILE, RunInfo)
    cases = [load_case(run_dir, spec, version) for spec in plan.cases]
    problems = [run.problem] if run.problem else []
    return RunData(run_dir, plan, run.data, cases, problems, version)
