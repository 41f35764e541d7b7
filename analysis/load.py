"""Reading a run directory back: the one module of ``analysis`` that opens a run's files.

Everything else in ``analysis`` works on the :class:`RunData` this returns. File names come from
the writers' layout (``loadgen.runformat.layout``, ``metrics.store``).

Request records: a case sent by one process has ``requests.jsonl``; a case whose phases were
split across workers (``loadgen run --workers N`` / ``--ray``) has one
``requests.worker-K.jsonl`` per worker instead, and every reader gets them merged
(:func:`read_records`): each record tagged with its ``worker``, its stamps moved onto the
coordinator's clock by the offset measured for its worker and phase
(``clock_offsets.jsonl``; none on one host, whose monotonic clock every process shares), and
all of them in the order they finished. Statistics over the merged records are pooled over
every request, never averaged per worker.

Every JSON-lines file is read the same way (:func:`read_jsonl`): a last line cut short by a
crash (no newline, not valid JSON) is skipped and reported as a torn tail; a complete line that
is not a JSON object, or not a well-typed row of its file (its row type, checked strictly by
msgspec), is skipped and reported by line number with the reason; everything else is kept.
Metric samples whose value is not finite (a corrupt file: the scraper writes none) are dropped
and counted, so no statistic ever sees them. A JSON file
(``run.json``, ``case.json``, ``report.json``) that is unreadable, not an object or mistyped
reads as empty with a problem saying so; only a ``plan.json`` that cannot be read stops the
reading (:class:`RunFileError`), as nothing can be analysed without it.

A phase that has records but no ``phases.jsonl`` row (the load generator was killed during
it, so nobody wrote its boundaries) is rebuilt from its records: its window runs from the
first request sent to the last one that finished, without settle, and the row says
``rebuilt_from_records`` so every reader can flag the phase incomplete.
"""

from __future__ import annotations

import gzip
import json
import math
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Generic, TypeVar

import msgspec
from pydantic import ValidationError

from loadgen.runformat import (
    CaseInfo,
    ClockOffsetRow,
    FaultRow,
    GatewayEvent,
    PhaseRow,
    RawScrape,
    ReadRecord,
    RunInfo,
    SampleRow,
    ScrapeTick,
    migrate_v0,
    run_format_version,
)
from loadgen.runformat.layout import (
    CASE_FILE,
    CLOCK_OFFSETS_FILE,
    FAULTS_FILE,
    GATEWAY_EVENTS_FILE,
    GATEWAY_LOG,
    PHASES_FILE,
    PLAN_FILE,
    RAW_FILE,
    REQUESTS_FILE,
    RUN_FILE,
    SAMPLES_FILE,
    SCRAPES_FILE,
    case_dir,
    worker_request_files,
)
from metrics.samples import Sample
from scenarios.plan import CaseSpec, Plan
from scenarios.registry import plan_from_data

Row = TypeVar("Row", bound=msgspec.Struct)

#: Row type → the name a problem calls its rows by (``not well-typed record rows``).
ROW_KINDS: dict[type[msgspec.Struct], str] = {
    ReadRecord: "record", PhaseRow: "phase", SampleRow: "sample", ScrapeTick: "scrape",
    ClockOffsetRow: "clock offset", FaultRow: "fault", GatewayEvent: "gateway event",
    CaseInfo: "case", RunInfo: "run",
}  # fmt: skip


def _reason(exc: msgspec.ValidationError) -> str:
    """msgspec's message with the field first: ``Expected `int`, got `str` - at `$.t_ns``` →
    ``t_ns: Expected `int`, got `str```; ``Object missing required field `value``` →
    ``value: missing (a required field)``."""
    text = str(exc)
    what, sep, where = text.rpartition(" - at `$")
    where = where.rstrip("`").lstrip(".") if sep else ""
    what = what if sep else text
    missing = what.removeprefix("Object missing required field `")
    if missing != what:
        field_name = missing.rstrip("`")
        return f"{where + '.' if where else ''}{field_name}: missing (a required field)"
    return f"{where or 'row'}: {what}"


class RunFileError(ValueError):
    """A file the reading cannot do without (``plan.json``) is missing, unreadable or does not
    validate; the message names the file and what is wrong with it."""


@dataclass(frozen=True)
class JsonlFile(Generic[Row]):
    """What a JSON-lines file held.

    Attributes:
        rows: its readable, well-typed lines as rows of its type, in file order.
        exists: the file was there.
        torn_tail: its last line was cut short (no newline and not valid JSON): skipped.
        bad_lines: 1-based numbers of complete lines that are not JSON objects: skipped.
        mistyped: (line number, why) of JSON objects that are not well-typed rows of the
            file's type: skipped.
        kind: the name of the row type the lines were read as (``record``, ``phase``, …).
        raw: the JSON objects of the well-typed lines, as read (before the migration of a
            version-0 run upgraded them): what :func:`loadgen.runformat.migrate_v0` inspects.
    """

    rows: list[Row]
    exists: bool = True
    torn_tail: bool = False
    bad_lines: tuple[int, ...] = ()
    mistyped: tuple[tuple[int, str], ...] = ()
    kind: str | None = None
    raw: list[dict[str, Any]] = field(default_factory=list)

    def problems(self, name: str) -> list[str]:
        """Human-readable findings about this file (empty when it read cleanly)."""
        out = []
        if self.torn_tail:
            out.append(
                f"the last line of {name} is cut short (a crash while writing it); "
                "the lines before it are intact"
            )
        if self.bad_lines:
            lines = ", ".join(str(n) for n in self.bad_lines[:10])
            out.append(f"{name}: line(s) {lines} are not valid JSON objects and were skipped")
        if self.mistyped:
            lines = ", ".join(f"{n} ({why})" for n, why in self.mistyped[:5])
            more = f" and {len(self.mistyped) - 5} more" if len(self.mistyped) > 5 else ""
            out.append(f"{name}: line(s) {lines}{more} are not well-typed {self.kind} rows "
                       "and were skipped")  # fmt: skip
        return out


#: How a version-0 row is upgraded before it is typed: (object, its 0-based index) → object.
Upgrade = Callable[[dict[str, Any], int], dict[str, Any]]


def read_jsonl(path: Path, row_type: type[Row], upgrade: Upgrade | None = None) -> JsonlFile[Row]:
    """Read a JSON-lines file of ``row_type`` rows the tolerant way described in the module
    docstring; ``upgrade`` (a version-0 migration) rewrites each object before it is typed.

    A missing file gives an empty :class:`JsonlFile` with ``exists=False``.
    """
    kind = ROW_KINDS.get(row_type, row_type.__name__)
    if not path.exists():
        return JsonlFile([], exists=False, kind=kind)
    rows: list[Row] = []
    raw: list[dict[str, Any]] = []
    bad: list[int] = []
    mistyped: list[tuple[int, str]] = []
    torn = False
    with open(path, encoding="utf-8", errors="replace") as fh:
        for lineno, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError:
                if line.endswith("\n"):
                    bad.append(lineno)
                else:
                    torn = True  # only the last line can lack its newline
                continue
            if not isinstance(obj, dict):
                bad.append(lineno)
                continue
            typed = upgrade(obj, len(raw) + len(mistyped)) if upgrade is not None else obj
            try:
                rows.append(msgspec.convert(typed, row_type, strict=True))
            except msgspec.ValidationError as exc:
                mistyped.append((lineno, _reason(exc)))
            else:
                raw.append(obj)
    return JsonlFile(rows, True, torn, tuple(bad), tuple(mistyped), kind, raw)


@dataclass(frozen=True)
class JsonFile(Generic[Row]):
    """What a JSON file held: ``data`` (the type's defaults when missing or unusable) and,
    when it was there but unusable, ``problem`` saying why."""

    data: Row
    exists: bool
    problem: str | None = None


def read_json_object(path: Path) -> tuple[dict[str, Any] | None, bool, str | None]:
    """(the JSON object, the file exists, why it is unusable) of a JSON object file; never
    raises for a broken file: an empty, unreadable or non-object file gives ``None`` and a
    problem naming the file."""
    if not path.exists():
        return None, False, None
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        return None, True, f"{path.name} cannot be read ({exc}); read as empty"
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as exc:
        why = "is empty" if not text.strip() else f"is not valid JSON ({exc})"
        return None, True, f"{path.name} {why}; read as empty"
    if not isinstance(obj, dict):
        return None, True, (f"{path.name} holds a {type(obj).__name__}, not a JSON "
                            "object; read as empty")  # fmt: skip
    return obj, True, None


def read_json_file(path: Path, row_type: type[Row]) -> JsonFile[Row]:
    """Read a JSON object file as a ``row_type`` (``RunInfo``, ``CaseInfo``); it must be well
    typed. Never raises for a broken file: an empty, unreadable, non-object or mistyped file
    gives the type's defaults and a ``problem`` naming the file."""
    obj, exists, problem = read_json_object(path)
    if obj is None:
        return JsonFile(row_type(), exists, problem)
    try:
        return JsonFile(msgspec.convert(obj, row_type, strict=True), True)
    except msgspec.ValidationError as exc:
        why = _reason(exc)
        return JsonFile(row_type(), True, f"{path.name} is not well typed ({why}); read as empty")


#: Record fields holding one monotonic stamp (ns), and the one holding a list of them.
STAMP_FIELDS = ("scheduled_ns", "admitted_ns", "sent_ns", "connection_ready_ns",
                "request_sent_ns", "headers_ns", "end_ns", "disconnect_ns")  # fmt: skip
STAMP_LIST_FIELDS = ("chunk_ns",)


def shift_stamps(record: ReadRecord, offset_ns: int) -> None:
    """Move every stamp of ``record`` from its worker's clock to the coordinator's, in place
    (stamp − ``offset_ns``); ``None`` stamps stay ``None``."""
    if not offset_ns:
        return
    for key in STAMP_FIELDS:
        value = getattr(record, key)
        if value is not None:
            setattr(record, key, value - offset_ns)
    record.chunk_ns = [t - offset_ns for t in record.chunk_ns]


def _finish_order(record: ReadRecord) -> int:
    for stamp in (record.end_ns, record.sent_ns, record.scheduled_ns):
        if stamp is not None:
            return stamp
    return 0


@dataclass(frozen=True)
class RecordFiles:
    """A case's request records, merged over its record files (see the module docstring).

    Attributes:
        records: every record, worker-tagged (``worker`` is ``None`` for ``requests.jsonl``)
            and on the coordinator's clock, in the order they finished (``end_ns``).
        files: each record file read, by its name in the case directory.
        offsets: the clock offsets applied (``clock_offsets.jsonl`` rows).
        workers: how many worker files there were (0: one process wrote ``requests.jsonl``).
    """

    records: list[ReadRecord]
    files: dict[str, JsonlFile[Any]]
    offsets: list[ClockOffsetRow]
    workers: int


def read_records(cdir: Path) -> RecordFiles:
    """The merged request records of case directory ``cdir`` (see the module docstring).

    A record of worker k in phase p is shifted by the offset measured for (p, k); a worker
    and phase without one is on the coordinator's clock already (same host).
    """
    offsets_file = read_jsonl(cdir / CLOCK_OFFSETS_FILE, ClockOffsetRow)
    offset = {(o.phase, o.worker): o.offset_ns for o in offsets_file.rows}
    files: dict[str, JsonlFile[Any]] = {}
    records: list[ReadRecord] = []
    single = read_jsonl(cdir / REQUESTS_FILE, ReadRecord)
    if single.exists:
        files[REQUESTS_FILE] = single
        records += single.rows
    workers = worker_request_files(cdir)
    for worker, path in workers:
        part = read_jsonl(path, ReadRecord)
        files[path.name] = part
        for r in part.rows:
            shift_stamps(r, offset.get((r.phase, worker), 0))
            r.worker = worker
            records.append(r)
    if workers:
        records.sort(key=_finish_order)  # stable: each file's own order is kept on ties
    if offsets_file.exists:
        files[CLOCK_OFFSETS_FILE] = offsets_file
    return RecordFiles(records, files, offsets_file.rows, len(workers))


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


def load_plan(run_dir: Path) -> Plan:
    """The run's plan (``plan.json``), after the run's format version was checked (a
    version-0 plan goes through its migration).

    Raises:
        FormatVersionError: the run's format version is neither this one nor 0
            (``loadgen.runformat.run_format_version``).
        FileNotFoundError: no ``plan.json`` (not a run directory, or it failed before planning).
        RunFileError: ``plan.json`` is empty, not JSON, not an object or not a valid plan.
    """
    version = run_format_version(run_dir)
    path = run_dir / PLAN_FILE
    if not path.exists():
        raise FileNotFoundError(f"{path} not found: not a run directory, or no plan was made")
    data, _, problem = read_json_object(path)
    if data is None:
        why = (problem or "").removeprefix(f"{PLAN_FILE} ").removesuffix("; read as empty")
        raise RunFileError(f"{path} {why}")
    if version == migrate_v0.FROM_VERSION:
        data = migrate_v0.plan(data)
    try:
        return plan_from_data(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(str(x) for x in err["loc"]) or "plan"
        raise RunFileError(
            f"{path} is not a valid plan ({exc.error_count()} error(s), first: {where}: "
            f"{err['msg']})"
        ) from None


def read_samples(case_dir: Path) -> list[Sample]:
    """The finite metric samples of a case directory (``metrics/samples.jsonl``), in order."""
    return _samples(case_dir / SAMPLES_FILE)[0]


def read_scrapes(case_dir: Path) -> list[ScrapeTick]:
    """The scrape index of a case directory (``metrics/scrapes.jsonl``), one row per tick."""
    return read_jsonl(case_dir / SCRAPES_FILE, ScrapeTick).rows


def iter_raw(case_dir: Path) -> Iterator[RawScrape]:
    """The raw scrapes of ``metrics/raw.jsonl.gz``; a file cut short by a crash (gzip stream
    or last line) ends the iteration, like a torn JSONL tail; a line that is not a raw scrape
    is skipped."""
    path = case_dir / RAW_FILE
    if not path.exists():
        return
    with gzip.open(path, "rt", encoding="utf-8") as fh:
        try:
            for line in fh:
                if line.strip():
                    try:
                        obj = json.loads(line)
                    except json.JSONDecodeError:
                        return  # only the cut-short last line can fail to parse
                    try:
                        yield msgspec.convert(obj, RawScrape, strict=True)
                    except msgspec.ValidationError:
                        continue
        except (EOFError, OSError, zlib.error):  # gzip.BadGzipFile is an OSError
            return


def gzip_jsonl_problem(path: Path) -> str | None:
    """Why the file at ``path`` is not what a ``.jsonl.gz`` name says (one complete gzip
    stream of JSON objects, one a line), or ``None`` when it is: ``is not gzip``, ``is cut
    short``, ``line N is not a JSON object``. Reads the whole stream (its CRC is checked at
    the end)."""
    try:
        with gzip.open(path, "rt", encoding="utf-8") as fh:
            for lineno, line in enumerate(fh, 1):
                if not line.strip():
                    continue
                try:
                    obj = json.loads(line)
                except json.JSONDecodeError:
                    obj = None
                if not isinstance(obj, dict):
                    return f"line {lineno} is not a JSON object"
    except gzip.BadGzipFile as exc:
        return f"is not gzip ({exc})"
    except EOFError:
        return "is cut short (the gzip stream ends early)"
    except (OSError, zlib.error, UnicodeDecodeError) as exc:
        return f"cannot be read as gzip ({type(exc).__name__}: {exc})"
    return None


def _samples(path: Path) -> tuple[list[Sample], int, JsonlFile[SampleRow], int]:
    """(finite samples, non-finite dropped, the file, duplicates dropped). A series repeated
    at one scrape (the scraper writes none: a corrupt file) is read once, its first line, as
    ``metrics.parse`` does: summed, it would double a counter."""
    raw = read_jsonl(path, SampleRow)
    out: list[Sample] = []
    nonfinite = duplicates = 0
    seen: set[tuple[int, str, tuple[tuple[str, str], ...]]] = set()
    for d in raw.rows:
        key = (d.t_ns, d.name, tuple(sorted(d.labels.items())))
        if key in seen:
            duplicates += 1
            continue
        seen.add(key)
        if not math.isfinite(d.value):
            nonfinite += 1
            continue
        out.append(Sample(*key, d.value))
    return out, nonfinite, raw, duplicates


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
        FormatVersionError: the run's format version cannot be read (:func:`load_plan`).
    """
    version = run_format_version(run_dir) if version is None else version
    v0 = version == migrate_v0.FROM_VERSION
    cdir = case_dir(run_dir, spec.name)
    info = read_json_file(cdir / CASE_FILE, CaseInfo)
    merged = read_records(cdir)
    phases = read_jsonl(cdir / PHASES_FILE, PhaseRow)
    scrapes = read_jsonl(cdir / SCRAPES_FILE, ScrapeTick, migrate_v0.scrape if v0 else None)
    samples, nonfinite, samples_file, duplicates = _samples(cdir / SAMPLES_FILE)
    faults = read_jsonl(cdir / FAULTS_FILE, FaultRow)
    events = read_jsonl(cdir / GATEWAY_EVENTS_FILE, GatewayEvent)
    files: dict[str, JsonlFile[Any]] = {PHASES_FILE: phases, SCRAPES_FILE: scrapes}
    files.update(merged.files)
    files |= {SAMPLES_FILE: samples_file, FAULTS_FILE: faults, GATEWAY_EVENTS_FILE: events}
    transitions, source = _transitions(cdir, events, version)
    problems = [info.problem] if info.problem else []
    problems += [p for rel, f in files.items() for p in f.problems(rel)]
    return CaseData(
        name=spec.name,
        info=info.data,
        records=merged.records,
        phases=rebuild_missing_phases(phases.rows, merged.records),
        samples=samples,
        scrapes=scrapes.rows,
        faults=faults.rows,
        transitions=transitions,
        transitions_source=source,
        nonfinite_samples=nonfinite,
        duplicate_samples=duplicates,
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
        FormatVersionError: the run's format version is neither this one nor 0.
        FileNotFoundError: ``plan.json`` is missing (not a run directory, or it failed before
            planning).
        RunFileError: ``plan.json`` cannot be read or is not a valid plan.
    """
    plan = load_plan(run_dir)
    version = run_format_version(run_dir)
    run = read_json_file(run_dir / RUN_FILE, RunInfo)
    cases = [load_case(run_dir, spec, version) for spec in plan.cases]
    problems = [run.problem] if run.problem else []
    return RunData(run_dir, plan, run.data, cases, problems, version)
