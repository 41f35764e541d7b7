"""Reading a run directory back: the one module of ``analysis`` that opens a run's files.

Everything else in ``analysis`` works on the :class:`RunData` this returns. File names come from
the writers' layout (``loadgen.rundir``, ``metrics.store``).

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
is not a JSON object, or not a well-typed row of its file (a record, phase, sample, scrape,
clock offset, fault or gateway event: ``analysis.file_shapes``), is skipped and reported by line
number with the reason; everything else is kept. Metric samples whose value is not finite
(``NaN`` from older runs) are dropped and counted, so no statistic ever sees them. A JSON file
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
import re
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from analysis.file_shapes import shape_problem
from loadgen.rundir import (
    CASE_FILE,
    CLOCK_OFFSETS_FILE,
    FAULTS_FILE,
    GATEWAY_EVENTS_FILE,
    GATEWAY_LOG,
    PHASES_FILE,
    PLAN_FILE,
    REQUESTS_FILE,
    RUN_FILE,
    case_dir,
    worker_request_files,
)
from metrics.samples import Sample
from metrics.store import RAW_FILE, SAMPLES_FILE, SCRAPES_FILE
from scenarios.plan import CaseSpec, Plan

#: Plan fields that older runs wrote and the plan no longer has (report-only settings).
_LEGACY_PLAN_FIELDS = ("probe_phases", "compare_phases")


class RunFileError(ValueError):
    """A file the reading cannot do without (``plan.json``) is missing, unreadable or does not
    validate; the message names the file and what is wrong with it."""


@dataclass(frozen=True)
class JsonlFile:
    """What a JSON-lines file held.

    Attributes:
        rows: the JSON objects of its readable, well-typed lines, in file order.
        exists: the file was there.
        torn_tail: its last line was cut short (no newline and not valid JSON): skipped.
        bad_lines: 1-based numbers of complete lines that are not JSON objects: skipped.
        mistyped: (line number, why) of JSON objects that are not well-typed rows of the
            file's kind (``analysis.file_shapes``): skipped.
        kind: the row kind the lines were checked against (``None``: any object).
    """

    rows: list[dict[str, Any]]
    exists: bool = True
    torn_tail: bool = False
    bad_lines: tuple[int, ...] = ()
    mistyped: tuple[tuple[int, str], ...] = ()
    kind: str | None = None

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


def read_jsonl(path: Path, kind: str | None = None) -> JsonlFile:
    """Read a JSON-lines file the tolerant way described in the module docstring; with
    ``kind`` (a key of ``analysis.file_shapes.SHAPES``) each object must be a well-typed row
    of it.

    A missing file gives an empty :class:`JsonlFile` with ``exists=False``.
    """
    if not path.exists():
        return JsonlFile([], exists=False, kind=kind)
    rows: list[dict[str, Any]] = []
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
            elif kind is not None and (why := shape_problem(kind, obj)) is not None:
                mistyped.append((lineno, why))
            else:
                rows.append(obj)
    return JsonlFile(rows, True, torn, tuple(bad), tuple(mistyped), kind)


@dataclass(frozen=True)
class JsonFile:
    """What a JSON file held: ``data`` (``{}`` when missing or unusable) and, when it was
    there but unusable, ``problem`` saying why."""

    data: dict[str, Any]
    exists: bool
    problem: str | None = None


def read_json_file(path: Path, kind: str | None = None) -> JsonFile:
    """Read a JSON object file; with ``kind`` (``run``, ``case``) it must be well typed.

    Never raises for a broken file: an empty, unreadable, non-object or mistyped file gives
    ``data == {}`` and a ``problem`` naming the file.
    """
    if not path.exists():
        return JsonFile({}, False)
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        return JsonFile({}, True, f"{path.name} cannot be read ({exc}); read as empty")
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as exc:
        why = "is empty" if not text.strip() else f"is not valid JSON ({exc})"
        return JsonFile({}, True, f"{path.name} {why}; read as empty")
    if not isinstance(obj, dict):
        return JsonFile({}, True, f"{path.name} holds a {type(obj).__name__}, not a JSON "
                        "object; read as empty")  # fmt: skip
    mistyped = shape_problem(kind, obj) if kind is not None else None
    if mistyped is not None:
        return JsonFile({}, True, f"{path.name} is not well typed ({mistyped}); read as empty")
    return JsonFile(obj, True)


#: Record fields holding one monotonic stamp (ns), and the one holding a list of them.
STAMP_FIELDS = ("scheduled_ns", "admitted_ns", "sent_ns", "connection_ready_ns",
                "request_sent_ns", "headers_ns", "end_ns", "disconnect_ns")  # fmt: skip
STAMP_LIST_FIELDS = ("chunk_ns",)


def shift_stamps(record: dict[str, Any], offset_ns: int) -> dict[str, Any]:
    """``record`` with every stamp moved from its worker's clock to the coordinator's
    (stamp − ``offset_ns``); ``None`` stamps stay ``None``."""
    if not offset_ns:
        return record
    out = dict(record)
    for key in STAMP_FIELDS:
        if out.get(key) is not None:
            out[key] = int(out[key]) - offset_ns
    for key in STAMP_LIST_FIELDS:
        if out.get(key):
            out[key] = [int(t) - offset_ns for t in out[key]]
    return out


def _finish_order(record: dict[str, Any]) -> int:
    for key in ("end_ns", "sent_ns", "scheduled_ns"):
        if record.get(key) is not None:
            return int(record[key])
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

    records: list[dict[str, Any]]
    files: dict[str, JsonlFile]
    offsets: list[dict[str, Any]]
    workers: int


def read_records(cdir: Path) -> RecordFiles:
    """The merged request records of case directory ``cdir`` (see the module docstring).

    A record of worker k in phase p is shifted by the offset measured for (p, k); a worker
    and phase without one is on the coordinator's clock already (same host).
    """
    offsets_file = read_jsonl(cdir / CLOCK_OFFSETS_FILE, "clock offset")
    offset = {(str(o["phase"]), int(o["worker"])): int(o["offset_ns"]) for o in offsets_file.rows}
    files: dict[str, JsonlFile] = {}
    records: list[dict[str, Any]] = []
    single = read_jsonl(cdir / REQUESTS_FILE, "record")
    if single.exists:
        files[REQUESTS_FILE] = single
        records += single.rows
    workers = worker_request_files(cdir)
    for worker, path in workers:
        part = read_jsonl(path, "record")
        files[path.name] = part
        for r in part.rows:
            shifted = shift_stamps(r, offset.get((str(r.get("phase")), worker), 0))
            records.append({**shifted, "worker": worker})
    if workers:
        records.sort(key=_finish_order)  # stable: each file's own order is kept on ties
    if offsets_file.exists:
        files[CLOCK_OFFSETS_FILE] = offsets_file
    return RecordFiles(records, files, offsets_file.rows, len(workers))


@dataclass(frozen=True)
class Transition:
    """A gateway breaker transition: ``t_ns`` on the run's monotonic clock."""

    t_ns: int
    upstream: str
    from_state: str
    to_state: str
    reason: str


@dataclass
class CaseData:
    """Raw data of one case, as written by the run.

    Attributes:
        name: case name; ``spec`` its plan entry (``None`` in hand-built test data).
        info: ``case.json`` (status, error, server facts).
        records: request records, merged over the case's record files (:func:`read_records`).
        phases: phase boundaries (``phases.jsonl``).
        samples: finite metric samples (``metrics/samples.jsonl``), in file order.
        scrapes: one entry per scrape tick (``metrics/scrapes.jsonl``); entries of runs that
            predate tick accounting get ``outcome`` from their ``ok`` field.
        faults: injected faults (``faults.jsonl``).
        transitions: gateway breaker transitions, from the gateway's events file.
        transitions_source: ``events``, ``log`` (a run that predates the events file: read
            from the gateway's log lines) or ``None`` (no gateway).
        nonfinite_samples: samples dropped because their value was not finite.
        duplicate_samples: samples dropped because their series (name, labels) was already
            read at the same scrape (runs from before the scraper dropped repeats).
        legacy_scrape_index: the run predates per-tick accounting (skipped ticks unlisted).
        file_problems: torn tails and unreadable lines, per file (for ``validate``/report).
        workers: load-generator workers whose record files were merged (0: one process).
        clock_offsets: the worker clock offsets applied (``clock_offsets.jsonl`` rows).
    """

    name: str
    info: dict[str, Any]
    records: list[dict[str, Any]]
    phases: list[dict[str, Any]]
    samples: list[Sample]
    scrapes: list[dict[str, Any]]
    faults: list[dict[str, Any]] = field(default_factory=list)
    transitions: list[Transition] = field(default_factory=list)
    transitions_source: str | None = None
    nonfinite_samples: int = 0
    duplicate_samples: int = 0
    file_problems: list[str] = field(default_factory=list)
    spec: CaseSpec | None = None
    legacy_scrape_index: bool = False
    workers: int = 0
    clock_offsets: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class RunData:
    """Raw data of a run: its plan, run facts and cases (in plan order); ``file_problems``
    says what was wrong with ``run.json`` (it then reads as empty)."""

    run_dir: Path
    plan: Plan
    run: dict[str, Any]
    cases: list[CaseData]
    file_problems: list[str] = field(default_factory=list)


def load_plan(run_dir: Path) -> Plan:
    """The run's plan (``plan.json``); fields older runs wrote that no longer exist are ignored.

    Raises:
        FileNotFoundError: no ``plan.json`` (not a run directory, or it failed before planning).
        RunFileError: ``plan.json`` is empty, not JSON, not an object or not a valid plan.
    """
    path = run_dir / PLAN_FILE
    if not path.exists():
        raise FileNotFoundError(f"{path} not found: not a run directory, or no plan was made")
    found = read_json_file(path)
    if found.problem is not None:
        why = found.problem.removeprefix(f"{PLAN_FILE} ").removesuffix("; read as empty")
        raise RunFileError(f"{path} {why}")
    data = dict(found.data)
    for key in _LEGACY_PLAN_FIELDS:
        data.pop(key, None)
    try:
        return Plan.model_validate(data)
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


def read_scrapes(case_dir: Path) -> list[dict[str, Any]]:
    """The scrape index of a case directory (``metrics/scrapes.jsonl``), one dict per tick."""
    return _scrapes(read_jsonl(case_dir / SCRAPES_FILE, "scrape").rows)


def iter_raw(case_dir: Path) -> Iterator[dict[str, Any]]:
    """The raw scrapes (``{"scrape", "t_ns", "text"}``) of ``metrics/raw.jsonl.gz``; a file cut
    short by a crash (gzip stream or last line) ends the iteration, like a torn JSONL tail."""
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
                    if isinstance(obj, dict):
                        yield obj
        except (EOFError, OSError, zlib.error):  # gzip.BadGzipFile is an OSError
            return


def _samples(path: Path) -> tuple[list[Sample], int, JsonlFile, int]:
    """(finite samples, non-finite dropped, the file, duplicates dropped). A series repeated
    at one scrape (older scrapers kept every line of a page that repeated it) is read once,
    its first line, as ``metrics.parse`` does now: summed, it would double a counter."""
    raw = read_jsonl(path, "sample")
    out: list[Sample] = []
    nonfinite = duplicates = 0
    seen: set[tuple[int, str, tuple[tuple[str, str], ...]]] = set()
    for d in raw.rows:
        labels = tuple(sorted((str(k), str(v)) for k, v in (d.get("labels") or {}).items()))
        key = (int(d["t_ns"]), str(d["name"]), labels)
        if key in seen:
            duplicates += 1
            continue
        seen.add(key)
        value = float(d["value"])
        if not math.isfinite(value):
            nonfinite += 1
            continue
        out.append(Sample(*key, value))
    return out, nonfinite, raw, duplicates


def _scrapes(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Scrape ticks with an ``outcome`` (older runs recorded only ``ok``)."""
    return [
        r if "outcome" in r else {**r, "outcome": "ok" if r.get("ok") else "failed"} for r in rows
    ]


_TRANSITION_LOG = re.compile(r"breaker (\S+): ([\w-]+) -> ([\w-]+) at ([\d.]+) s \((.*)\)")


def _transitions(cdir: Path, events: JsonlFile) -> tuple[list[Transition], str | None]:
    if events.exists:
        return [
            Transition(int(e["t_ns"]), str(e["upstream"]), str(e["from"]), str(e["to"]),
                       str(e.get("reason", "")))
            for e in events.rows
            if e.get("event") == "breaker_transition"
        ], "events"  # fmt: skip
    log = cdir / GATEWAY_LOG
    if not log.exists():
        return [], None
    # Runs written before the gateway had an events file: its log line is all there is.
    out = []
    for line in log.read_text(errors="replace").splitlines():
        m = _TRANSITION_LOG.search(line)
        if m:
            up, a, b, t, why = m.groups()
            out.append(Transition(int(float(t) * 1e9), up.rstrip(":"), a, b, why))
    return out, "log"


def rebuild_missing_phases(
    phases: list[dict[str, Any]], records: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    """``phases`` plus a row for every phase that has records but no row (module docstring):
    ``start_ns`` = first ``sent_ns``, ``last_end_ns`` = ``end_ns`` = last ``end_ns`` (the
    last chunk or the send where a record has no end), ``rebuilt_from_records`` true; rows in
    time order. A phase none of whose requests was sent has no window and gets no row.
    """
    have = {str(p.get("phase")) for p in phases}
    sent: dict[str, list[int]] = {}
    ends: dict[str, list[int]] = {}
    for r in records:
        name = str(r.get("phase"))
        if name in have or r.get("sent_ns") is None:
            continue
        sent.setdefault(name, []).append(int(r["sent_ns"]))
        end = r.get("end_ns") or max(r.get("chunk_ns") or [r["sent_ns"]])
        ends.setdefault(name, []).append(int(end))
    rebuilt = [
        {"phase": name, "start_ns": min(starts), "last_end_ns": max(ends[name]),
         "end_ns": max(ends[name]), "requests": len(starts), "rebuilt_from_records": True}
        for name, starts in sent.items()
    ]  # fmt: skip
    if not rebuilt:
        return phases
    return sorted([*phases, *rebuilt], key=lambda p: int(p["start_ns"]))


def load_case(run_dir: Path, spec: CaseSpec) -> CaseData:
    """Everything recorded for case ``spec`` (empty lists for files it never wrote)."""
    cdir = case_dir(run_dir, spec.name)
    info = read_json_file(cdir / CASE_FILE, "case")
    merged = read_records(cdir)
    files = {PHASES_FILE: read_jsonl(cdir / PHASES_FILE, "phase"),
             SCRAPES_FILE: read_jsonl(cdir / SCRAPES_FILE, "scrape")}  # fmt: skip
    files.update(merged.files)
    samples, nonfinite, samples_file, duplicates = _samples(cdir / SAMPLES_FILE)
    files[SAMPLES_FILE] = samples_file
    faults = read_jsonl(cdir / FAULTS_FILE, "fault")
    files[FAULTS_FILE] = faults
    events = read_jsonl(cdir / GATEWAY_EVENTS_FILE, "gateway event")
    files[GATEWAY_EVENTS_FILE] = events
    transitions, source = _transitions(cdir, events)
    problems = [info.problem] if info.problem else []
    problems += [p for rel, f in files.items() for p in f.problems(rel)]
    return CaseData(
        name=spec.name,
        info=info.data,
        records=merged.records,
        phases=rebuild_missing_phases(files[PHASES_FILE].rows, merged.records),
        samples=samples,
        scrapes=_scrapes(files[SCRAPES_FILE].rows),
        faults=faults.rows,
        transitions=transitions,
        transitions_source=source,
        nonfinite_samples=nonfinite,
        duplicate_samples=duplicates,
        file_problems=problems,
        spec=spec,
        legacy_scrape_index=any("outcome" not in r for r in files[SCRAPES_FILE].rows),
        workers=merged.workers,
        clock_offsets=merged.offsets,
    )


def load_run(run_dir: Path) -> RunData:
    """Load everything analysis needs from ``run_dir``; broken files other than the plan are
    read as far as they are good and reported (``file_problems`` of the run and its cases).

    Raises:
        FileNotFoundError: ``plan.json`` is missing (not a run directory, or it failed before
            planning).
        RunFileError: ``plan.json`` cannot be read or is not a valid plan.
    """
    plan = load_plan(run_dir)
    run = read_json_file(run_dir / RUN_FILE, "run")
    cases = [load_case(run_dir, spec) for spec in plan.cases]
    return RunData(run_dir, plan, run.data, cases, [run.problem] if run.problem else [])
