"""One metric of one paired case and phase compared: per-run figures (Welch or range
intervals of the per-run difference, or of the ratio) and per-request ones (pooled statistic,
bootstrap ratio interval over runs), each classified against its tolerance.

Statistics: ``analysis.compare_stats``; the metrics: ``analysis.compare_metrics``; tolerances:
``analysis.gate_file``. See :mod:`analysis.compare`.
"""

from __future__ import annotations

from collections.abc import Sequence
from statistics import fmean
from typing import Any

from analysis.compare_metrics import MIN_PEAK_SAMPLES, REQUEST_METRICS, RunMetric, request_samples
from analysis.compare_models import MetricComparison
from analysis.compare_runs import RunView
from analysis.compare_stats import (
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
from analysis.latency import request_frame
from analysis.models import PhaseSummary
from metrics.names import MissingFamilyError


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


def phase_value(metric: RunMetric, view: RunView, case: str, phase: str) -> float | None:
    """One run's figure of ``metric`` in ``case``/``phase``: from the scenario's report for a
    ``reported`` figure (goodput), else from the phase summary; ``None`` when it has none."""
    if metric.reported:
        return view.goodput.get((case, phase))
    summary = _phase_of(view, case, phase)
    return None if summary is None else metric.value(summary)


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
    b_vals = [phase_value(metric, v, cases[0], phase) for v in base]
    c_vals = [phase_value(metric, v, cases[1], phase) for v in cand]
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


def run_samples(views: Sequence[RunView], case: str, phase: str) -> dict[str, list[list[Any]]]:
    """Per request metric, one list of per-request values per run."""
    out: dict[str, list[list[Any]]] = {m.name: [] for m in REQUEST_METRICS}
    for view in views:
        records = view.records.get(case, [])
        per_run = request_samples(request_frame(records), records, phase)
        for name, values in per_run.items():
            out[name].append(values)
    return out
