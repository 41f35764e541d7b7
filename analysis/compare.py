"""``loadgen compare``: a baseline and a candidate side, each one run or several pooled, compared
per case, phase and metric, each metric classified (statistics: ``analysis.compare_stats``;
metrics: ``analysis.compare_metrics``; tolerances: ``analysis.gate_file``).

A side is a run directory, or a directory whose subdirectories are run directories (the
repeats of ``loadgen gate``), pooled. Sides are comparable when their plans have the same
**workload hash**: sha256 of the scenario, seed, token space and, per case in plan order, its
role and phases (workload, arrival, settle, faults) — everything that decides what is sent,
nothing about the server (vLLM version, cache size, flags), which is what a gate varies.
Cases and phases are paired by name (``pairs`` maps differently named cases).

Verdicts: a side's verdict of a check is PASS when every run passed it, FAIL when every run
failed it, MIXED otherwise, UNDECIDED when a run could not decide. PASS → FAIL or MIXED is a
regression whatever the tolerances, FAIL → PASS an improvement; UNDECIDED on either side is
inconclusive.

A broken run (``analysis.integrity``: what ``loadgen validate`` calls invalid, except a missing
manifest) is never compared: :class:`CompareError` names its first problem. Only complete runs
are compared: a run whose ``run.json`` status is not ``ok``, that has no
``manifest.json`` (killed before it was sealed), a case whose status is not ``ok`` or a phase
that is incomplete (``PhaseSummary.incomplete``) is refused, naming the run and why, unless
``allow_incomplete``; then every metric and verdict comparison is marked ``incomplete`` and its
note names the incomplete runs.

Exit codes (:func:`exit_code`, decided by ``analysis.gate_decision`` from the *key* metrics the
gate file names per scenario and every verdict): 0 no key metric or verdict regressed and every
one is decided; 1 a key metric or a verdict regressed; 3 nothing regressed, but a key metric is
inconclusive or *missing* (its server metric family is absent from a run); with ``strict``
every gated metric is key. Usage errors (not runs, unreadable plans,
workloads that differ, incomplete runs) are raised as :class:`CompareError` for the CLI to turn
into exit code 2.

See docs/compare-and-gates.md.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from statistics import fmean
from typing import Any

from pydantic import Field

from analysis.compare_metrics import (
    MIN_PEAK_SAMPLES,
    REQUEST_METRICS,
    RUN_METRICS,
    RunMetric,
    request_samples,
)
from analysis.compare_stats import (
    Classification,
    RunSpread,
    Statistic,
    bootstrap_ratio_runs,
    classify,
    flat,
    per_run_difference,
    pooled_stat,
    too_few,
)
from analysis.gate_file import GateConfig
from analysis.integrity import IntegrityError, check_run
from analysis.latency import request_frame
from analysis.load import RunFileError, load_run
from analysis.models import CaseSummary, PhaseSummary
from analysis.report import summarize_run
from loadgen.runformat import FormatVersionError, ReadRecord, RunInfo
from loadgen.runformat.layout import MANIFEST_FILE, PLAN_FILE
from metrics.names import MissingFamilyError
from scenarios.plan import Plan
from server.frozen import FrozenModel

CLASSES: tuple[Classification, ...] = (
    "regression",
    "improvement",
    "no change",
    "inconclusive",
    "missing",
)


class CompareError(ValueError):
    """The inputs cannot be compared (not runs, different workloads, nothing paired)."""


class MetricComparison(FrozenModel):
    """One metric of one paired case and phase.

    ``scale`` says what ``change``/``low``/``high`` are: the candidate/baseline ratio of the
    pooled statistic (``ratio``) or the difference of the per-run means (``difference``).
    ``n_baseline``/``n_candidate`` count values (per-request metrics) or runs (per-run ones).
    """

    case: str
    candidate_case: str
    phase: str
    metric: str
    stat: str | None = None
    scale: str
    better: str
    baseline: float | None = None
    candidate: float | None = None
    change: float | None = None
    low: float | None = None
    high: float | None = None
    tolerance: float
    classification: Classification
    gated: bool = True
    n_baseline: int = 0
    n_candidate: int = 0
    per_run_baseline: list[float | None] = Field(default_factory=list)
    per_run_candidate: list[float | None] = Field(default_factory=list)
    note: str = ""
    incomplete: bool = False


class VerdictComparison(FrozenModel):
    """A check's verdict on both sides (PASS, FAIL, MIXED, UNDECIDED) and its class;
    ``incomplete`` (with ``note``) when a run it comes from did not complete."""

    case: str
    check: str
    baseline: str
    candidate: str
    classification: Classification
    incomplete: bool = False
    note: str = ""


class SideInfo(FrozenModel):
    """One side: its runs, the vLLM versions its servers reported, its workload hash."""

    label: str
    runs: list[str]
    vllm_versions: list[str]
    workload_hash: str
    started_at: list[str | None]


class Comparison(FrozenModel):
    """The whole comparison (``compare.json`` is its dump)."""

    scenario: str
    baseline: SideInfo
    candidate: SideInfo
    workload_match: bool
    settings: dict[str, Any]
    pairs: dict[str, str]
    unpaired: list[str]
    metrics: list[MetricComparison]
    verdicts: list[VerdictComparison]
    counts: dict[str, int]
    notes: list[str] = Field(default_factory=list)


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


def run_dirs(path: Path) -> list[Path]:
    """The run directories of a side: ``path`` itself, or its subdirectories with a plan.

    Raises:
        CompareError: neither.
    """
    if (path / PLAN_FILE).exists():
        return [path]
    found = sorted(p for p in path.iterdir() if (p / PLAN_FILE).exists()) if path.is_dir() else []
    if not found:
        raise CompareError(f"{path} is not a run directory and holds none ({PLAN_FILE} missing)")
    return found


def incompleteness(run_dir: Path, run: RunInfo, cases: Mapping[str, CaseSummary]) -> list[str]:
    """Why a run did not complete (module docstring); empty when it did."""
    out = []
    if run.status != "ok":
        out.append(f"run status {run.status or 'unknown'}")
    if not (run_dir / MANIFEST_FILE).exists():
        out.append(f"no {MANIFEST_FILE} (the run was not sealed)")
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
    except (RunFileError, FormatVersionError, IntegrityError) as exc:
        raise CompareError(str(exc)) from None
    report = summarize_run(data, integrity.reseals)
    return RunView(
        run_dir=run_dir,
        plan=data.plan,
        started_at=data.run.started_at,
        cases=report.summary.cases,
        records={c.name: c.records for c in data.cases},
        verdicts={(v.case, v.check): v.passed for v in report.summary.verdicts},
        incomplete=incompleteness(run_dir, data.run, report.summary.cases),
    )


def _incomplete_runs(views: Sequence[RunView], label: str) -> list[str]:
    return [f"{label} run {v.run_dir} ({'; '.join(v.incomplete)})" for v in views if v.incomplete]


def _side_info(label: str, views: Sequence[RunView]) -> SideInfo:
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


def _side_verdict(values: Sequence[bool | None]) -> str:
    if not values or any(v is None for v in values):
        return "UNDECIDED"
    if all(values):
        return "PASS"
    return "FAIL" if not any(values) else "MIXED"


def _verdict_class(base: str, cand: str) -> Classification:
    if "UNDECIDED" in (base, cand):
        return "inconclusive"
    if base == "PASS" and cand in ("FAIL", "MIXED"):
        return "regression"
    if cand == "PASS" and base in ("FAIL", "MIXED"):
        return "improvement"
    return "no change" if base == cand else "inconclusive"


def compare_verdicts(
    base: Sequence[RunView], cand: Sequence[RunView], pairs: Mapping[str, str]
) -> list[VerdictComparison]:
    """One entry per check of a paired case seen on either side (module docstring)."""
    out = []
    for b_case, c_case in pairs.items():
        checks = [k[1] for k in base[0].verdicts if k[0] == b_case]
        checks += [k[1] for k in cand[0].verdicts if k[0] == c_case and k[1] not in checks]
        for check in checks:
            b = _side_verdict([v.verdicts.get((b_case, check)) for v in base])
            c = _side_verdict([v.verdicts.get((c_case, check)) for v in cand])
            out.append(VerdictComparison(case=b_case, check=check, baseline=b, candidate=c,
                                         classification=_verdict_class(b, c)))  # fmt: skip
    return out


def _missing_family(
    metric: RunMetric, views: Sequence[RunView], case: str, label: str
) -> str | None:
    for view in views:
        summary = view.cases.get(case)
        lacking = [f for f in metric.families if summary and f in summary.missing_families]
        if lacking:
            version = (summary.server.get("version") if summary else None) or "unknown"
            reason = str(MissingFamilyError(lacking[0]))
            return f"{label} run {view.run_dir.name} (vLLM {version}): {reason}"
    return None


def _phase_of(view: RunView, case: str, phase: str) -> PhaseSummary | None:
    summary = view.cases.get(case)
    return summary.phases.get(phase) if summary else None


def _value(metric: RunMetric, phase: PhaseSummary | None) -> float | None:
    return None if phase is None else metric.value(phase)


def _too_few_samples(
    metric: RunMetric,
    base: Sequence[RunView],
    cand: Sequence[RunView],
    cases: tuple[str, str],
    phase: str,
) -> str | None:
    """Why a sampled figure is too coarse to compare (fewest in-phase scrapes of any run below
    ``MIN_PEAK_SAMPLES``), or ``None``."""
    if metric.samples is None:
        return None
    counts = [
        metric.samples(p)
        for views, case in ((base, cases[0]), (cand, cases[1]))
        for v in views
        if (p := _phase_of(v, case, phase)) is not None
    ]
    fewest = min(counts, default=0)
    if fewest >= MIN_PEAK_SAMPLES:
        return None
    return (
        f"a sampled peak from as few as {fewest} scrapes of the phase (fewer than "
        f"{MIN_PEAK_SAMPLES}): too coarse to compare"
    )


def _per_run_note(spread: RunSpread, confidence: float, ratio: bool) -> str:
    """How a per-run figure's interval was built (``compare_stats.per_run_difference``)."""
    if spread.method == "point":
        return "one run per side: no run-to-run spread known, classified by the tolerance alone"
    if spread.method == "range":
        return f"interval = difference ± run-to-run range {spread.spread:.4g}"
    if spread.df is None:
        return "Welch t-interval: every run of each side equal (no spread)"
    where = "of the ratio (delta method)" if ratio else f"difference ± {spread.spread:.4g}"
    return f"Welch t-interval at {confidence:.4g} {where}, {spread.df:.1f} df"


def compare_run_metric(
    metric: RunMetric,
    base: Sequence[RunView],
    cand: Sequence[RunView],
    cases: tuple[str, str],
    phase: str,
    gate: GateConfig,
) -> MetricComparison | None:
    """The per-run figure ``metric`` of a paired phase, or ``None`` when it does not apply."""
    rule = gate.rule(metric.name)
    if rule is None:
        return None
    b_vals = [_value(metric, _phase_of(v, cases[0], phase)) for v in base]
    c_vals = [_value(metric, _phase_of(v, cases[1], phase)) for v in cand]
    if metric.optional and all(v is None for v in b_vals + c_vals):
        return None
    common: dict[str, Any] = {
        "case": cases[0], "candidate_case": cases[1], "phase": phase, "metric": metric.name,
        "scale": metric.scale, "better": metric.better, "tolerance": rule.tolerance,
        "gated": rule.gate, "per_run_baseline": b_vals, "per_run_candidate": c_vals,
        "n_baseline": len(b_vals), "n_candidate": len(c_vals),
    }  # fmt: skip
    missing = _missing_family(metric, base, cases[0], "baseline") or _missing_family(
        metric, cand, cases[1], "candidate"
    )
    if missing:
        return MetricComparison(**common, classification="missing", note=missing)
    if any(v is None for v in b_vals + c_vals):
        return MetricComparison(
            **common, classification="inconclusive", note="undefined in a run (no data)"
        )
    b = [float(v) for v in b_vals if v is not None]
    c = [float(v) for v in c_vals if v is not None]
    coarse = _too_few_samples(metric, base, cand, cases, phase)
    if coarse:
        return MetricComparison(
            **common, baseline=fmean(b), candidate=fmean(c), change=fmean(c) - fmean(b),
            classification="inconclusive", note=coarse,
        )  # fmt: skip
    spread = per_run_difference(b, c, confidence=gate.confidence)
    if metric.needs_repeats and spread.spread is None:
        return MetricComparison(
            **common, baseline=spread.baseline_mean, candidate=spread.candidate_mean,
            change=spread.difference.point, classification="inconclusive",
            note="a sampled peak (a lower bound) from one run per side: no spread known",
        )  # fmt: skip
    d = spread.ratio if metric.scale == "ratio" else spread.difference
    if d is None:
        return MetricComparison(**common, classification="inconclusive",
                                note="baseline is 0: no ratio")  # fmt: skip
    assert d.point is not None and d.low is not None and d.high is not None
    low, high, point = d.low, d.high, d.point
    neutral = 1.0 if metric.scale == "ratio" else 0.0
    note = _per_run_note(spread, gate.confidence, metric.scale == "ratio")
    klass = classify(low, high, neutral=neutral, tolerance=rule.tolerance, better=metric.better)
    return MetricComparison(
        **common, baseline=spread.baseline_mean, candidate=spread.candidate_mean, change=point,
        low=low, high=high, classification=klass, note=note,
    )  # fmt: skip


def compare_request_metric(
    name: str,
    stat: Statistic,
    b_runs: Sequence[Sequence[Any]],
    c_runs: Sequence[Sequence[Any]],
    cases: tuple[str, str],
    phase: str,
    gate: GateConfig,
) -> MetricComparison | None:
    """Pooled ``stat`` of per-request metric ``name`` with its bootstrap ratio interval; each
    side is a list of runs, each a list of per-request values."""
    rule = gate.rule(name, stat)
    if rule is None:
        return None
    b_samples = [v for run in b_runs for v in run]
    c_samples = [v for run in c_runs for v in run]
    b_flat, c_flat = flat(b_samples), flat(c_samples)
    common: dict[str, Any] = {
        "case": cases[0], "candidate_case": cases[1], "phase": phase, "metric": name,
        "stat": stat, "scale": "ratio", "better": "lower", "tolerance": rule.tolerance,
        "gated": rule.gate, "n_baseline": int(b_flat.size), "n_candidate": int(c_flat.size),
        "baseline": pooled_stat(b_flat, stat) if b_flat.size else None,
        "candidate": pooled_stat(c_flat, stat) if c_flat.size else None,
    }  # fmt: skip
    reasons = [
        f"{label}: {why}"
        for label, samples in (("baseline", b_samples), ("candidate", c_samples))
        if (why := too_few(samples, stat, gate.min_samples, gate.min_tail_samples))
    ]
    if reasons:
        return MetricComparison(**common, classification="inconclusive", note="; ".join(reasons))
    interval = bootstrap_ratio_runs(
        b_runs, c_runs, stat,
        resamples=gate.resamples, confidence=gate.confidence, seed=gate.seed,
    )  # fmt: skip
    if interval.low is None or interval.high is None:
        return MetricComparison(**common, classification="inconclusive",
                                note="baseline statistic is 0: no ratio")  # fmt: skip
    klass = classify(interval.low, interval.high, neutral=1.0, tolerance=rule.tolerance,
                     better="lower")  # fmt: skip
    return MetricComparison(**common, change=interval.point, low=interval.low,
                            high=interval.high, classification=klass)  # fmt: skip


def _run_samples(views: Sequence[RunView], case: str, phase: str) -> dict[str, list[list[Any]]]:
    """Per request metric, one list of per-request values per run."""
    out: dict[str, list[list[Any]]] = {m.name: [] for m in REQUEST_METRICS}
    for view in views:
        records = view.records.get(case, [])
        per_run = request_samples(request_frame(records), records, phase)
        for name, values in per_run.items():
            out[name].append(values)
    return out


def _pairs(
    base: Sequence[RunView], cand: Sequence[RunView], explicit: Mapping[str, str]
) -> tuple[dict[str, str], list[str]]:
    b_names = [c.name for c in base[0].plan.cases]
    c_names = [c.name for c in cand[0].plan.cases]
    for b, c in explicit.items():
        if b not in b_names or c not in c_names:
            raise CompareError(
                f"--pair {b}={c}: baseline cases are {b_names}, candidate cases {c_names}"
            )
    pairs = dict(explicit)
    for name in b_names:
        if name not in pairs and name in c_names and name not in pairs.values():
            pairs[name] = name
    unpaired = [f"baseline case {n}" for n in b_names if n not in pairs]
    unpaired += [f"candidate case {n}" for n in c_names if n not in pairs.values()]
    if not pairs:
        raise CompareError(
            f"no case pairs by name (baseline {b_names}, candidate {c_names}); "
            "map them with --pair BASELINE_CASE=CANDIDATE_CASE"
        )
    return pairs, unpaired


def compare_sides(
    baseline: Sequence[RunView],
    candidate: Sequence[RunView],
    gate: GateConfig,
    *,
    allow_workload_mismatch: bool = False,
    pairs: Mapping[str, str] | None = None,
    allow_incomplete: bool = False,
) -> Comparison:
    """Compare loaded sides (module docstring).

    Raises:
        CompareError: a side has no run, a run is incomplete (unless allowed), the workloads
            differ (unless allowed), or no case pairs.
    """
    if not baseline or not candidate:
        raise CompareError("each side needs at least one run")
    partial = _incomplete_runs(baseline, "baseline") + _incomplete_runs(candidate, "candidate")
    if partial and not allow_incomplete:
        raise CompareError(
            "refusing to compare runs that did not complete: "
            + "; ".join(partial)
            + "; pass --allow-incomplete to compare anyway (every figure is then marked)"
        )
    b_info, c_info = _side_info("baseline", baseline), _side_info("candidate", candidate)
    match = b_info.workload_hash == c_info.workload_hash
    notes = []
    if not match:
        text = (
            f"the workloads differ (baseline {b_info.workload_hash[:12]}, candidate "
            f"{c_info.workload_hash[:12]}): scenario, seed, token space or a case's phases"
        )
        if not allow_workload_mismatch:
            raise CompareError(text + "; pass --allow-workload-mismatch to compare anyway")
        notes.append(text + " — compared anyway (--allow-workload-mismatch)")
    paired, unpaired = _pairs(baseline, candidate, pairs or {})
    metrics: list[MetricComparison] = []
    for b_case, c_case in paired.items():
        b_spec = next(c for c in baseline[0].plan.cases if c.name == b_case)
        c_spec = next(c for c in candidate[0].plan.cases if c.name == c_case)
        b_phases = [p.name for p in baseline[0].plan.phases_of(b_spec)]
        c_phases = [p.name for p in candidate[0].plan.phases_of(c_spec)]
        unpaired += [f"{b_case}/{p} (baseline only)" for p in b_phases if p not in c_phases]
        unpaired += [f"{c_case}/{p} (candidate only)" for p in c_phases if p not in b_phases]
        for phase in (p for p in b_phases if p in c_phases):
            b_samples = _run_samples(baseline, b_case, phase)
            c_samples = _run_samples(candidate, c_case, phase)
            for request_metric in REQUEST_METRICS:
                rule = gate.rule(request_metric.name)
                for stat in rule.stats if rule else ():
                    found = compare_request_metric(
                        request_metric.name, stat, b_samples[request_metric.name],
                        c_samples[request_metric.name], (b_case, c_case), phase, gate,
                    )  # fmt: skip
                    if found is not None:
                        metrics.append(found)
            for run_metric in RUN_METRICS:
                got = compare_run_metric(
                    run_metric, baseline, candidate, (b_case, c_case), phase, gate
                )
                if got is not None:
                    metrics.append(got)
    verdicts = compare_verdicts(baseline, candidate, paired)
    if partial:
        mark = "from an incomplete run: " + "; ".join(partial)
        notes.append(mark + " — compared anyway (--allow-incomplete)")
        metrics = [m.model_copy(update={"incomplete": True,
                                        "note": f"{mark}; {m.note}" if m.note else mark})
                   for m in metrics]  # fmt: skip
        verdicts = [v.model_copy(update={"incomplete": True, "note": mark}) for v in verdicts]
    counts: dict[str, int] = {k: 0 for k in CLASSES}
    for m in metrics:
        counts[m.classification] += 1
    for v in verdicts:
        counts[v.classification] += 1
    return Comparison(
        scenario=baseline[0].plan.scenario,
        baseline=b_info,
        candidate=c_info,
        workload_match=match,
        settings=gate.model_dump(mode="json"),
        pairs=paired,
        unpaired=unpaired,
        metrics=metrics,
        verdicts=verdicts,
        counts=counts,
        notes=notes,
    )


def compare_paths(
    baseline: Path,
    candidate: Path,
    gate: GateConfig,
    *,
    allow_workload_mismatch: bool = False,
    pairs: Mapping[str, str] | None = None,
    allow_incomplete: bool = False,
) -> Comparison:
    """Load both sides (a run, or a directory of runs each) and compare them.

    Raises:
        CompareError: see :func:`compare_sides`, :func:`run_dirs` and :func:`load_view`.
    """
    base = [load_view(p) for p in run_dirs(baseline)]
    cand = [load_view(p) for p in run_dirs(candidate)]
    return compare_sides(
        base, cand, gate, allow_workload_mismatch=allow_workload_mismatch, pairs=pairs,
        allow_incomplete=allow_incomplete,
    )  # fmt: skip
