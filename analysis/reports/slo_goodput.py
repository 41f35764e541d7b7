"""slo-goodput's report: the sweep table, the capacity-planning answer, the collapse, verdicts.

Every figure is computed here from the raw records and samples (definitions in
``analysis.goodput``; measurement windows in ``loadgen.measure``). Figures the run resolved
while it ran (late-bound rates, derived SLOs; ``scenarios.late``) are recomputed from the
raw records with ``analysis.latency``'s metric definitions and compared with what the run
recorded in ``phases.jsonl``: the report uses the recomputed values, and the
``late_figures_agree`` verdict says whether they match.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import pandas as pd
from pydantic import BaseModel, ConfigDict

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
from analysis.goodput_plots import draw_plots
from analysis.latency import itl_per_token_ms, records_of, request_frame
from analysis.load import CaseData, RunData
from analysis.markdown import f, pct, table
from analysis.models import CaseSummary, Verdict
from analysis.reports import Evaluator, PhaseColumn, ScenarioReport
from analysis.server_side import counter_figures, gauge_figures, histogram_figures
from loadgen.measure import RequestFacts, Window, window_of
from loadgen.runformat import PhaseRow
from metrics.histograms import histogram_delta
from metrics.samples import series
from scenarios.arrivals import ClosedLoop, OpenLoop, arrivals_within
from scenarios.late import Measured
from scenarios.plan import PhaseSpec
from scenarios.slo_goodput import (
    ClientKeptUp,
    LateFiguresAgree,
    LowestRateAttains,
    MaxRateBracketed,
    OverloadCollapse,
    RatesOrdered,
    SweepSpec,
    sweep_spec,
)


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


Quantiles = dict[str, float | None]


class SLOFigure(_Frozen):
    """One SLO: its limit (ms) and where it came from (given, or derived with its inputs)."""

    metric: str
    limit_ms: float | None
    source: str


class UnloadedFigures(_Frozen):
    """The unloaded probe over its window: successful requests and median latencies (ms)."""

    requests: int
    warmup_s: float
    ttft_p50_ms: float | None
    tpot_p50_ms: float | None
    e2el_p50_ms: float | None


class SaturationFigures(_Frozen):
    """The closed-loop saturation phase over its window.

    ``closed_loop_rps`` = C ÷ mean time in flight (``loadgen.measure``); ``window_completed_rps``
    = successful completions in the window ÷ its length, the direct count (off by up to a
    batch when completions come in bursts).
    """

    concurrency: int
    window_s: float | None
    requests: int
    mean_in_flight_s: float | None
    closed_loop_rps: float | None
    window_completed_rps: float | None
    ttft_p50_ms: float | None
    tpot_p50_ms: float | None
    running_peak: float | None
    waiting_peak: float | None


class SweepPoint(_Frozen):
    """One rate of the sweep over its measurement window (rates req/s, latencies ms).

    ``rate_rps`` is the nominal λ the schedule was drawn with, ``rate_source`` how it was set;
    ``offered_rps`` what the schedule put in the window; ``carried_in`` the requests already in
    flight when the window opened (sent in the warm-up), which may complete inside it. Latency
    quantiles are over the successful counted requests; ``*_adjusted_ms`` rank failures above
    them (``None`` = a failure). Server figures are over the window: vLLM's histograms (bucket
    deltas, Prometheus interpolation) beside the client's TTFT of the requests whose first
    token came in it.
    """

    phase: str
    rate_rps: float | None
    rate_source: str
    window_s: float
    carried_in: int
    counted: int
    sent: int
    ok: int
    failed: int
    good: int
    offered_rps: float
    achieved_rps: float
    completed_rps: float
    completed_prorata_rps: float
    goodput_rps: float
    attainment: float | None
    attainment_by_slo: dict[str, float]
    lateness_ms: Quantiles
    lateness_max_ms: float | None
    slot_wait_ms: Quantiles | None
    ttft_ms: Quantiles
    tpot_ms: Quantiles
    itl_ms: Quantiles
    e2el_ms: Quantiles
    ttft_adjusted_ms: Quantiles
    e2el_adjusted_ms: Quantiles
    waiting_mean: float | None
    waiting_peak: float | None
    running_peak: float | None
    kv_peak: float | None
    preemptions: float | None
    server_ttft_ms: Quantiles | None
    server_queue_ms: Quantiles | None
    client_ttft_first_token_in_window_ms: Quantiles


class LateFigure(_Frozen):
    """A figure the run resolved while it ran, and the same figure recomputed from raw files."""

    name: str
    used: float | None
    recomputed: float | None
    inputs: str
    agrees: bool | None


class BracketPoint(_Frozen):
    phase: str
    offered_rps: float
    attainment: float


class CapacityAnswer(_Frozen):
    """The maximum sustainable rate, its bracket, and the replicas for ``target_rps``."""

    target_attainment: float
    max_rate_rps: float | None
    lower: BracketPoint | None
    upper: BracketPoint | None
    bracketed: bool
    statement: str
    target_rps: float | None
    replicas: int | None
    assumption: str


class SLOGoodputDetails(_Frozen):
    case: str
    slo: list[SLOFigure]
    warmup_s: float
    duration_s: float | None
    unloaded: UnloadedFigures | None
    saturation: SaturationFigures | None
    points: list[SweepPoint]
    answer: CapacityAnswer
    late_figures: list[LateFigure]
    top_rate_text: str


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
    assert isinstance(spec.arrival, ClosedLoop)
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
    return spec.arrival.concurrency / mean, len(held), mean


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
        rate = spec.arrival.rate_rps if isinstance(spec.arrival, OpenLoop) else None
        if isinstance(rate, Measured):
            again = run.recompute(rate)
            out.append(
                LateFigure(name=f"{phase} rate (req/s)", used=resolved.get("rate_rps"),
                           recomputed=again, inputs=rate.describe(),
                           agrees=_agrees(resolved.get("rate_rps"), again, tolerance))
            )  # fmt: skip
        if isinstance(spec.arrival, OpenLoop) and spec.arrival.duration_s and resolved:
            # The count follows from the rate the run used; the records hold what was sent.
            arrival = spec.arrival.model_copy(update={"rate_rps": resolved["rate_rps"]})
            count = arrivals_within(arrival, spec.arrival.duration_s)
            sent = len(run.rows(phase))
            out.append(
                LateFigure(name=f"{phase} requests", used=resolved.get("requests"),
                           recomputed=float(count),
                           inputs=f"arrivals in {spec.arrival.duration_s:g} s; {sent} recorded",
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

    def q(family: str) -> Quantiles | None:
        h = hists.get(family)
        if h is None:
            return None
        # A quantile inside the first bucket is interpolated from 0 to its bound (queue time:
        # 0–300 ms gives "150"); keep the bound so the report shows "≤ bound" there instead.
        delta = histogram_delta(case.samples, family, start, end)
        first = delta.bounds[0] * 1e3 if delta is not None and delta.bounds else None
        return {"p50": h.p50_ms, "p90": h.p90_ms, "p99": h.p99_ms, "first_bucket_ms": first}

    return {
        "waiting_mean": float(np.mean(waiting)) if waiting else None,
        "waiting_peak": peaks.get("num_requests_waiting"),
        "running_peak": peaks.get("num_requests_running"),
        "kv_peak": peaks.get("kv_cache_usage_perc"),
        "preemptions": deltas.get("num_preemptions"),
        "server_ttft_ms": q("ttft_seconds"),
        "server_queue_ms": q("queue_time_seconds"),
    }


def _rate_source(spec: PhaseSpec, line: PhaseRow) -> tuple[float | None, str]:
    resolved = line.resolved or {}
    rate = spec.arrival.rate_rps if isinstance(spec.arrival, OpenLoop) else None
    if isinstance(rate, Measured):
        src = resolved.get("rate_from") or {}
        measured = src.get("measured")
        how = f"{rate.factor:g} × {rate.phase} {f(measured, 2)} req/s"
        return resolved.get("rate_rps"), how
    return (rate if isinstance(rate, float) else resolved.get("rate_rps")), "given"


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
    capped = isinstance(spec.arrival, OpenLoop) and spec.arrival.max_concurrency is not None
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
    if window is None or not isinstance(spec.arrival, ClosedLoop):
        return None
    rps, held, mean = _closed_loop(spec, rows, window)
    ended = pd.to_numeric(rows["end_ns"], errors="coerce")
    completed = int(((rows["status"] == "ok") & (ended >= window.start_ns)
                     & (ended <= window.end_ns)).sum())  # fmt: skip
    ok = _sent_inside(rows, window)
    ok = ok[ok["status"] == "ok"]
    server = _server(run.case, window)
    return SaturationFigures(
        concurrency=spec.arrival.concurrency,
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


def _top_shares(top: SweepPoint, sat_rps: float | None) -> tuple[float | None, float | None]:
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
    share, of_sat = _top_shares(top, sat.closed_loop_rps if sat is not None else None)
    by_slo = ", ".join(f"{k.upper()} {pct(v)} %" for k, v in top.attainment_by_slo.items())
    return (
        f"At the top rate ({top.phase}, offered {f(top.offered_rps, 2)} req/s) the server "
        f"completed {f(top.completed_prorata_rps, 2)} req/s pro rata ({pct(of_sat)} % of its "
        f"saturation throughput; {f(top.completed_rps, 2)} req/s of whole completions) but "
        f"only {f(top.goodput_rps, 2)} req/s were good ({pct(share)} % of completed; "
        f"attainment {pct(top.attainment)} %). Per SLO: {by_slo or '–'}. Cause: "
        f"vLLM's waiting queue averaged {f(top.waiting_mean, 0)} and peaked at "
        f"{f(top.waiting_peak, 0)} requests (sampled) with {f(top.running_peak, 0)} running; "
        f"its queue-time p50 was {f((top.server_queue_ms or {}).get('p50'), 0)} ms and the "
        f"client's TTFT p50/p99 {f(top.ttft_ms['p50'], 0)}/{f(top.ttft_ms['p99'], 0)} ms."
    )


# --- Verdicts -----------------------------------------------------------------------------------


def _points(details: SLOGoodputDetails | None) -> list[SweepPoint]:
    return details.points if details is not None else []


def _missing(check: Any, name: str) -> Verdict:
    return Verdict(case=check.case, check=name, passed=None, detail="no sweep rate ran")


def completed_bound(point: SweepPoint, tolerance: float) -> float:
    """The most completed req/s a rate may show: offered × (1 + tolerance), plus the requests
    already in flight when its window opened ÷ the window (they may complete inside it)."""
    return point.offered_rps * (1 + tolerance) + point.carried_in / point.window_s


def _ordered(check: RatesOrdered, _: CaseSummary, d: SLOGoodputDetails | None) -> Verdict:
    name = (
        f"goodput ≤ completed ≤ offered × (1 + {check.tolerance:g}) + carried-in ÷ window "
        "at every rate"
    )
    points = _points(d)
    if not points:
        return _missing(check, name)
    bad = [
        p for p in points
        if not p.goodput_rps <= p.completed_rps <= completed_bound(p, check.tolerance)
    ]  # fmt: skip
    detail = "; ".join(
        f"{p.phase}: {f(p.goodput_rps, 2)} ≤ {f(p.completed_rps, 2)} ≤ {f(p.offered_rps, 2)} "
        f"(bound {f(completed_bound(p, check.tolerance), 2)})"
        for p in (bad or points)
    )
    return Verdict(case=check.case, check=name, passed=not bad, detail=detail)


def _normal_priority_note(case: CaseSummary) -> str:
    """Why the sending thread was not real-time, when it was not (``loadgen.placement``)."""
    for c in case.client:
        if c is not None and not str(c.get("policy", "")).startswith("SCHED_FIFO"):
            why = c.get("problem") or c.get("reason")
            return f"; the load generator's sending thread ran at {c.get('policy')} ({why})"
    return ""


def _client(check: ClientKeptUp, case: CaseSummary, d: SLOGoodputDetails | None) -> Verdict:
    name = (
        f"client kept up at every rate: achieved within {pct(check.max_rate_error)} % of "
        f"offered, send lateness p99 < {check.max_lateness_p99_ms:g} ms"
    )
    points = _points(d)
    if not points:
        return _missing(check, name)
    problems = []
    short = False  # a rate the client did not reach, as against one it reached with late sends
    for p in points:
        late = p.lateness_ms["p99"]
        off = client_shortfall(p, check.max_rate_error) is not None
        short = short or off
        if off or late is None or late >= check.max_lateness_p99_ms:
            why = f"achieved {f(p.achieved_rps, 2)} of {f(p.offered_rps, 2)} req/s, " \
                  f"lateness p99 {f(late, 2)} ms"  # fmt: skip
            if p.slot_wait_ms and (p.slot_wait_ms["p99"] or 0) >= check.max_lateness_p99_ms:
                why += f" (the --max-concurrency cap held requests: wait p99 " \
                       f"{f(p.slot_wait_ms['p99'], 0)} ms)"  # fmt: skip
            problems.append(f"{p.phase}: {why}")
    if problems:
        cause = (
            "the client, not the server, limited the load: "
            if short
            else "the client sent late (rates reached, but arrivals burstier than scheduled; "
            "figures at these rates carry the client's stalls): "
        )
        detail = cause + "; ".join(problems) + _normal_priority_note(case)
    else:
        worst = max(points, key=lambda p: p.lateness_ms["p99"] or 0.0)
        ratios = [p.achieved_rps / p.offered_rps for p in points]
        detail = (
            f"worst lateness p99 {f(worst.lateness_ms['p99'], 2)} ms ({worst.phase}); "
            f"achieved/offered {min(ratios):.3f}–{max(ratios):.3f}"
        )
    return Verdict(case=check.case, check=name, passed=not problems, detail=detail)


def client_shortfall(point: SweepPoint, max_rate_error: float) -> str | None:
    """Why the client did not deliver ``point``'s offered rate (achieved more than
    ``max_rate_error`` short of or over it), or ``None`` when it did."""
    if abs(point.achieved_rps - point.offered_rps) <= max_rate_error * point.offered_rps:
        return None
    return (
        f"the client sent {f(point.achieved_rps, 2)} of the offered "
        f"{f(point.offered_rps, 2)} req/s at {point.phase} (more than "
        f"{pct(max_rate_error)} % off)"
    )


def _undecided_unless_delivered(verdict: Verdict, why_not: str | None) -> Verdict:
    """A failed verdict about the server becomes undecided when the load it judges was not
    delivered as scheduled (``why_not``): the server was not offered what it is judged on."""
    if verdict.passed is not False or why_not is None:
        return verdict
    detail = (
        f"undecided: {why_not}, so the server was not offered this load as scheduled; "
        f"{verdict.detail}"
    )
    return Verdict(case=verdict.case, check=verdict.check, passed=None, detail=detail)


def _lowest(check: LowestRateAttains, _: CaseSummary, d: SLOGoodputDetails | None) -> Verdict:
    name = f"attainment at the lowest rate ≥ {pct(check.target)} %"
    points = _points(d)
    if not points or points[0].attainment is None:
        return _missing(check, name)
    low = points[0]
    assert low.attainment is not None
    detail = f"{low.phase}: {pct(low.attainment)} % ({low.good}/{low.counted} good)"
    why_not = client_shortfall(low, check.max_rate_error)
    late = low.lateness_ms["p99"]
    if why_not is None and (late is None or late >= check.max_lateness_p99_ms):
        why_not = (
            f"the client sent late at {low.phase} (lateness p99 {f(late, 2)} ms ≥ "
            f"{check.max_lateness_p99_ms:g} ms: burstier arrivals than scheduled, tokens "
            "stamped late)"
        )
    verdict = Verdict(
        case=check.case, check=name, passed=low.attainment >= check.target, detail=detail
    )
    return _undecided_unless_delivered(verdict, why_not)


def _collapse(check: OverloadCollapse, _: CaseSummary, d: SLOGoodputDetails | None) -> Verdict:
    name = (
        f"collapse at the top rate: goodput ≤ {pct(check.max_goodput_share)} % of completed, "
        f"completed ≥ {pct(check.min_completed_share)} % of saturation"
    )
    points = _points(d)
    sat = d.saturation.closed_loop_rps if d is not None and d.saturation else None
    if not points or sat is None:
        return _missing(check, name)
    top = points[-1]
    share, busy = _top_shares(top, sat)
    passed = share is not None and share <= check.max_goodput_share
    passed = passed and busy is not None and busy >= check.min_completed_share
    detail = (
        f"{top.phase}: goodput {f(top.goodput_rps, 2)} of completed {f(top.completed_rps, 2)} "
        f"req/s ({pct(share)} %); completed pro rata {f(top.completed_prorata_rps, 2)} req/s "
        f"= {pct(busy)} % of saturation {f(sat, 2)} req/s; waiting peak "
        f"{f(top.waiting_peak, 0)}"
    )
    verdict = Verdict(case=check.case, check=name, passed=passed, detail=detail)
    return _undecided_unless_delivered(verdict, client_shortfall(top, check.max_rate_error))


def _bracketed(check: MaxRateBracketed, _: CaseSummary, d: SLOGoodputDetails | None) -> Verdict:
    name = f"maximum sustainable rate (≥ {pct(check.target)} % attainment) bracketed"
    if d is None or not d.points:
        return _missing(check, name)
    return Verdict(
        case=check.case, check=name, passed=d.answer.bracketed, detail=d.answer.statement
    )


def _late(check: LateFiguresAgree, _: CaseSummary, d: SLOGoodputDetails | None) -> Verdict:
    name = "figures resolved at run time agree with their recomputation from the raw files"
    if d is None or not d.late_figures:
        return Verdict(case=check.case, check=name, passed=True, detail="none to check")
    # Disagreement is evidence; a figure the run did not record or the raw files cannot give
    # again (agrees is None) decides nothing, so it leaves the check undecided, not failed.
    bad = [x for x in d.late_figures if x.agrees is False]
    unknown = [x for x in d.late_figures if x.agrees is None]
    shown = bad or unknown or d.late_figures[:3]
    detail = "; ".join(f"{x.name}: used {f(x.used, 4)}, recomputed {f(x.recomputed, 4)}"
                       for x in shown)  # fmt: skip
    if bad:
        return Verdict(case=check.case, check=name, passed=False, detail=detail)
    if unknown:
        detail = f"cannot decide: {len(unknown)} figure(s) without both values: {detail}"
        return Verdict(case=check.case, check=name, passed=None, detail=detail)
    detail = f"all {len(d.late_figures)} agree, e.g. {detail}"
    return Verdict(case=check.case, check=name, passed=True, detail=detail)


# --- Markdown -----------------------------------------------------------------------------------

DEFINITIONS = [
    "A request is **good** when it succeeded and every given SLO holds with ≤ (a value exactly "
    "on the limit is good). TPOT exists only for outputs of 2+ tokens: a 1-token output is "
    "judged on its other SLOs.",
    "Each rate's **measurement window** is [t0 + warm-up, t0 + duration) of its schedule; the "
    "warm-up's requests are sent and recorded but not counted (each phase starts on an idle "
    "server). **Counted** requests are those scheduled inside the window, whatever happened to "
    "them later.",
    "**SLO attainment** = good ÷ all counted requests (failures, time-outs and aborts count "
    "against it); per SLO: succeeded and met that SLO ÷ all counted.",
    "**Rates** count events inside the window ÷ its length: offered = scheduled, achieved = "
    "sent, completed = successful completions, goodput = completions of good requests. "
    "Completions, because past saturation the backlog completes after the window at the "
    "server's maximum rate. **Completed pro rata** credits each success with the share of its "
    "tokens that arrived in the window (a batch finishing at an edge moves it by a fraction, "
    "not a whole batch); the collapse check compares it with saturation.",
    "**Percentiles** are over successful counted requests, with the failures beside them; the "
    "error-adjusted view ranks failures above every success ('fail' where a quantile falls "
    "on one).",
    "**Maximum sustainable rate** = the highest offered rate with attainment ≥ the target, "
    "interpolated linearly in attainment between the two measured rates that bracket it.",
]


def _q(q: Quantiles | None, key: str, digits: int = 0) -> str:
    """One quantile of ``q``; a server histogram's quantile inside its first bucket shows as
    "≤ bound" (the interpolation there says nothing finer)."""
    if q is None:
        return "–"
    value, first = q.get(key), q.get("first_bucket_ms")
    if value is not None and first is not None and value <= first:
        return f"≤{first:g}"
    return f(value, digits)


def _adj(q: Quantiles, key: str) -> str:
    value = q.get(key)
    return "fail" if value is None else f(value, 0)


def _answer_lines(d: SLOGoodputDetails) -> list[str]:
    a = d.answer
    out = ["## The capacity-planning answer", "", f"**{a.statement}**", ""]
    if a.target_rps is not None:
        if a.replicas is not None:
            out += [
                f"For {f(a.target_rps, 2)} req/s: **{a.replicas} replica(s)** = ⌈"
                f"{f(a.target_rps, 2)} ÷ {f(a.max_rate_rps, 2)}⌉, assuming {a.assumption}.",
                "",
            ]
        else:
            out += [f"For {f(a.target_rps, 2)} req/s: no replica count (no sustainable rate).", ""]
    return out


def _slo_lines(d: SLOGoodputDetails) -> list[str]:
    out = ["## SLOs", ""]
    for s in d.slo:
        out.append(f"- {s.metric.upper()} ≤ {f(s.limit_ms, 1)} ms — {s.source}")
    if d.unloaded is not None:
        u = d.unloaded
        out += [
            "",
            f"Unloaded probe (one request at a time, {u.requests} requests after a "
            f"{u.warmup_s:g} s warm-up): TTFT p50 {f(u.ttft_p50_ms)} ms, TPOT p50 "
            f"{f(u.tpot_p50_ms)} ms, E2EL p50 {f(u.e2el_p50_ms)} ms.",
        ]
    return [*out, ""]


def _saturation_lines(d: SLOGoodputDetails) -> list[str]:
    s = d.saturation
    if s is None:
        return []
    return [
        "## Saturation",
        "",
        f"Closed loop at {s.concurrency} in flight: **{f(s.closed_loop_rps, 2)} req/s** = "
        f"{s.concurrency} ÷ mean time in flight {f(s.mean_in_flight_s, 3)} s over "
        f"{s.requests} requests (Little's law; window {f(s.window_s)} s after a "
        f"{d.warmup_s:g} s warm-up). Direct count of completions in the window: "
        f"{f(s.window_completed_rps, 2)} req/s (off by up to one batch: completions come in "
        f"bursts). TTFT p50 {f(s.ttft_p50_ms, 0)} ms, TPOT p50 {f(s.tpot_p50_ms)} ms; running "
        f"peak {f(s.running_peak, 0)}, waiting peak {f(s.waiting_peak, 0)}.",
        "",
    ]


def _sweep_lines(d: SLOGoodputDetails) -> list[str]:
    slos = [s.metric for s in d.slo]
    headers = ["phase", "rate", "offered", "achieved", "completed whole/pro rata", "goodput",
               "attainment %", *(f"{m.upper()} att. %" for m in slos), "counted", "failed",
               "late p50/p99/max ms", "TTFT p50/p90/p99", "TPOT p50/p90/p99", "E2EL p50/p90/p99",
               "waiting mean/peak", "KV peak %", "preempt."]  # fmt: skip
    rows = []
    for p in d.points:
        rows.append([
            p.phase, f"{f(p.rate_rps, 2)} ({p.rate_source})", f(p.offered_rps, 2),
            f(p.achieved_rps, 2), f"{f(p.completed_rps, 2)}/{f(p.completed_prorata_rps, 2)}",
            f(p.goodput_rps, 2), pct(p.attainment),
            *(pct(p.attainment_by_slo.get(m)) for m in slos), str(p.counted), str(p.failed),
            f"{_q(p.lateness_ms, 'p50', 2)}/{_q(p.lateness_ms, 'p99', 2)}/"
            f"{f(p.lateness_max_ms, 1)}",
            f"{_q(p.ttft_ms, 'p50')}/{_q(p.ttft_ms, 'p90')}/{_q(p.ttft_ms, 'p99')}",
            f"{_q(p.tpot_ms, 'p50', 1)}/{_q(p.tpot_ms, 'p90', 1)}/{_q(p.tpot_ms, 'p99', 1)}",
            "/".join(_q(p.e2el_ms, k) for k in ("p50", "p90", "p99")),
            f"{f(p.waiting_mean, 1)}/{f(p.waiting_peak, 0)}", pct(p.kv_peak),
            f(p.preemptions, 0),
        ])  # fmt: skip
    out = [
        "## The sweep",
        "",
        f"Rates in req/s over each rate's window ({d.duration_s or 0:g} s of sending minus a "
        f"{d.warmup_s:g} s warm-up); latencies in ms over successful counted requests.",
        "",
        table(headers, rows),
        "",
    ]
    detail_headers = ["phase", "ITL p50/p90/p99", "TTFT adj. p50/p90/p99", "E2EL adj. p50/p90/p99",
                      "server TTFT p50/p99", "client TTFT p50/p99 (first token in window)",
                      "server queue p50/p99", "running peak", "slot wait p50/p99"]  # fmt: skip
    detail_rows = [
        [p.phase, "/".join(_q(p.itl_ms, k, 1) for k in ("p50", "p90", "p99")),
         "/".join(_adj(p.ttft_adjusted_ms, k) for k in ("p50", "p90", "p99")),
         "/".join(_adj(p.e2el_adjusted_ms, k) for k in ("p50", "p90", "p99")),
         f"{_q(p.server_ttft_ms, 'p50')}/{_q(p.server_ttft_ms, 'p99')}",
         f"{_q(p.client_ttft_first_token_in_window_ms, 'p50')}/"
         f"{_q(p.client_ttft_first_token_in_window_ms, 'p99')}",
         f"{_q(p.server_queue_ms, 'p50')}/{_q(p.server_queue_ms, 'p99')}",
         f(p.running_peak, 0),
         "–" if p.slot_wait_ms is None else f"{_q(p.slot_wait_ms, 'p50')}/"
                                            f"{_q(p.slot_wait_ms, 'p99')}"]
        for p in d.points
    ]  # fmt: skip
    out += [
        "Error-adjusted latencies and the server's own view over the same windows (ms): vLLM's "
        "TTFT and queue-time histograms (bucket deltas over the window, Prometheus "
        "interpolation; their observations are the requests whose first token, or whose "
        "scheduling, fell in the window; '≤ b' = inside the first bucket, whose bound is b) "
        "beside the client's TTFT of the requests whose first token came in the window. "
        "Slot wait = time an arrival waited for a --max-concurrency slot at the client (not "
        "server time).",
        "",
        table(detail_headers, detail_rows),
        "",
    ]
    return out


def _late_lines(d: SLOGoodputDetails) -> list[str]:
    if not d.late_figures:
        return []
    rows = [[x.name, x.inputs, f(x.used, 4), f(x.recomputed, 4),
             {True: "yes", False: "NO", None: "–"}[x.agrees]] for x in d.late_figures]  # fmt: skip
    return [
        "## Figures resolved while the run ran",
        "",
        "Rates and SLOs the plan left to the run (written in plan.json as 'factor × statistic of "
        "a phase'), as the run resolved and recorded them in phases.jsonl, and as recomputed "
        "here from the raw records; the report uses the recomputed values.",
        "",
        table(["figure", "from", "used by the run", "recomputed", "agree"], rows),
        "",
    ]


class SLOGoodputReport(ScenarioReport[SLOGoodputDetails]):
    evaluators: ClassVar[dict[type, Evaluator]] = {
        RatesOrdered: _ordered,
        ClientKeptUp: _client,
        LowestRateAttains: _lowest,
        OverloadCollapse: _collapse,
        MaxRateBracketed: _bracketed,
        LateFiguresAgree: _late,
    }

    def details(self, run: RunData, cases: dict[str, CaseSummary]) -> SLOGoodputDetails | None:
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
        duration = (
            first.arrival.duration_s if first and isinstance(first.arrival, OpenLoop) else None
        )
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

    def phase_columns(self, details: SLOGoodputDetails | None) -> list[PhaseColumn]:
        points = {p.phase: p for p in _points(details)}

        def cell(key: str) -> Any:
            def text(_case: str, phase: str) -> str:
                p = points.get(phase)
                if p is None:
                    return ""
                value = getattr(p, key)
                return pct(value) if key == "attainment" else f(value, 2)

            return text

        return [
            PhaseColumn("offered req/s", "failed", cell("offered_rps")),
            PhaseColumn("completed req/s", "failed", cell("completed_rps")),
            PhaseColumn("goodput req/s", "failed", cell("goodput_rps")),
            PhaseColumn("attainment %", "failed", cell("attainment")),
        ]

    def markdown(self, details: SLOGoodputDetails | None) -> list[str]:
        if details is None:
            return []
        out = _answer_lines(details)
        out += ["## Definitions", ""] + [f"- {line}" for line in DEFINITIONS] + [""]
        out += _slo_lines(details) + _saturation_lines(details) + _sweep_lines(details)
        if details.top_rate_text:
            out += ["## The collapse at the top rate", "", details.top_rate_text, ""]
        out += _late_lines(details)
        return out

    def plots(
        self,
        run: RunData,
        cases: dict[str, CaseSummary],
        details: SLOGoodputDetails | None,
        out_dir: Path,
    ) -> list[Path]:
        if details is None or not details.points:
            return []
        case = next(c for c in run.cases if c.name == details.case)
        return draw_plots(case, details, out_dir)


REPORT = SLOGoodputReport()
