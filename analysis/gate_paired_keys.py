"""The few key metrics of a paired gate, per case: each a change within block pairs
(``analysis.gate_paired``), pooled over the case's phases, classified against the gate file's
``[paired]`` tolerance, with the smallest change the gate can see.

A gate's sides hold runs of the same names (``baseline/run-N``, ``candidate/run-N``), run
next to each other in the gate's alternating order (A B, B A, …): run N of each side is pair N.

**The key metrics** (:data:`PAIRED_METRICS`), each pooled over the phases of a case that have
it in every run:

- ``ttft_ms``, ``tpot_ms``: per phase the median of the per-request log-ratios ln(c_i / b_i)
  over the requests ok with a value on both sides, matched by ``request_id`` (the matched
  estimator, ``analysis.gate_paired.matched_log_ratio``), averaged over phases (relative
  tolerance; failed requests are left out here and counted by ``failed_requests``);
- ``output_throughput_tok_s``, ``goodput_req_s``: per phase a log-ratio, averaged (relative);
- ``prefix_cache_hit_rate``, ``cached_token_rate``: per phase a difference, averaged
  (absolute, a fraction);
- ``num_preemptions``, ``failed_requests``: per phase a difference, summed over the case
  (absolute, a count).

A phase whose server lacks a metric's family in some run makes the metric *missing* (never 0).
Every other statistic stays information in compare.md's per-phase table.

**The interval's unit.** When every run of the pairs was run phase by phase beside its pair's
other run (``RunView.blocks == "phase"``, ``loadgen.turns``), each (pair, phase) is a unit
(``analysis.gate_paired.phase_units``): a metric's per-phase changes, not only their mean per
pair, enter its interval. Otherwise the run pair is the unit.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from statistics import NormalDist

import numpy as np

from analysis.compare_figures import phase_value
from analysis.compare_metrics import RUN_METRICS, RunMetric
from analysis.compare_models import CompareError, PairedMetric
from analysis.compare_runs import RunView
from analysis.compare_stats import Better, classify
from analysis.gate_file import GateConfig
from analysis.gate_paired import (
    PAIRED_METRICS,
    PairedEstimate,
    PairedKind,
    PairedScale,
    Units,
    matched_log_ratio,
    mde,
    mde_after,
    paired_figure,
    phase_units,
    tolerance_visible,
)
from analysis.latency import request_frame


def paired_runs(
    baseline: Sequence[RunView], candidate: Sequence[RunView]
) -> list[tuple[RunView, RunView]]:
    """The block pairs: runs of both sides with the same directory name, in name order.

    Raises:
        CompareError: the sides' run names differ (they are not one gate's pairs).
    """
    b = {v.run_dir.name: v for v in baseline}
    c = {v.run_dir.name: v for v in candidate}
    if set(b) != set(c):
        raise CompareError(
            f"paired comparison needs the same runs on both sides (baseline {sorted(b)}, "
            f"candidate {sorted(c)})"
        )
    return [(b[name], c[name]) for name in sorted(b, key=lambda n: (len(n), n))]


def _phases(view: RunView, case: str) -> list[str]:
    spec = next(c for c in view.plan.cases if c.name == case)
    return [p.name for p in view.plan.phases_of(spec)]


def _by_request(view: RunView, case: str, phase: str, metric: str) -> dict[str, float]:
    """``request_id`` → the positive ``metric`` of each ok request of ``phase``."""
    frame = request_frame(view.records.get(case, []))
    if frame.empty:
        return {}
    chosen = frame[(frame["phase"] == phase) & (frame["status"] == "ok")]
    values = chosen[metric].to_numpy(dtype=float)
    ids = chosen["request_id"].astype(str).to_numpy()
    keep = np.isfinite(values) & (values > 0)
    return dict(zip(ids[keep], values[keep], strict=True))


def _matched_sides(
    pairs: list[tuple[RunView, RunView]], cases: tuple[str, str], metric: str, least: int
) -> tuple[list[list[np.ndarray]], list[list[np.ndarray]]]:
    """Per pair, per phase with ``least`` matched requests in every pair, the aligned
    per-request values of ``metric`` (baseline, candidate): the requests ok with a value on both
    sides of the pair, matched by ``request_id``, in id order. The rest are left out."""
    base: list[list[np.ndarray]] = [[] for _ in pairs]
    cand: list[list[np.ndarray]] = [[] for _ in pairs]
    for phase in _phases(pairs[0][0], cases[0]):
        sides = []
        for bv, cv in pairs:
            b = _by_request(bv, cases[0], phase, metric)
            c = _by_request(cv, cases[1], phase, metric)
            ids = sorted(set(b) & set(c))
            sides.append((np.array([b[i] for i in ids]), np.array([c[i] for i in ids])))
        if all(b_arr.size >= least for b_arr, _ in sides):
            for j, (b_arr, c_arr) in enumerate(sides):
                base[j].append(b_arr)
                cand[j].append(c_arr)
    return base, cand


def _figure_changes(
    pairs: list[tuple[RunView, RunView]],
    cases: tuple[str, str],
    metric: RunMetric,
    kind: PairedKind,
) -> tuple[np.ndarray, str | None]:
    """The per-phase changes of a per-run figure, shape (pairs, phases used: those with a value
    on both sides of every pair), and the note of a missing family (or ``None``)."""
    columns: list[list[float]] = []
    for phase in _phases(pairs[0][0], cases[0]):
        values = []
        for bv, cv in pairs:
            for view, case in ((bv, cases[0]), (cv, cases[1])):
                summary = view.cases.get(case)
                lacking = [f for f in metric.families if summary and f in summary.missing_families]
                if lacking:
                    missing = f"run {view.run_dir} lacks the server metric family {lacking[0]}"
                    return np.empty((len(pairs), 0)), missing
            values.append((phase_value(metric, bv, cases[0], phase),
                           phase_value(metric, cv, cases[1], phase)))  # fmt: skip
        if any(b is None or c is None for b, c in values):
            continue
        if kind.scale == "log" and any(b <= 0 or c <= 0 for b, c in values):  # type: ignore[operator]
            continue
        columns.append([math.log(c / b) if kind.scale == "log" else c - b  # type: ignore[operator]
                        for b, c in values])  # fmt: skip
    return np.array(columns, dtype=float).T.reshape(len(pairs), len(columns)), None


def _figure_estimate(
    changes: np.ndarray, kind: PairedKind, units: Units, confidence: float
) -> PairedEstimate:
    """A per-run figure's paired estimate from its per-phase changes (pairs, phases): pooled per
    pair (mean, or sum over phases) for the run-pair unit; each (pair, phase) a unit otherwise,
    a summed figure's units scaled by the phases so that their mean is the sum."""
    scale: PairedScale = "log" if kind.scale == "log" else "difference"
    if units == "phase":
        scaled = changes * changes.shape[1] if kind.pool == "sum" else changes
        return phase_units(scaled, None, scale=scale, confidence=confidence)
    pooled = changes.sum(axis=1) if kind.pool == "sum" else changes.mean(axis=1)
    return paired_figure(pooled.tolist(), scale=scale, confidence=confidence)


def paired_pairs_needed(
    est: PairedEstimate, tolerance: float, better: str, confidence: float
) -> tuple[int | None, str]:
    """How many more pairs would decide an undecided estimate (``None``: none do), and the line
    that says so. It takes the point as the truth and its SE as shrinking by √(k/k′): the
    interval d̄ ± z·SE clears the nearer band edge (a point inside the band) or the edge it lies
    beyond (toward a regression or an improvement) once z·SE·√(k/k′) is below that distance.

    The band is ``classify``'s: a ratio within [1 − t, 1 + t] (log edges ln(1 − t), ln(1 + t)),
    a difference within [−t, t]."""
    z = NormalDist().inv_cdf((1 + confidence) / 2)
    if est.scale == "log":
        centre = math.log(est.point)
        upper = math.log1p(tolerance)
        lower = math.log1p(-tolerance) if tolerance < 1 else -math.inf
    else:
        centre, upper, lower = est.point, tolerance, -tolerance
    if centre > upper:
        margin, toward = centre - upper, "regression" if better == "lower" else "improvement"
    elif centre < lower:
        margin, toward = lower - centre, "improvement" if better == "lower" else "regression"
    else:
        margin, toward = min(upper - centre, centre - lower), "no change"
    if est.se == 0 or margin <= 0:
        return None, "more pairs do not decide it (the change sits on the tolerance edge)"
    extra = max(math.ceil(est.pairs * (z * est.se / margin) ** 2) - est.pairs, 1)
    return extra, f"~{extra} more pair(s) toward {toward} at the noise and change seen so far"


def _classified(
    name: str, case: str, est: PairedEstimate, tolerance: float, kind: PairedKind, confidence: float
) -> PairedMetric:
    neutral = 1.0 if est.scale == "log" else 0.0
    better: Better = "lower" if kind.better == "lower" else "higher"
    klass = classify(est.low, est.high, neutral=neutral, tolerance=tolerance, better=better)
    seen = mde(est.se, confidence, est.scale, df=est.df)  # type: ignore[arg-type]
    note, extra = "", None
    if klass == "inconclusive":
        extra, note = paired_pairs_needed(est, tolerance, kind.better, confidence)
    if not tolerance_visible(tolerance, seen) and est.se > 0:
        note = (f"tolerance {tolerance:g} is below the smallest change this gate can see "
                f"({seen:.3g}); " + note).rstrip("; ")  # fmt: skip
    return PairedMetric(
        case=case, metric=name, scale=est.scale, better=kind.better, tolerance=tolerance,
        change=est.point, low=est.low, high=est.high, se=est.se, pairs=est.pairs,
        per_pair=list(est.per_pair), method=est.method, classification=klass, mde=seen,
        mde_next=mde_after(est, confidence), extra_pairs=extra, note=note,
        units="phase" if est.per_phase else "pair", df=est.df,
        per_phase=[list(row) for row in est.per_phase],
    )  # fmt: skip


def paired_key_metrics(
    baseline: Sequence[RunView],
    candidate: Sequence[RunView],
    cases: dict[str, str],
    gate: GateConfig,
) -> list[PairedMetric]:
    """The paired key metrics (module docstring) of every paired case, at the gate's
    ``confidence`` and ``[paired]`` tolerances.

    Raises:
        CompareError: the sides' runs are not one gate's pairs (:func:`paired_runs`).
    """
    pairs = paired_runs(baseline, candidate)
    units: Units = "phase" if all(v.blocks == "phase" for p in pairs for v in p) else "pair"
    by_name = {m.name: m for m in RUN_METRICS}
    out: list[PairedMetric] = []
    for b_case, c_case in cases.items():
        names = (b_case, c_case)
        for name, tolerance in gate.paired.items():
            kind = PAIRED_METRICS[name]
            if name in ("ttft_ms", "tpot_ms"):
                base, cand = _matched_sides(pairs, names, name, gate.min_samples)
                if not base or not base[0]:
                    continue
                est = matched_log_ratio(base, cand, confidence=gate.confidence,
                                        resamples=gate.resamples, seed=gate.seed,
                                        units=units)  # fmt: skip
            else:
                changes, missing = _figure_changes(pairs, names, by_name[name], kind)
                if missing:
                    out.append(PairedMetric(case=b_case, metric=name, scale=kind.scale,
                                            better=kind.better, tolerance=tolerance,
                                            pairs=len(pairs), classification="missing",
                                            note=missing))  # fmt: skip
                    continue
                if not changes.shape[1]:
                    continue
                est = _figure_estimate(changes, kind, units, gate.confidence)
            out.append(_classified(name, b_case, est, tolerance, kind, gate.confidence))
    return out
