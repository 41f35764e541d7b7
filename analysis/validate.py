"""``loadgen validate RUN``: is a run directory complete, unaltered and internally consistent?

Problems (the run is invalid): the manifest is missing or a file's size or sha256 differs; a
file a case needs is missing; scrape ticks are not accounted for exactly once each; a record's
stamps are out of order or its values impossible; failure counts disagree between the
records, ``case.json`` and ``report.json``; a JSON-lines file has a line cut short by a crash,
a corrupt line or a line that is not a well-typed row of its file (``loadgen.runformat``); a
JSON file is empty, corrupt, not an object or mistyped; ``plan.json`` is not a valid plan;
``report.json`` holds a non-finite value. Validation never raises for a broken run.

Warnings (the run is valid, but some figures need care; the report shows the same findings):
every finding of the case summaries' data quality (``analysis.summaries.data_quality``):
non-finite or repeated metric samples that were dropped, phases without a scrape in their
window or whose counter deltas rest on a scrape older than their last request (or start on one
older than an earlier phase's), malformed server histograms, requests whose tokens all arrived
in one chunk, counter resets; and a scrape index from before per-tick accounting (a
version-0 run, read through its migration).

A run whose format version is neither this one nor 0 is not validated: ``validate_run`` raises
``FormatVersionError`` (the command says so in one line).
"""

from __future__ import annotations

import itertools
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from analysis.load import RunFileError, load_case, load_plan, read_json_file, read_json_object
from analysis.summaries import case_summary
from loadgen.runformat import CaseInfo, RequestRecord, RunInfo, run_format_version
from loadgen.runformat.layout import (
    CASE_FILE,
    PHASES_FILE,
    PLAN_FILE,
    REPORT_JSON,
    REQUESTS_FILE,
    RUN_FILE,
    SAMPLES_FILE,
    SCRAPES_FILE,
    case_dir,
    worker_request_files,
)
from loadgen.runformat.manifest import verify_manifest
from metrics.ticks import tick_problems
from scenarios.plan import CaseSpec, Plan


@dataclass
class ValidationResult:
    """Problems (empty = valid), warnings, and facts gathered on the way (counts per case)."""

    problems: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    facts: dict[str, object] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not self.problems


def _check_record(rec: RequestRecord, where: str) -> list[str]:
    problems = []
    chunks = rec.chunk_ns
    tokens = rec.chunk_tokens
    if len(chunks) != len(tokens):
        problems.append(f"{where}: chunk_ns and chunk_tokens differ in length")
    sent = rec.sent_ns
    if chunks and sent is not None:
        stamps = [sent, *chunks]
        if any(b < a for a, b in itertools.pairwise(stamps)):
            problems.append(f"{where}: timestamps not in order")
    if rec.status == "ok" and not chunks:
        problems.append(f"{where}: status ok but no token arrived")
    end = rec.end_ns
    if sent is not None and end is not None and end < sent:
        problems.append(f"{where}: ends before it was sent")
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


def validate_run(run_dir: Path) -> ValidationResult:
    """Validate ``run_dir``; never raises for a broken run (it reports problems instead).

    Raises:
        FormatVersionError: the run's format version is neither this one nor 0.
    """
    version = run_format_version(run_dir)
    result = ValidationResult()
    result.problems += verify_manifest(run_dir)
    for name in (RUN_FILE, PLAN_FILE, REPORT_JSON):
        if not (run_dir / name).exists():
            result.problems.append(f"{name} missing")
    if not (run_dir / PLAN_FILE).exists():
        return result
    try:
        plan = load_plan(run_dir)
    except RunFileError as exc:
        result.problems.append(str(exc))
        return result
    run_problem = read_json_file(run_dir / RUN_FILE, RunInfo).problem
    report, _, report_problem = read_json_object(run_dir / REPORT_JSON)
    result.problems += [p for p in (run_problem, report_problem) if p]
    report = report or {}
    for spec in plan.cases:
        cdir = case_dir(run_dir, spec.name)
        if not (cdir / CASE_FILE).exists():
            result.problems.append(f"{spec.name}: {CASE_FILE} missing (case never started)")
            continue
        info = read_json_file(cdir / CASE_FILE, CaseInfo).data  # broken: load_case says so
        has_records = (cdir / REQUESTS_FILE).exists() or bool(worker_request_files(cdir))
        if info.status == "failed" and not has_records:
            result.facts[spec.name] = {"status": "failed", "error": info.error}
            continue
        if not has_records:
            result.problems.append(
                f"{spec.name}: {REQUESTS_FILE} missing (and no per-worker record files)"
            )
        for rel in (PHASES_FILE, SAMPLES_FILE, SCRAPES_FILE):
            if not (cdir / rel).exists():
                result.problems.append(f"{spec.name}: {rel} missing")
        try:
            _validate_case(result, run_dir, spec, plan, info, report, version)
        except Exception as exc:  # a run this broken is a finding, never a crash of validate
            result.problems.append(
                f"{spec.name}: cannot be summarised ({type(exc).__name__}: {exc})"
            )
    if (run_dir / REPORT_JSON).exists() and report_problem is None:
        text = (run_dir / REPORT_JSON).read_text()
        try:
            json.loads(text, parse_constant=lambda c: (_ for _ in ()).throw(ValueError(c)))
        except ValueError as exc:
            result.problems.append(f"{REPORT_JSON}: non-finite value ({exc})")
    return result


def _validate_case(
    result: ValidationResult,
    run_dir: Path,
    spec: CaseSpec,
    plan: Plan,
    info: CaseInfo,
    report: dict[str, Any],
    version: int,
) -> None:
    """The checks of one case that ran (module docstring), added to ``result``."""
    case = load_case(run_dir, spec, version)
    result.problems += [f"{spec.name}: {p}" for p in case.file_problems]
    if case.scrape_index_without_ticks:
        result.warnings.append(
            f"{spec.name}: the scrape index predates per-tick accounting (ticks skipped "
            "while a scrape ran are not listed)"
        )
    else:
        result.problems += [f"{spec.name}: {p}" for p in tick_problems(case.scrapes)]
    for rec in case.records:
        result.problems += _check_record(rec, f"{spec.name}/{rec.request_id}")
    summary = case_summary(case, spec.label, [p.name for p in plan.phases_of(spec)])
    result.warnings += [f"{spec.name}: {w}" for w in summary.data_quality
                        if w not in case.file_problems]  # fmt: skip
    failed = summary.requests_failed
    if info.failed_requests is not None and info.failed_requests != failed:
        result.problems.append(
            f"{spec.name}: case.json says {info.failed_requests} failed, records say {failed}"
        )
    cases = report.get("cases")
    entry = cases.get(spec.name) if isinstance(cases, dict) else None
    reported = entry.get("requests_failed") if isinstance(entry, dict) else None
    if reported is not None and reported != failed:
        result.problems.append(f"{spec.name}: report says {reported} failed, records say {failed}")
    result.facts[spec.name] = {
        "status": info.status,
        "requests": len(case.records),
        "failed": failed,
        **({"workers": case.workers} if case.workers else {}),
    }
