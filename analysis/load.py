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
is not a JSON object is skipped and reported by line number; everything else is kept. Metric
samples whose value is not finite (``NaN`` from older runs) are dropped and counted, so no
statistic ever sees them.
"""

from __future__ import annotations

import gzip
import json
import math
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

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
    read_json,
    worker_request_files,
)
from metrics.samples import Sample
from metrics.store import RAW_FILE, SAMPLES_FILE, SCRAPES_FILE
from scenarios.plan import CaseSpec, Plan

#: Plan fields that older runs wrote and the plan no longer has (report-only settings).
_LEGACY_PLAN_FIELDS = ("probe_phases", "compare_phases")


@dataclass(frozen=True)
class JsonlFile:
    """What a JSON-lines file held.

    Attributes:
        rows: the JSON objects of its readable lines, in file order.
        exists: the file was there.
        torn_tail: its last line was cut short (no newline and not valid JSON): skipped.
        bad_lines: 1-based numbers of complete lines that are not JSON objects: skipped.
    """

    rows: list[dict[str, Any]]
    exists: bool = True
    torn_tail: bool = False
    bad_lines: tuple[int, ...] = ()

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
        return out


def read_jsonl(path: Path) -> JsonlFile:
    """Read a JSON-lines file the tolerant way described in the module docstring.

    A missing file gives an empty :class:`JsonlFile` with ``exists=False``.
    """
    if not path.exists():
        return JsonlFile([], exists=False)
    rows: list[dict[str, Any]] = []
    bad: list[int] = []
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
            if isinstance(obj, dict):
                rows.append(obj)
            else:
                bad.append(lineno)
    return JsonlFile(rows, True, torn, tuple(bad))


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
    offsets_file = read_jsonl(cdir / CLOCK_OFFSETS_FILE)
    offset = {(str(o["phase"]), int(o["worker"])): int(o["offset_ns"]) for o in offsets_file.rows}
    files: dict[str, JsonlFile] = {}
    records: list[dict[str, Any]] = []
    single = read_jsonl(cdir / REQUESTS_FILE)
    if single.exists:
        files[REQUESTS_FILE] = single
        records += single.rows
    workers = worker_request_files(cdir)
    for worker, path in workers:
        part = read_jsonl(path)
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
    file_problems: list[str] = field(default_factory=list)
    spec: CaseSpec | None = None
    legacy_scrape_index: bool = False
    workers: int = 0
    clock_offsets: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class RunData:
    """Raw data of a run: its plan, run facts and cases (in plan order)."""

    run_dir: Path
    plan: Plan
    run: dict[str, Any]
    cases: list[CaseData]


def load_plan(run_dir: Path) -> Plan:
    """The run's plan (``plan.json``); fields older runs wrote that no longer exist are ignored.

    Raises:
        FileNotFoundError: no ``plan.json`` (not a run directory, or it failed before planning).
        pydantic.ValidationError: the plan does not validate.
    """
    path = run_dir / PLAN_FILE
    if not path.exists():
        raise FileNotFoundError(f"{path} not found: not a run directory, or no plan was made")
    data = read_json(path)
    for key in _LEGACY_PLAN_FIELDS:
        data.pop(key, None)
    return Plan.model_validate(data)


def read_samples(case_dir: Path) -> list[Sample]:
    """The finite metric samples of a case directory (``metrics/samples.jsonl``), in order."""
    return _samples(case_dir / SAMPLES_FILE)[0]


def read_scrapes(case_dir: Path) -> list[dict[str, Any]]:
    """The scrape index of a case directory (``metrics/scrapes.jsonl``), one dict per tick."""
    return _scrapes(read_jsonl(case_dir / SCRAPES_FILE).rows)


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
                        yield json.loads(line)
                    except json.JSONDecodeError:
                        return  # only the cut-short last line can fail to parse
        except (EOFError, gzip.BadGzipFile):
            return


def _samples(path: Path) -> tuple[list[Sample], int, JsonlFile]:
    raw = read_jsonl(path)
    out: list[Sample] = []
    nonfinite = 0
    for d in raw.rows:
        value = float(d["value"])
        if not math.isfinite(value):
            nonfinite += 1
            continue
        labels = tuple(sorted((str(k), str(v)) for k, v in (d.get("labels") or {}).items()))
        out.append(Sample(int(d["t_ns"]), str(d["name"]), labels, value))
    return out, nonfinite, raw


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


def load_case(run_dir: Path, spec: CaseSpec) -> CaseData:
    """Everything recorded for case ``spec`` (empty lists for files it never wrote)."""
    cdir = case_dir(run_dir, spec.name)
    info = read_json(cdir / CASE_FILE) if (cdir / CASE_FILE).exists() else {}
    merged = read_records(cdir)
    files = {rel: read_jsonl(cdir / rel) for rel in (PHASES_FILE, SCRAPES_FILE)}
    files.update(merged.files)
    samples, nonfinite, samples_file = _samples(cdir / SAMPLES_FILE)
    files[SAMPLES_FILE] = samples_file
    faults = read_jsonl(cdir / FAULTS_FILE)
    files[FAULTS_FILE] = faults
    events = read_jsonl(cdir / GATEWAY_EVENTS_FILE)
    files[GATEWAY_EVENTS_FILE] = events
    transitions, source = _transitions(cdir, events)
    problems = [p for rel, f in files.items() for p in f.problems(rel)]
    return CaseData(
        name=spec.name,
        info=info,
        records=merged.records,
        phases=files[PHASES_FILE].rows,
        samples=samples,
        scrapes=_scrapes(files[SCRAPES_FILE].rows),
        faults=faults.rows,
        transitions=transitions,
        transitions_source=source,
        nonfinite_samples=nonfinite,
        file_problems=problems,
        spec=spec,
        legacy_scrape_index=any("outcome" not in r for r in files[SCRAPES_FILE].rows),
        workers=merged.workers,
        clock_offsets=merged.offsets,
    )


def load_run(run_dir: Path) -> RunData:
    """Load everything analysis needs from ``run_dir``.

    Raises:
        FileNotFoundError: ``plan.json`` is missing (not a run directory, or it failed before
            planning).
    """
    plan = load_plan(run_dir)
    run = read_json(run_dir / RUN_FILE) if (run_dir / RUN_FILE).exists() else {}
    return RunData(run_dir, plan, run, [load_case(run_dir, spec) for spec in plan.cases])
