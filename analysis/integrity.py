"""The one integrity rule every reader of a run applies: ``report``, ``compare``, ``gate`` (its
compare step), ``export`` and ``validate`` all call :func:`check_run`, so what one calls broken
no other turns into figures (docs/run-integrity.md).

Problems (the run is broken; ``report`` and ``compare`` refuse it, ``validate`` calls it
invalid):

- a file the manifest lists is missing, or its size or sha256 changed; a file present that the
  manifest does not list (with ``rebuilding``: the report's own outputs are left out, as the
  report rewrites them);
- a file that is not what its name says: a JSON-lines file with a line cut short, a line that is
  not JSON or not a well-typed row of its file; a JSON file that is empty, corrupt, not an
  object or mistyped; a ``.gz`` file that is not a complete gzip stream of JSON lines;
  ``plan.json`` that is not a valid plan;
- records missing or added: a case or phase with fewer or more request records than its
  phase row says were sent (``PhaseRow.requests``; not for a row written when the phase was
  cut short, which gives the planned count), a case whose ``case.json`` says ``ok`` but a
  planned phase has no row (or it has no ``phases.jsonl``: a killed case's rows are rebuilt
  from its records), a case of a run whose status is ``ok`` that never started, a case
  that ran with no record file, a metrics file missing;
- records out of place: a record of another case, two records of one request (the same phase
  and index, or request id);
- impossible values: a record's stamps out of time order (sent ≤ headers ≤ chunks ≤ end), a
  record ending before it was sent, a status ok without a token, impossible token counts; a
  phase row whose window runs backwards or holds a non-finite number;
- scrape ticks not accounted for exactly once each; failure counts of ``case.json`` that differ
  from the records';
- records that cannot be true (``analysis.plausibility``, with or without a manifest): stamps
  outside their phase, requests not as planned, usage beyond the plan's limits or disagreeing
  with the streamed tokens, ``ok`` without HTTP 200; one problem per case and kind, with its
  count (``Integrity.implausible``), which ``report`` refuses to publish.

Attention (the run is valid, but it is not a clean, complete run and a script must be able to
tell: ``validate`` exits ``server.net.exit_codes.ValidateExit.ATTENTION``): the run's or a
case's status is not ``ok`` (failed, interrupted, still running), a case of such a run never
started, a phase is incomplete, a record has status
``interrupted``, the run was re-sealed explicitly (``loadgen report --reseal``).

Warnings (figures that need care; the report shows the same findings): the case summaries'
data quality (``analysis.summaries.data_quality``) and a version-0 scrape index.

A missing manifest is no problem here (a killed run has none, and ``report`` seals it when its
data is intact, recording a re-seal that says so: ``loadgen.runformat.manifest.unverified_seal``);
``validate`` calls it one, ``compare`` calls the run incomplete.
"""

from __future__ import annotations

import itertools
import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from analysis import plausibility
from analysis.load import RunData, load_case, load_run
from analysis.summaries import case_summary, incomplete_reason
from loadgen.runformat import (
    CaseInfo,
    NotARunError,
    PhaseRow,
    RequestRecord,
    Reseal,
    RunFileError,
    RunInfo,
    UnplannedRunError,
    open_run,
    read_plan,
)
from loadgen.runformat.layout import (
    CASE_FILE,
    MANIFEST_FILE,
    PHASES_FILE,
    PLAN_FILE,
    PLOTS_DIR,
    REPORT_HTML,
    REPORT_JSON,
    REPORT_MD,
    REQUESTS_FILE,
    RUN_FILE,
    SAMPLES_FILE,
    SCRAPES_FILE,
    case_dir,
    worker_request_files,
)
from loadgen.runformat.manifest import read_reseals, verify_manifest
from loadgen.runformat.metric_files import gzip_jsonl_problem
from loadgen.runformat.reading import read_json_file
from metrics.ticks import tick_problems
from scenarios.plan import CaseSpec, Plan

#: Files ``loadgen report`` writes itself: a rebuild may replace them (``rebuilding``).
REPORT_OUTPUTS = (REPORT_MD, REPORT_JSON, REPORT_HTML, f"{PLOTS_DIR}/")


class IntegrityError(ValueError):
    """A run broken by the integrity rule (:func:`check_run`): the message is one line, the
    first problem and how many there are; ``problems`` lists them all, ``implausible`` those
    that are records that cannot be true (one line per case and kind, with its count)."""

    def __init__(
        self, run_dir: Path, problems: list[str], implausible: list[str] | None = None
    ) -> None:
        more = f" (and {len(problems) - 1} more problem(s))" if len(problems) > 1 else ""
        first = problems[0].splitlines()[0] if problems else "broken"
        super().__init__(
            f"{run_dir} is broken: {first}{more}; `loadgen validate {run_dir}` lists them"
        )
        self.problems = problems
        self.implausible = [p for p in implausible or [] if p in problems]


@dataclass
class Integrity:
    """What :func:`check_run` found (module docstring).

    Attributes:
        problems: why the run is broken (empty: intact).
        attention: why an intact run is not a clean, complete one.
        warnings: figures that need care.
        implausible: the problems that are records that cannot be true
            (``analysis.plausibility``), one line per case and kind with its count.
        facts: per case: its status, request and failure counts (workers when split).
        sealed: the run has a manifest.
        unplanned: the run ended before its plan was made
            (``loadgen.runformat.opening.unplanned_reason``): it has no plan, cases or
            report, and needs none.
        reseals: its explicit re-seals (``manifest.json``'s ``resealed``), oldest first.
    """

    problems: list[str] = field(default_factory=list)
    implausible: list[str] = field(default_factory=list)
    attention: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    facts: dict[str, object] = field(default_factory=dict)
    sealed: bool = False
    reseals: list[Reseal] = field(default_factory=list)
    unplanned: bool = False

    @property
    def ok(self) -> bool:
        return not self.problems

    def raise_if_broken(self, run_dir: Path) -> None:
        """Raises:
        IntegrityError: when there is a problem."""
        if self.problems:
            raise IntegrityError(run_dir, self.problems, self.implausible)


def reseal_line(reseal: Reseal) -> str:
    """How a re-seal is shown (report, validate): ``resealed at T: REASON``."""
    return f"resealed at {reseal.at}: {reseal.reason}"


def manifest_changes(run_dir: Path, rebuilding: bool) -> list[str]:
    """What differs from the manifest (``verify_manifest``); empty without a manifest. With
    ``rebuilding`` the report's own outputs are left out."""
    if not (run_dir / MANIFEST_FILE).exists():
        return []
    found = verify_manifest(run_dir)
    return [p for p in found if not (rebuilding and p.startswith(REPORT_OUTPUTS))]


def check_record(rec: RequestRecord, where: str) -> list[str]:
    """The impossible values of one record (module docstring), each prefixed with ``where``."""
    problems = []
    chunks = rec.chunk_ns
    tokens = rec.chunk_tokens
    if len(chunks) != len(tokens):
        problems.append(f"{where}: chunk_ns and chunk_tokens differ in length")
    sent = rec.sent_ns
    if sent is not None:
        stamps = [sent, *([rec.headers_ns] if rec.headers_ns is not None else []), *chunks]
        if any(b < a for a, b in itertools.pairwise(stamps)):
            problems.append(f"{where}: timestamps not in order")
    end = rec.end_ns
    if sent is not None and end is not None and end < sent:
        problems.append(f"{where}: ends before it was sent")
    elif chunks and end is not None and end < chunks[-1]:
        problems.append(f"{where}: ends before its last token arrived")
    if rec.status == "ok" and not chunks:
        problems.append(f"{where}: status ok but no token arrived")
    if any(t <= 0 for t in tokens):
        problems.append(f"{where}: a chunk with no token was recorded as token-carrying")
    prompt = rec.prompt_tokens_sent
    cached = rec.cached_tokens
    if cached is not None and not 0 <= cached <= prompt:
        problems.append(f"{where}: cached_tokens {cached} outside 0..{prompt} prompt tokens")
    for key in ("usage_prompt_tokens", "usage_completion_tokens"):
        value = getattr(rec, key)
        if value is not None and value < 0:
            problems.append(f"{where}: {key} is negative ({value})")
    return problems


_PHASE_FLOATS = ("settle_s", "loop_lag_max_ms", "loop_lag_p99_ms", "warmup_ms",
                 "post_scrape_waited_s")  # fmt: skip


def check_phase_row(row: PhaseRow, records: int, where: str) -> list[str]:
    """Problems of one phase row given the ``records`` its phase has (module docstring)."""
    problems = []
    if not row.start_ns <= row.last_end_ns <= row.end_ns:
        problems.append(f"{where}: phase window out of order (start_ns {row.start_ns}, "
                        f"last_end_ns {row.last_end_ns}, end_ns {row.end_ns})")  # fmt: skip
    for key in _PHASE_FLOATS:
        value = getattr(row, key)
        if value is not None and not math.isfinite(value):
            problems.append(f"{where}: {key} is not finite ({value})")
    # A cut-short row (``interrupted``) gives the phase's planned count, sent or not; a
    # rebuilt one counts the records themselves: neither says how many were sent.
    counted = row.requests is not None and not (row.interrupted or row.rebuilt_from_records)
    if counted and row.requests is not None and records != row.requests:
        # Every request sent has exactly one record: fewer lost some, more were added.
        problems.append(f"{where}: {records} request record(s), but its phase row says "
                        f"{row.requests} were sent")  # fmt: skip
    return problems


def record_identity_problems(records: Sequence[RequestRecord], case: str) -> list[str]:
    """Records that are not where they belong: a record of another case in ``case``'s file,
    or two records of one request (the same phase and index, or the same request id)."""
    problems = []
    foreign = Counter(r.case for r in records if r.case != case)
    for other, n in sorted(foreign.items()):
        problems.append(f"{case}: {n} record(s) of case {other!r} in its {REQUESTS_FILE}")
    for what, keys in (
        ("phase and index", [(r.phase, r.index) for r in records]),
        ("request id", [r.request_id for r in records]),
    ):
        repeated = [k for k, n in Counter(keys).items() if n > 1]
        if repeated:
            problems.append(f"{case}: {len(repeated)} request(s) recorded more than once "
                            f"(same {what}, e.g. {repeated[0]})")  # fmt: skip
    return problems


def check_run(run_dir: Path, rebuilding: bool = False) -> Integrity:
    """The integrity of ``run_dir`` (module docstring); never raises for a broken run.

    Args:
        rebuilding: the caller is about to rewrite the report's outputs (``loadgen report``),
            so their manifest differences are not problems.

    Raises:
        FormatVersionError: the run's format version is neither this one nor 0.
    """
    result = Integrity(sealed=(run_dir / MANIFEST_FILE).exists(), reseals=read_reseals(run_dir))
    result.problems += manifest_changes(run_dir, rebuilding)
    result.attention += [reseal_line(r) for r in result.reseals]
    try:
        open_run(run_dir)  # the one check every reader makes (its version error propagates)
    except UnplannedRunError as exc:
        result.unplanned = True
        result.attention.append(exc.reason)
        return result
    except NotARunError:
        result.problems += [f"{name} missing" for name in (RUN_FILE, PLAN_FILE)
                            if not (run_dir / name).exists()]  # fmt: skip
        return result
    if not (run_dir / RUN_FILE).exists():
        result.problems.append(f"{RUN_FILE} missing")
    try:
        plan = read_plan(run_dir)
    except RunFileError as exc:
        result.problems.append(str(exc))
        return result
    run = read_json_file(run_dir / RUN_FILE, RunInfo)
    if run.problem:
        result.problems.append(run.problem)
    elif run.exists and run.data.status != "ok":
        why = f": {run.data.error}" if run.data.error else ""
        result.attention.append(f"run status {run.data.status or 'unknown'}{why}")
    for spec in plan.cases:
        _check_case_files(result, run_dir, spec, plan, run.data.status == "ok")
    return result


def load_intact_run(run_dir: Path) -> RunData:
    """``analysis.load.load_run`` of a run the rule finds intact (a missing manifest allowed,
    as for a killed run's report): what every reader that turns records into figures calls.

    Raises:
        IntegrityError: the run is broken.
        UnreadableRun, RunFileError: as ``load_run``.
    """
    check_run(run_dir).raise_if_broken(run_dir)
    return load_run(run_dir)


def _check_case_files(
    result: Integrity, run_dir: Path, spec: CaseSpec, plan: Plan, run_ok: bool
) -> None:
    cdir = case_dir(run_dir, spec.name)
    if not (cdir / CASE_FILE).exists():
        # A run that failed or was stopped early never started its later cases.
        found = result.problems if run_ok else result.attention
        found.append(f"{spec.name}: {CASE_FILE} missing (case never started)")
        return
    info = read_json_file(cdir / CASE_FILE, CaseInfo).data  # broken: load_case says so
    if info.status != "ok":
        why = f": {info.error}" if info.error else ""
        result.attention.append(f"{spec.name}: case status {info.status or 'unknown'}{why}")
    has_records = (cdir / REQUESTS_FILE).exists() or bool(worker_request_files(cdir))
    # A case that failed, or was interrupted before its first phase began, sent nothing.
    stopped_before_load = info.status == "interrupted" and not (cdir / PHASES_FILE).exists()
    if not has_records and (info.status == "failed" or stopped_before_load):
        result.facts[spec.name] = {"status": info.status, "error": info.error}
        return
    if not has_records:
        result.problems.append(
            f"{spec.name}: {REQUESTS_FILE} missing (and no per-worker record files)"
        )
    # A load generator killed during its first phase wrote no phases.jsonl at all: like a
    # missing row, each phase is rebuilt from its records (``analysis.load``) and flagged
    # incomplete. Only a case that says it ended ``ok`` must have one.
    needed = (PHASES_FILE, SAMPLES_FILE, SCRAPES_FILE) if info.status == "ok" else (
        SAMPLES_FILE, SCRAPES_FILE)  # fmt: skip
    for rel in needed:
        if not (cdir / rel).exists():
            result.problems.append(f"{spec.name}: {rel} missing")
    for gz in sorted(cdir.rglob("*.gz")):
        problem = gzip_jsonl_problem(gz)
        if problem:
            result.problems.append(f"{spec.name}: {gz.relative_to(cdir).as_posix()} {problem}")
    try:
        _check_case(result, run_dir, spec, plan, info)
    except Exception as exc:  # a run this broken is a finding, never a crash of the check
        result.problems.append(f"{spec.name}: cannot be summarised ({type(exc).__name__}: {exc})")


def _check_case(
    result: Integrity, run_dir: Path, spec: CaseSpec, plan: Plan, info: CaseInfo
) -> None:
    """The record, phase, tick and count checks of one case that ran, added to ``result``."""
    case = load_case(run_dir, spec)
    result.problems += [f"{spec.name}: {p}" for p in case.file_problems]
    if case.scrape_index_without_ticks:
        result.warnings.append(
            f"{spec.name}: the scrape index predates per-tick accounting (ticks skipped "
            "while a scrape ran are not listed)"
        )
    else:
        result.problems += [f"{spec.name}: {p}" for p in tick_problems(case.scrapes)]
    for rec in case.records:
        result.problems += check_record(rec, f"{spec.name}/{rec.request_id}")
    result.problems += record_identity_problems(case.records, spec.name)
    implausible = plausibility.case_problems(case, plan)
    result.problems += implausible
    result.implausible += implausible
    per_phase = Counter(r.phase for r in case.records)
    for row in case.phases:
        where = f"{spec.name}/{row.phase}"
        result.problems += check_phase_row(row, per_phase[row.phase], where)
        reason = incomplete_reason(row)
        if reason:
            result.attention.append(f"{where}: phase incomplete: {reason}")
    planned = [p.name for p in plan.phases_of(spec)]
    if info.status == "ok":
        rows = {row.phase for row in case.phases}
        for name in (n for n in planned if n not in rows):
            result.problems.append(
                f"{spec.name}/{name}: case.json says ok, but the phase has no row in {PHASES_FILE}"
            )
    interrupted = sum(1 for r in case.records if str(r.status) == "interrupted")
    if interrupted:
        result.attention.append(f"{spec.name}: {interrupted} request(s) interrupted")
    summary = case_summary(case, spec.label, planned)
    result.warnings += [f"{spec.name}: {w}" for w in summary.data_quality
                        if w not in case.file_problems]  # fmt: skip
    failed = summary.requests_failed
    if info.failed_requests is not None and info.failed_requests != failed:
        result.problems.append(
            f"{spec.name}: case.json says {info.failed_requests} failed, records say {failed}"
        )
    result.facts[spec.name] = {
        "status": info.status,
        "requests": len(case.records),
        "failed": failed,
        **({"workers": case.workers} if case.workers else {}),
    }
