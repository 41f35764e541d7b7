"""slo-goodput's figures, computed from the raw records and samples of one run.

Definitions are in ``analysis.goodput``; measurement windows in ``loadgen.measure``. Figures the
run resolved while it ran (late-bound rates, derived SLOs; ``scenarios.late``) are recomputed
from the raw records with ``analysis.latency``'s metric definitions and compared with what the
run recorded in ``phases.jsonl``: the report uses the recomputed values.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd

from analysis.goodput import (
    MaxRate,
    RatePoint,
    SLOLimits,
    error_adjusted_quantiles,
    judge,
    max_sustainable_rate,
    quantiles,
    replicas_needed,
    window_rates,
)
from analysis.latency import itl_per_token_ms, records_of, request_frame
from analysis.load import CaseData, RunData
from analysis.markdown import bucket_text, f, pct
from analysis.reports.slo_goodput.models import (
    BracketPoint,
    CapacityAnswer,
    LateFigure,
    SaturationFigures,
    SLOFigure,
    SLOGoodputDetails,
    SweepPoint,
    UnloadedFigures,
)
from analysis.server_side import counter_figures, gauge_figures, histogram_figures
from loadgen.measure import RequestFacts, Window, window_of
from loadgen.runformat import PhaseRow
from metrics.samples import series
from scenarios.late import Measured
from scenarios.plan import PhaseSpec
from scenarios.slo_goodput import (
    LateFiguresAgree,
    SweepSpec,
    sweep_spec,
)

# --- Recomputing the late-bound figures ------------------------------------------------------


def _facts(rows: pd.DataFrame) -> list[RequestFacts]:
    return [RequestFacts.of(r) for r in records_of(rows)]


def _window(spec: PhaseSpec, rows: pd.DataFrame) -> Window | None:
    return window_of(spec, _facts(rows)) if not rows.empty else None


def _sent_inside(rows: pd.DataFrame, window: Window) -> pd.DataFrame:
    sent = pd.to_numeric(rows["sent_ns"], errors="coerce")
    return rows[(sent >= window.start_ns) & (sent <= window.end_ns)]


def _closed_loop(spec: PhaseSpec, rows: pd.DataFrame, window: Window) -> tuple[float, int, float]:
    """(C ÷ mean time in flight, requests averaged, mean time in flight s) by the definition in
    ``loadgen.measure``, recomputed here from the frame."""
    concurrency = spec.arrival.steady_concurrency
    assert concurrency is not None
    ok = _sent_inside(rows, window)
    ok = ok[(ok["status"] == "ok") & ok["ttft_ms"].notna() & ok["end_ns"].notna()]
    if ok.empty:
        return math.nan, 0, math.nan
    in_flight = (ok["end_ns"].astype("int64") - ok["sent_ns"].astype("int64")) / 1e9
    cut = window.end_ns - int(in_flight.max() * 1e9 + 0.5)
    held = in_flight[ok["sent_ns"].astype("int64") <= cut]
    if held.empty:
        return math.nan, 0, math.nan
    mean = float(held.mean())
    return concurrency / mean, len(held), mean


def _statistic(spec: PhaseSpec, rows: pd.DataFrame, statistic: str) -> float | None:
    """A late-binding statistic of a phase, recomputed with ``analysis.latency``'s columns."""
    window = _window(spec, rows)
    if window is None:
        return None
    if statistic == "closed_loop_rps":
        value = _closed_loop(spec, rows, window)[0]
        return None if math.isnan(value) else value
    ok = _sent_inside(rows, window)
    ok = ok[ok["status"] == "ok"]
    column = {"ttft_p50_ms": "ttft_ms", "tpot_p50_ms": "tpot_ms"}[statistic]
    values = ok[column].dropna().astype(float)
    return float(np.percentile(values, 50)) if not values.empty else None


def _agrees(used: float | None, recomputed: float | None, tolerance: float) -> bool | None:
    if used is None or recomputed is None:
        return None
    return abs(used - recomputed) <= tolerance * max(abs(used), abs(recomputed), 1e-12)


class _Run:
    """One case's raw data, its phases' specs and rows, and what phases.jsonl recorded."""

    def __init__(self, data: RunData, spec: SweepSpec) -> None:
        self.data = data
        self.spec = spec
        self.case: CaseData = next(c for c in data.cases if c.name == spec.case)
        case_spec = data.plan.cases[[c.name for c in data.plan.cases].index(spec.case)]
        self.specs = {p.name: p for p in data.plan.phases_of(case_spec)}
        self.lines = {p.phase: p for p in self.case.phases}
        self.frame = request_frame(self.case.records)

    def rows(self, phase: str) -> pd.DataFrame:
        if self.frame.empty:
            return self.frame
        return self.frame[self.frame["phase"] == phase]

    def recompute(self, figure: Measured) -> float | None:
        value = _statistic(self.specs[figure.phase], self.rows(figure.phase), figure.statistic)
        return None if value is None else figure.factor * value


def _late_figures(run: _Run, tolerance: float) -> list[LateFigure]:
    """Every figure the run resolved (derived SLOs, late-bound rates and their request
    counts), beside its recomputation from the raw files."""
    out: list[LateFigure] = []
    for name, figure in run.data.plan.derived.items():
        line = run.lines.get(figure.phase)
        used = (((line.derived if line else None) or {}).get(name) or {}).get("value")
        again = run.recompute(figure)
        out.append(
            LateFigure(name=name, used=used, recomputed=again, inputs=figure.describe(),
                       agrees=_agrees(used, again, tolerance))
        )  # fmt: skip
    for phase in run.spec.sweep:
        if phase not in run.lines:
            continue  # never ran (the case failed before it): nothing was resolved
        spec, line = run.specs[phase], run.lines[phase]
        resolved = line.resolved or {}
        rate = spec.arrival.late_rate
        if rate is not None:
            again = run.recompute(rate)
            out.append(
                LateFigure(name=f"{phase} rate (req/s)", used=resolved.get("rate_rps"),
                           recomputed=again, inputs=rate.describe(),
                           agrees=_agrees(resolved.get("rate_rps"), again, tolerance))
            )  # fmt: skip
        limit = spec.arrival.time_limit_s
        if spec.arrival.timed and limit and resolved:
            # The count follows from the rate the run used; the records hold what was sent.
            arrival = spec.arrival.model_copy(update={"rate_rps": resolved["rate_rps"]})
            count = arrival.count_within_limit()
            assert count is not None  # an open loop with a duration
            sent = len(run.rows(phase))
            out.append(
                LateFigure(name=f"{phase} requests", used=resolved.get("requests"),
                           recomputed=float(count),
                           inputs=f"arrivals in {limit:g} s; {sent} recorded",
                           agrees=resolved.get("requests") == count == sent)
            )  # fmt: skip
    return out


# --- The sweep ---------------------------------------------------------------------------------


def _slo(run: _Run) -> tuple[SLOLimits, list[SLOFigure]]:
    limits: dict[str, float | None] = {}
    figures = []
    for metric, value in run.spec.slo.items():
        if isinstance(value, str):
            figure = run.data.plan.derived[value]
            limit = run.recompute(figure)
            source = f"derived: {figure.describe()} (recomputed from the raw records)"
            if limit is None:  # the late_figures_agree verdict fails with it
                source = f"could not be derived ({figure.describe()}: no data): NOT APPLIED"
        else:
            limit, source = value, "given"
        limits[f"{metric}_ms"] = limit
        figures.append(SLOFigure(metric=metric, limit_ms=limit, source=source))
    return SLOLimits(**limits), figures


def _server(case: CaseData, window: Window) -> dict[str, Any]:
    """vLLM's gauges, counters and histograms over ``window``."""
    start, end = window.start_ns, window.end_ns
    waiting = [v for t, v in series(case.samples, "num_requests_waiting") if start <= t <= end]
    peaks, _, _ = gauge_figures(case.samples, start, end)
    deltas, _ = counter_figures(case.samples, start, end)
    hists = histogram_figures(case.samples, start, end)

    return {
        "waiting_mean": float(np.mean(waiting)) if waiting else None,
        "waiting_peak": peaks.get("num_requests_waiting"),
        "running_peak": peaks.get("num_requests_running"),
        "kv_peak": peaks.get("kv_cache_usage_perc"),
        "preemptions": deltas.get("num_preemptions"),
        "server_ttft_ms": hists.get("ttft_seconds"),
        "server_queue_ms": hists.get("queue_time_seconds"),
    }


def _rate_source(spec: PhaseSpec, line: PhaseRow) -> tuple[float | None, str]:
    resolved = line.resolved or {}
    rate = spec.arrival.late_rate
    if rate is not None:
        src = resolved.get("rate_from") or {}
        measured = src.get("measured")
        how = f"{rate.factor:g} × {rate.phase} {f(measured, 2)} req/s"
        return resolved.get("rate_rps"), how
    given = spec.arrival.open_rate()
    return (given if given is not None else resolved.get("rate_rps")), "given"


def sweep_point(run: _Run, phase: str, slo: SLOLimits) -> SweepPoint | None:
    """The figures of one rate over its measurement window; ``None`` if it did not run."""
    spec, rows = run.specs[phase], run.rows(phase)
    window = _window(spec, rows)
    if window is None or window.length_s <= 0 or phase not in run.lines:
        return None
    judged = judge(rows, slo)
    rates = window_rates(judged, window, slo)
    sched = pd.to_numeric(judged["scheduled_ns"], errors="coerce")
    counted = judged[(sched >= window.start_ns) & (sched <= window.end_ns)]
    ok = counted[counted["ok"]]
    failed = len(counted) - len(ok)
    lateness = counted["send_lateness_ms"].dropna().astype(float)
    waited = (counted["admitted_ns"] - counted["scheduled_ns"]).dropna() / 1e6
    capped = spec.arrival.timed and spec.arrival.concurrency_cap is not None
    first = pd.to_numeric(
        judged["chunk_ns"].map(lambda c: c[0] if isinstance(c, list) and c else None),
        errors="coerce",
    )
    first_in = judged[judged["ok"] & (first >= window.start_ns) & (first <= window.end_ns)]
    rate, source = _rate_source(spec, run.lines[phase])
    sent = pd.to_numeric(judged["sent_ns"], errors="coerce")
    ended = pd.to_numeric(judged["end_ns"], errors="coerce")
    carried = (sent < window.start_ns) & ~(ended < window.start_ns)
    return SweepPoint(
        phase=phase,
        rate_rps=rate,
        rate_source=source,
        window_s=rates.window_s,
        carried_in=int(carried.sum()),
        counted=rates.counted,
        sent=rates.sent,
        ok=rates.ok,
        failed=failed,
        good=rates.good,
        offered_rps=rates.offered_rps,
        achieved_rps=rates.achieved_rps,
        completed_rps=rates.completed_rps,
        completed_prorata_rps=rates.completed_prorata_rps,
        goodput_rps=rates.goodput_rps,
        attainment=rates.attainment,
        attainment_by_slo=rates.attainment_by_slo,
        lateness_ms=quantiles(lateness),
        lateness_max_ms=float(lateness.max()) if not lateness.empty else None,
        slot_wait_ms=quantiles(waited) if capped else None,
        ttft_ms=quantiles(ok["ttft_ms"]),
        tpot_ms=quantiles(ok["tpot_ms"]),
        itl_ms=quantiles(itl_per_token_ms(records_of(ok))),
        e2el_ms=quantiles(ok["e2el_ms"]),
        ttft_adjusted_ms=error_adjusted_quantiles(ok["ttft_ms"], failed),
        e2el_adjusted_ms=error_adjusted_quantiles(ok["e2el_ms"], failed),
        client_ttft_first_token_in_window_ms=quantiles(first_in["ttft_ms"]),
        **_server(run.case, window),
    )


def _unloaded(run: _Run) -> UnloadedFigures | None:
    spec, rows = run.specs[run.spec.unloaded], run.rows(run.spec.unloaded)
    window = _window(spec, rows)
    if window is None:
        return None
    ok = _sent_inside(rows, window)
    ok = ok[ok["status"] == "ok"]

    def median(column: str) -> float | None:
        values = ok[column].dropna().astype(float)
        return float(np.percentile(values, 50)) if not values.empty else None

    return UnloadedFigures(
        requests=len(ok),
        warmup_s=spec.warmup_s,
        ttft_p50_ms=median("ttft_ms"),
        tpot_p50_ms=median("tpot_ms"),
        e2el_p50_ms=median("e2el_ms"),
    )


def _saturation(run: _Run) -> SaturationFigures | None:
    spec, rows = run.specs[run.spec.saturation], run.rows(run.spec.saturation)
    window = _window(spec, rows)
    concurrency = spec.arrival.steady_concurrency
    if window is None or concurrency is None:
        return None
    rps, held, mean = _closed_loop(spec, rows, window)
    ended = pd.to_numeric(rows["end_ns"], errors="coerce")
    completed = int(((rows["status"] == "ok") & (ended >= window.start_ns)
                     & (ended <= window.end_ns)).sum())  # fmt: skip
    ok = _sent_inside(rows, window)
    ok = ok[ok["status"] == "ok"]
    server = _server(run.case, window)
    return SaturationFigures(
        concurrency=concurrency,
        window_s=window.length_s,
        requests=held,
        mean_in_flight_s=None if math.isnan(mean) else mean,
        closed_loop_rps=None if math.isnan(rps) else rps,
        window_completed_rps=completed / window.length_s if window.length_s > 0 else None,
        ttft_p50_ms=quantiles(ok["ttft_ms"])["p50"],
        tpot_p50_ms=quantiles(ok["tpot_ms"])["p50"],
        running_peak=server["running_peak"],
        waiting_peak=server["waiting_peak"],
    )


def capacity_answer(
    points: list[SweepPoint], target: float, target_rps: float | None
) -> CapacityAnswer:
    """The maximum sustainable rate with its bracket, and the replicas for ``target_rps``."""
    measured = [
        RatePoint(p.phase, p.offered_rps, p.attainment) for p in points if p.attainment is not None
    ]
    found: MaxRate = max_sustainable_rate(measured, target)

    def bracket(point: RatePoint | None) -> BracketPoint | None:
        return None if point is None else BracketPoint(**point.__dict__)

    if found.rate_rps is None:
        statement = (
            f"No measured rate reaches {pct(target)} % attainment; even the lowest "
            f"({f(measured[0].offered_rps, 2) if measured else '–'} req/s) misses it: the "
            "maximum sustainable rate is below the sweep."
        )
    elif not found.bracketed:
        statement = (
            f"Every rate up to the highest ({f(found.rate_rps, 2)} req/s) reaches "
            f"{pct(target)} % attainment: the maximum sustainable rate is at least that, "
            "above the sweep (not bracketed)."
        )
    else:
        assert found.lower is not None and found.upper is not None
        statement = (
            f"Maximum sustainable rate ≈ {f(found.rate_rps, 2)} req/s at ≥ {pct(target)} % SLO "
            f"attainment, between {f(found.lower.offered_rps, 2)} req/s "
            f"({pct(found.lower.attainment)} %, {found.lower.phase}) and "
            f"{f(found.upper.offered_rps, 2)} req/s ({pct(found.upper.attainment)} %, "
            f"{found.upper.phase}), interpolated linearly in attainment."
        )
    replicas = None
    if target_rps is not None and found.rate_rps:
        replicas = replicas_needed(target_rps, found.rate_rps)
    assumption = (
        "replicas scale linearly: each serves its share of the load as it would alone "
        "(even load balancing, no shared bottleneck), and the load has this workload's shape"
    )
    return CapacityAnswer(
        target_attainment=target,
        max_rate_rps=found.rate_rps,
        lower=bracket(found.lower),
        upper=bracket(found.upper),
        bracketed=found.bracketed,
        statement=statement,
        target_rps=target_rps,
        replicas=replicas,
        assumption=assumption,
    )


def top_shares(top: SweepPoint, sat_rps: float | None) -> tuple[float | None, float | None]:
    """The collapse's two ratios at the top rate: goodput ÷ completed (whole completions, one
    window) and completed pro rata ÷ saturation ``sat_rps``; ``None`` where a divisor is
    missing or 0. Pro rata, not whole completions, against saturation: at the batch limit a
    whole batch finishes within a few steps, and a short window holds one batch more or less
    with where its edges fall."""
    share = top.goodput_rps / top.completed_rps if top.completed_rps else None
    of_sat = top.completed_prorata_rps / sat_rps if sat_rps else None
    return share, of_sat


def _top_rate_text(points: list[SweepPoint], sat: SaturationFigures | None) -> str:
    if not points:
        return ""
    top = points[-1]
    share, of_sat = top_shares(top, sat.closed_loop_rps if sat is not None else None)
    by_slo = ", ".join(f"{k.upper()} {pct(v)} %" for k, v in top.attainment_by_slo.items())
    return (
        f"At the top rate ({top.phase}, offered {f(top.offered_rps, 2)} req/s) the server "
        f"completed {f(top.completed_prorata_rps, 2)} req/s pro rata ({pct(of_sat)} % of its "
        f"saturation throughput; {f(top.completed_rps, 2)} req/s of whole completions) but "
        f"only {f(top.goodput_rps, 2)} req/s were good ({pct(share)} % of completed; "
        f"attainment {pct(top.attainment)} %). Per SLO: {by_slo or '–'}. Cause: "
        f"vLLM's waiting queue averaged {f(top.waiting_mean, 0)} and peaked at "
        f"{f(top.waiting_peak, 0)} requests (sampled) with {f(top.running_peak, 0)} running; "
        f"its queue-time p50 lay in the histogram bucket "
        f"{bucket_text(top.server_queue_ms.buckets.get('p50') if top.server_queue_ms else None)} "
        "ms and the "
        f"client's TTFT p50/p99 {f(top.ttft_ms['p50'], 0)}/{f(top.ttft_ms['p99'], 0)} ms."
    )


def slo_goodput_details(run: RunData) -> SLOGoodputDetails | None:
    """The sweep case's figures, or ``None`` when the run has no sweep case."""
    spec = sweep_spec(run.plan)
    if not any(c.name == spec.case for c in run.cases):
        return None
    data = _Run(run, spec)
    agree = next((c for c in run.plan.checks if isinstance(c, LateFiguresAgree)), None)
    late = _late_figures(data, agree.rel_tolerance if agree else 1e-6)
    slo, slo_figures = _slo(data)
    points = [p for name in spec.sweep if (p := sweep_point(data, name, slo)) is not None]
    sat = _saturation(data)
    first = data.specs[spec.sweep[0]] if spec.sweep else None
    duration = first.arrival.time_limit_s if first and first.arrival.timed else None
    return SLOGoodputDetails(
        case=spec.case,
        slo=slo_figures,
        warmup_s=first.warmup_s if first else 0.0,
        duration_s=duration,
        unloaded=_unloaded(data),
        saturation=sat,
        points=points,
        answer=capacity_answer(points, spec.attainment, spec.target_rps),
        late_figures=late,
        top_rate_text=_top_rate_text(points, sat),
    )
