"""The sides of ``loadgen compare``: their run directories, each run loaded and summarised
(:class:`RunView`), why a run is incomplete, and the workload hash that says two runs sent the
same thing (see :mod:`analysis.compare`).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from analysis.compare_models import CompareError, SideInfo
from analysis.integrity import IntegrityError, check_run
from analysis.load import load_run
from analysis.models import CaseSummary
from analysis.report import summarize_run
from loadgen.runformat import (
    ReadRecord,
    Reseal,
    RunFileError,
    RunInfo,
    UnreadableRun,
    open_run,
)
from loadgen.runformat.layout import MANIFEST_FILE, PLAN_FILE, RUN_FILE
from loadgen.runformat.manifest import UNVERIFIED_SEAL_REASON
from scenarios.plan import Plan


def workload_hash(plan: Plan) -> str:
    """sha256 (hex) of what a plan sends (module docstring); equal for the same workload."""
    payload = {
        "scenario": plan.scenario,
        "seed": plan.seed,
        "tokens": plan.tokens.model_dump(mode="json"),
        "cases": [
            {
                "role": case.role,
                "phases": [p.model_dump(mode="json") for p in plan.phases_of(case)],
            }
            for case in plan.cases
        ],
    }
    text = json.dumps(payload, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


@dataclass
class RunView:
    """One run of a side: its plan, summaries, verdicts and request records per case, and why
    it is incomplete (empty when it completed)."""

    run_dir: Path
    plan: Plan
    started_at: str | None
    cases: dict[str, CaseSummary]
    records: dict[str, list[ReadRecord]]
    verdicts: dict[tuple[str, str], bool | None]
    incomplete: list[str] = field(default_factory=list)
    #: Goodput (req/s) per (case, phase) as the scenario's report computes it (empty when
    #: the scenario has no SLOs): ``ScenarioReport.phase_goodput``.
    goodput: dict[tuple[str, str], float | None] = field(default_factory=dict)
    #: ``phase`` when a gate ran this run phase by phase beside the other side's run of its
    #: pair (``run.json``'s ``interleaved``), ``run`` otherwise.
    blocks: str = "run"


def _is_run(path: Path) -> bool:
    return (path / PLAN_FILE).exists() or (path / RUN_FILE).exists()


def run_dirs(path: Path) -> list[Path]:
    """The run directories of a side: ``path`` itself when it is a run (it has ``plan.json``
    or ``run.json``), or its subdirectories that are; each passes the one check every reader
    makes (``loadgen.runformat.open_run``).

    Raises:
        CompareError: neither, or a run that check refuses (another format version, a run
            that ended before its plan was made).
    """
    if _is_run(path):
        found = [path]
    else:
        found = sorted(p for p in path.iterdir() if _is_run(p)) if path.is_dir() else []
    if not found:
        raise CompareError(f"{path} is not a run directory and holds none ({PLAN_FILE} missing)")
    for run_dir in found:
        try:
            open_run(run_dir)
        except UnreadableRun as exc:
            raise CompareError(str(exc)) from None
    return found


def check_distinct(baseline: Sequence[Path], candidate: Sequence[Path]) -> None:
    """Refuse a run directory that appears twice among both sides' runs (:func:`run_dirs`),
    compared after resolving the paths (``..``, symbolic links): a run compared with itself
    decides nothing, and one counted twice within a side counts as two runs it is not.

    Raises:
        CompareError: the first run found twice, naming both places and its real path.
    """
    seen: dict[Path, tuple[str, Path]] = {}
    for side, runs in (("baseline", baseline), ("candidate", candidate)):
        for run in runs:
            real = run.resolve()
            if real not in seen:
                seen[real] = (side, run)
                continue
            first_side, first = seen[real]
            alias = "" if first == run else f" ({first} and {run} are both {real})"
            if first_side != side:
                raise CompareError(f"{run} is given as both baseline and candidate{alias}: a "
                                   "run compared with itself decides nothing")  # fmt: skip
            raise CompareError(f"{first} and {run} are the same run ({real}) on the {side} "
                               "side: each run may count once")  # fmt: skip


def distinct_sides(baseline: Path, candidate: Path) -> None:
    """Refuse sides (each a run, or a directory of runs) that share a run
    (:func:`check_distinct`).

    Raises:
        CompareError: a side holds no run, a run that cannot be read, or one run twice.
    """
    check_distinct(run_dirs(baseline), run_dirs(candidate))


def incompleteness(
    run_dir: Path,
    run: RunInfo,
    cases: Mapping[str, CaseSummary],
    reseals: Sequence[Reseal] = (),
) -> list[str]:
    """Why a run did not complete (module docstring); empty when it did. ``reseals``: the
    run's re-seals; one made because it had no manifest (``UNVERIFIED_SEAL_REASON``) leaves
    its raw files unverifiable, so it counts as incomplete as a missing manifest does."""
    out = []
    if run.status != "ok":
        out.append(f"run status {run.status or 'unknown'}")
    if not (run_dir / MANIFEST_FILE).exists():
        out.append(f"no {MANIFEST_FILE} (the run was not sealed)")
    out += [f"{UNVERIFIED_SEAL_REASON} (at {r.at})" for r in reseals
            if r.reason == UNVERIFIED_SEAL_REASON]  # fmt: skip
    for name, case in cases.items():
        if case.status != "ok":
            out.append(f"case {name} status {case.status}")
        out += [f"case {name} phase {p} incomplete" for p, s in case.phases.items() if s.incomplete]
    return out


def load_view(run_dir: Path) -> RunView:
    """Load and summarise one run (``analysis.report.summarize_run``).

    Raises:
        CompareError: its plan is unreadable or invalid, it is broken by the integrity rule
            every reader applies (``analysis.integrity``), or its format version is neither
            this one nor 0.
    """
    try:
        integrity = check_run(run_dir)
        integrity.raise_if_broken(run_dir)
        data = load_run(run_dir)
    except (RunFileError, UnreadableRun, IntegrityError) as exc:
        raise CompareError(str(exc)) from None
    report = summarize_run(data, integrity.reseals)
    return RunView(
        run_dir=run_dir,
        plan=data.plan,
        started_at=data.run.started_at,
        cases=report.summary.cases,
        records={c.name: c.records for c in data.cases},
        verdicts={(v.case, v.check): v.passed for v in report.summary.verdicts},
        incomplete=incompleteness(run_dir, data.run, report.summary.cases, integrity.reseals),
        goodput=report.parts.phase_goodput(report.details),
        blocks=str((data.run.interleaved or {}).get("blocks", "run")),
    )


def incomplete_runs(views: Sequence[RunView], label: str) -> list[str]:
    """One line per incomplete run of a side labelled ``label``: the run and why."""
    return [f"{label} run {v.run_dir} ({'; '.join(v.incomplete)})" for v in views if v.incomplete]


def side_info(label: str, views: Sequence[RunView]) -> SideInfo:
    """The :class:`SideInfo` of a side's runs.

    Raises:
        CompareError: the runs differ in workload among themselves.
    """
    hashes = {workload_hash(v.plan) for v in views}
    if len(hashes) > 1:
        raise CompareError(
            f"the {label} runs differ in workload among themselves: "
            + ", ".join(f"{v.run_dir} ({workload_hash(v.plan)[:12]})" for v in views)
        )
    versions = sorted(
        {str(c.server.get("version") or "unknown") for v in views for c in v.cases.values()}
    )
    return SideInfo(
        label=label,
        runs=[str(v.run_dir) for v in views],
        vllm_versions=versions,
        workload_hash=hashes.pop(),
        started_at=[v.started_at for v in views],
    )
