"""trace-replay's figures per case and phase, from the raw run files only.

Definitions (the report prints them):

- **Hit rate (counters)** = Δ``prefix_cache_hits`` ÷ Δ``prefix_cache_queries`` over the phase
  (tokens; vLLM's ``vllm:prefix_cache_{hits,queries}_total``).
- **Hit rate (requests)** = Σ ``usage.prompt_tokens_details.cached_tokens`` ÷ Σ prompt tokens
  over the phase's successful requests that reported it (``PhaseSummary.cached_token_rate``).
- **Predicted hit rate** = ``scenarios.prefix_cache_model.predict_hits`` over the phase's sent
  requests (their prompts' server blocks, ``server_block_keys``), with the case's real
  capacity (``num_gpu_blocks − 1`` usable blocks, ``usable_blocks``) and block size, in the
  order of the records' events: ``start`` at a request's ``sent_ns``, ``end`` at its
  ``end_ns`` (an end before a start at the same ns); when that order over-commits the pool,
  ``start`` at its first token instead (vLLM kept requests waiting; :func:`phase_predictions`).
  **Maximum hit rate**: the same with an unbounded cache (nothing evicted). **Sequential**:
  the real capacity, each request ending before the next starts (no concurrency), shown to
  tell what concurrency cost.
- **Scheduled rate** = (n − 1) ÷ ((last − first offset) ÷ speedup) over the timed requests (a
  session's later turns have no fixed time); **achieved rate** = (sent − 1) ÷ (last − first
  send) over the same requests; rate error = achieved ÷ scheduled − 1.
- **Goodput and attainment**: ``analysis.goodput`` (slo-goodput's definitions) over the window
  [first scheduled, last scheduled] of the phase: every request counts.
- **Sustainable speedup** (per case): ``analysis.goodput.max_sustainable_rate`` with the
  speedup as the rate: the highest speedup whose attainment ≥ the target, interpolated
  between the two measured speedups that bracket it; replicas for ``--target-speedup`` X =
  ⌈X ÷ sustainable⌉ (``replicas_needed``), only when bracketed.
"""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path
from typing import Any

import pandas as pd
from pydantic import BaseModel, ConfigDict

from analysis.fleet import FleetData, FleetFunnel, fleet_funnel, load_fleet, with_first_tokens
from analysis.fleet_capacity import FleetCapacity
from analysis.fleet_faults import KillFigures, kill_figures
from analysis.fleet_kv import ReplicaKv, case_kv_comparison, measured_events
from analysis.fleet_latency import RouterLatency, case_router_latency
from analysis.goodput import (
    RatePoint,
    SLOLimits,
    WindowRates,
    judge,
    max_sustainable_rate,
    replicas_needed,
    window_rates,
)
from analysis.latency import request_frame
from analysis.load import CaseData, RunData
from analysis.models import CaseSummary, PhaseSummary, Stats
from analysis.replica_attribution import served_by, served_per_replica
from analysis.reports.trace_replay.capacity import Brackets, run_fleet_capacity
from loadgen.measure import Window
from scenarios.arrivals import TraceArrival
from scenarios.fleet.requests import workload_fleet_requests
from scenarios.plan import PhaseSpec, Plan
from scenarios.prefix_cache_model import (
    CacheRequest,
    Prediction,
    predict_hits,
    server_block_keys,
    usable_blocks,
)
from scenarios.traces import TraceRequest
from scenarios.values import parse_slo
from scenarios.workloads import TracePrompts, trace_request_id


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class PhaseFigures(_Frozen):
    """One phase of one case (rates in req/s, hit rates and attainment 0–1, tokens)."""

    phase: str
    speedup: float
    planned: int
    sent: int
    ok: int
    failed: int
    timed: int
    scheduled_rate_rps: float | None
    achieved_rate_rps: float | None
    rate_error: float | None
    lateness_ms: Stats
    hits_counters: float | None
    queries_counters: float | None
    hit_rate_counters: float | None
    hit_rate_requests: float | None
    cached_reported: int
    predicted_hit_rate: float | None
    predicted_hit_tokens: int | None
    predicted_query_tokens: int | None
    predicted_short_requests: int | None
    sequential_hit_rate: float | None
    max_hit_rate: float | None
    requests_matching_prediction: int | None
    prediction_gap: float | None
    ttft_ms: Stats
    tpot_ms: Stats
    itl_ms: Stats
    e2el_ms: Stats
    window_s: float | None
    goodput_rps: float | None
    completed_rps: float | None
    attainment: float | None
    attainment_by_slo: dict[str, float]
    kv_usage_peak: float | None
    preemptions: float | None
    waiting_peak: float | None
    running_peak: float | None
    #: A fleet case: the cache funnel and load per replica (``analysis.fleet``); its
    #: measured and predicted hit rates are the ones above.
    fleet: FleetFunnel | None = None


class CapacityAnswer(_Frozen):
    """The highest speedup meeting the attainment target in one case, and the replicas a
    planned growth needs (``None`` when it does not follow from the sweep)."""

    target_attainment: float
    sustainable_speedup: float | None
    lower_phase: str | None
    lower_speedup: float | None
    lower_attainment: float | None
    upper_phase: str | None
    upper_speedup: float | None
    upper_attainment: float | None
    bracketed: bool
    target_speedup: float | None
    replicas: int | None
    text: str


class CaseFigures(_Frozen):
    capacity_blocks: int | None
    block_size: int | None
    phases: dict[str, PhaseFigures]
    answer: CapacityAnswer
    #: A fleet case's KV-cache events beside the model, per replica (``analysis.fleet_kv``).
    kv_events: list[ReplicaKv] | None = None
    #: A fleet case whose first phase killed a replica: its requests and remapped keys
    #: (``analysis.fleet_faults``).
    kill: KillFigures | None = None
    #: A fleet case: what its router adds to TTFT, per phase (``analysis.fleet_latency``).
    router_latency: dict[str, RouterLatency] = {}


class TraceReplayDetails(_Frozen):
    trace_path: str
    trace_sha256: str
    token_scale: str
    slice_requests: int
    sent_per_phase: int
    skipped: int
    truncated: int
    too_long: str
    max_model_len: int
    slo_ms: dict[str, float]
    hit_rate_tolerance: float
    cases: dict[str, CaseFigures]
    #: The replicas a target speedup needs per policy (``analysis.fleet_capacity``).
    fleet_capacity: FleetCapacity | None = None


def slo_limits(plan: Plan) -> SLOLimits:
    """The plan's SLOs (``--slo``, ms)."""
    given = parse_slo(str(plan.params["slo"]))
    return SLOLimits(
        ttft_ms=given.get("ttft"), tpot_ms=given.get("tpot"), e2el_ms=given.get("e2el")
    )


def _ratio(num: float | None, den: float | None) -> float | None:
    if num is None or den is None or den == 0:
        return None
    return num / den


def _int(value: Any) -> int | None:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return None
    return int(value)


def cache_requests(workload: TracePrompts, indices: list[int], block: int) -> list[CacheRequest]:
    """The model's view of the requests ``indices`` of a trace workload, blocks of ``block``."""
    out = []
    for i in indices:
        item = workload.items[i]
        request = TraceRequest(
            line=item.line,
            timestamp_ms=None,
            input_length=item.input_tokens,
            output_length=item.output_tokens,
            hash_ids=item.hash_ids,
        )
        out.append(
            CacheRequest(
                request_id=f"L{item.line}",
                block_keys=server_block_keys(request, workload.block_tokens, block),
                prompt_tokens=item.input_tokens,
                output_tokens=item.output_tokens,
            )
        )
    return out


def phase_predictions(
    workload: object, rows: pd.DataFrame, capacity_blocks: int | None, block: int | None
) -> tuple[Prediction, Prediction, Prediction, pd.DataFrame] | None:
    """(predicted, maximum, sequential, sent rows in order) for a phase's ``workload`` (a
    :class:`TracePrompts`; anything else has no prediction) and its request ``rows``, or
    ``None`` without the numbers.

    Predicted and maximum replay the records' order with each request admitted when sent,
    unless that over-commits the pool (a request would start with blocks the pool could not
    give): then vLLM must have kept requests waiting, and admitted each no later than its
    first token, so every request is admitted at its first token instead (the short count
    stays the send order's, to say why)."""
    if not isinstance(workload, TracePrompts) or block is None or capacity_blocks is None:
        return None
    sent = rows[rows["sent_ns"].notna()].sort_values("index")
    if sent.empty:
        return None
    requests = cache_requests(workload, [int(i) for i in sent["index"]], block)
    events = measured_events(sent)
    predicted = predict_hits(requests, capacity_blocks, block, events)
    if predicted.short_requests and "chunk_ns" in sent:
        events = measured_events(sent, at_first_token=True)
        admitted = predict_hits(requests, capacity_blocks, block, events)
        predicted = replace(admitted, lent_blocks=predicted.lent_blocks)
    return (
        predicted,
        predict_hits(requests, None, block, events),
        predict_hits(requests, capacity_blocks, block, None),
        sent,
    )


def _rates(spec: PhaseSpec, rows: pd.DataFrame) -> tuple[int, float | None, float | None]:
    """(timed requests, scheduled req/s, achieved req/s), see the module docstring."""
    arrival = spec.arrival
    if not isinstance(arrival, TraceArrival):
        return 0, None, None
    timed = [i for i, f in enumerate(arrival.follows) if f is None]
    offsets = [arrival.offset_ns(i) for i in timed]
    scheduled = None
    if len(offsets) >= 2 and max(offsets) > min(offsets):
        scheduled = (len(offsets) - 1) / ((max(offsets) - min(offsets)) / 1e9)
    timed_set = set(timed)
    sent = rows[rows["index"].isin(timed_set) & rows["sent_ns"].notna()]["sent_ns"]
    achieved = None
    if len(sent) >= 2 and sent.max() > sent.min():
        achieved = (len(sent) - 1) / ((float(sent.max()) - float(sent.min())) / 1e9)
    return len(timed), scheduled, achieved


def _fleet_funnel(
    spec: PhaseSpec,
    case: CaseData,
    plan: Plan,
    fleet: FleetData,
    sent: pd.DataFrame,
    capacity: tuple[int | None, int | None],
) -> FleetFunnel | None:
    """The phase's funnel (``analysis.fleet``), or ``None`` without the numbers it needs."""
    capacity_blocks, block = capacity
    row = next((r for r in case.phases if r.phase == spec.name), None)
    workload = spec.workload
    if row is None or capacity_blocks is None or block is None or sent.empty:
        return None
    assert isinstance(workload, TracePrompts)
    indices = [int(i) for i in sent["index"]]
    requests = workload_fleet_requests(workload, indices, plan.seed, block, space=plan.tokens)
    events = with_first_tokens(measured_events(sent), sent)
    return fleet_funnel(fleet, requests, events, capacity_blocks, block, (row.start_ns, row.end_ns))


def _with_served(
    funnel: FleetFunnel, served: tuple[dict[str, int | None] | None, str], sent: pd.DataFrame
) -> FleetFunnel:
    """``funnel`` with the requests each replica served, counted request by request from
    ``served`` (``analysis.replica_attribution.served_by``) over the phase's ``sent`` rows."""
    by_id, basis = served
    per = None
    if by_id is not None:
        placed = [by_id.get(str(i)) for i in sent["request_id"]]
        per = served_per_replica(placed, funnel.replicas)
    return funnel.model_copy(update={"served_per_replica": per, "served_basis": basis})


def _slo_rates(rows: pd.DataFrame, slo: SLOLimits) -> WindowRates | None:
    """Goodput and attainment over the phase's scheduling window (``None`` without one)."""
    if rows.empty or not rows["scheduled_ns"].notna().any():
        return None
    judged = judge(rows, slo)
    window = Window(int(rows["scheduled_ns"].min()), int(rows["scheduled_ns"].max()))
    return window_rates(judged, window, slo) if window.length_s > 0 else None


def _prediction_fields(predicted: Prediction | None, fleet: FleetFunnel | None) -> dict[str, Any]:
    """The predicted hit rate and tokens: a fleet's from its policy's model, else the single
    server's (``None`` each without a prediction)."""
    if fleet is not None:
        return {
            "predicted_hit_rate": fleet.predicted,
            "predicted_hit_tokens": fleet.predicted_hit_tokens,
            "predicted_query_tokens": fleet.predicted_query_tokens,
        }
    return {
        "predicted_hit_rate": None if predicted is None else predicted.hit_rate,
        "predicted_hit_tokens": None if predicted is None else predicted.total_hit_tokens,
        "predicted_query_tokens": None if predicted is None else predicted.total_query_tokens,
    }


def _summary_fields(p: PhaseSummary | None) -> dict[str, Any]:
    """The phase's figures taken as the run summary has them (empty ones without a summary)."""
    return {
        "ok": p.ok if p else 0,
        "failed": p.failed if p else 0,
        "lateness_ms": p.send_lateness_ms if p else Stats(),
        "hit_rate_requests": p.cached_token_rate if p else None,
        "cached_reported": p.cached_reported if p else 0,
        "ttft_ms": p.ttft_ms if p else Stats(),
        "tpot_ms": p.tpot_ms if p else Stats(),
        "itl_ms": p.itl_ms if p else Stats(),
        "e2el_ms": p.e2el_ms if p else Stats(),
        "kv_usage_peak": p.gauge_peaks.get("kv_cache_usage_perc") if p else None,
        "preemptions": p.counter_deltas.get("num_preemptions") if p else None,
        "waiting_peak": p.gauge_peaks.get("num_requests_waiting") if p else None,
        "running_peak": p.gauge_peaks.get("num_requests_running") if p else None,
    }


def _phase(
    spec: PhaseSpec,
    frame: pd.DataFrame,
    summary: CaseSummary,
    capacity_blocks: int | None,
    block: int | None,
    slo: SLOLimits,
    fleet: FleetFunnel | None = None,
) -> PhaseFigures:
    p = summary.phases.get(spec.name)
    rows = frame[frame["phase"] == spec.name] if not frame.empty else frame
    assert isinstance(spec.arrival, TraceArrival)
    timed, scheduled, achieved = _rates(spec, rows)
    hits = p.counter_deltas.get("prefix_cache_hits") if p else None
    queries = p.counter_deltas.get("prefix_cache_queries") if p else None
    if fleet is not None:  # every replica's counters, summed
        hits, queries = fleet.hits, fleet.queries
    measured = _ratio(hits, queries)
    predicted = maximum = sequential = None
    matching = None
    predictions = (
        phase_predictions(spec.workload, rows, capacity_blocks, block) if not rows.empty else None
    )
    if predictions is not None:
        predicted, maximum, sequential, sent = predictions
        cached = [_int(c) for c in sent["cached_tokens"]]
        ok = list(sent["status"] == "ok")
        matching = sum(
            1
            for c, good, h in zip(cached, ok, predicted.hit_tokens, strict=True)
            if good and c == h
        )
    rates = _slo_rates(rows, slo)
    return PhaseFigures(
        phase=spec.name,
        speedup=spec.arrival.speedup,
        planned=len(spec.arrival.offsets_ms),
        sent=int(rows["sent_ns"].notna().sum()) if not rows.empty else 0,
        timed=timed,
        scheduled_rate_rps=scheduled,
        achieved_rate_rps=achieved,
        rate_error=None if achieved is None or not scheduled else achieved / scheduled - 1,
        hits_counters=hits,
        queries_counters=queries,
        hit_rate_counters=measured,
        **_prediction_fields(predicted, fleet),
        predicted_short_requests=None if predicted is None else predicted.short_requests,
        sequential_hit_rate=None if sequential is None else sequential.hit_rate,
        max_hit_rate=None if maximum is None else maximum.hit_rate,
        requests_matching_prediction=matching,
        prediction_gap=_gap(measured, predicted, fleet),
        window_s=None if rates is None else rates.window_s,
        goodput_rps=None if rates is None else rates.goodput_rps,
        completed_rps=None if rates is None else rates.completed_rps,
        attainment=None if rates is None else rates.attainment,
        attainment_by_slo={} if rates is None else rates.attainment_by_slo,
        **_summary_fields(p),
        fleet=fleet,
    )


def _gap(
    measured: float | None, predicted: Prediction | None, fleet: FleetFunnel | None
) -> float | None:
    """Measured − predicted hit rate; a fleet's against its policy's prediction (``None``
    for a bracket: its verdict reads the bracket)."""
    if measured is None:
        return None
    if fleet is not None:
        return None if fleet.predicted is None else measured - fleet.predicted
    return None if predicted is None else measured - predicted.hit_rate


def capacity_answer(
    phases: dict[str, PhaseFigures], target: float, target_speedup: float | None
) -> CapacityAnswer:
    """The sustainable speedup of one case (module docstring) and the sentence saying it."""
    points = [
        RatePoint(p.phase, p.speedup, p.attainment)
        for p in phases.values()
        if p.attainment is not None
    ]
    found = max_sustainable_rate(points, target)
    lower, upper = found.lower, found.upper
    replicas = None
    if not points:
        text = "no speedup was measured: no answer"
    elif lower is None:
        text = (
            f"not bracketed: even the lowest speedup measured ({upper.offered_rps:g}×, "
            f"attainment {upper.attainment:.3f}) misses the target {target:g}; the sustainable "
            "speedup is below it"
            if upper is not None
            else "no answer"
        )
    elif upper is None:
        text = (
            f"not bracketed: the highest speedup measured ({lower.offered_rps:g}×, attainment "
            f"{lower.attainment:.3f}) still meets the target {target:g}; the sustainable "
            "speedup is at least that (add a higher --speedup to bracket it)"
        )
        if target_speedup is not None:
            bound = replicas_needed(target_speedup, lower.offered_rps)
            text += f"; {target_speedup:g}× would need at most {bound} replica(s)"
    else:
        assert found.rate_rps is not None
        text = (
            f"sustainable speedup {found.rate_rps:.3f}× (attainment {target:g}), bracketed by "
            f"{lower.offered_rps:g}× (attainment {lower.attainment:.3f}) and "
            f"{upper.offered_rps:g}× ({upper.attainment:.3f})"
        )
        if target_speedup is not None:
            replicas = replicas_needed(target_speedup, found.rate_rps)
            text += (
                f"; {target_speedup:g}× the trace's traffic needs ⌈{target_speedup:g} ÷ "
                f"{found.rate_rps:.3f}⌉ = {replicas} replica(s)"
            )
    return CapacityAnswer(
        target_attainment=target,
        sustainable_speedup=found.rate_rps if found.bracketed else None,
        lower_phase=lower.phase if lower else None,
        lower_speedup=lower.offered_rps if lower else None,
        lower_attainment=lower.attainment if lower else None,
        upper_phase=upper.phase if upper else None,
        upper_speedup=upper.offered_rps if upper else None,
        upper_attainment=upper.attainment if upper else None,
        bracketed=found.bracketed,
        target_speedup=target_speedup,
        replicas=replicas,
        text=text,
    )


def _case(
    case: CaseData, summary: CaseSummary, plan: Plan, slo: SLOLimits, run_dir: Path
) -> CaseFigures:
    spec = case.spec or next(c for c in plan.cases if c.name == case.name)
    cap = summary.server.get("capacity") or {}
    block = _int(cap.get("block_size"))
    num_blocks = _int(cap.get("num_blocks"))
    capacity_blocks = None if num_blocks is None else usable_blocks(num_blocks)
    frame = request_frame(case.records)
    fleet = load_fleet(run_dir, case)
    cdir = run_dir / "cases" / case.name
    served = served_by(cdir, fleet, frame) if fleet is not None and not frame.empty else None
    phases = {}
    for ph in plan.phases_of(spec):
        if not isinstance(ph.arrival, TraceArrival):
            continue
        funnel = None
        if fleet is not None and served is not None:
            rows = frame[(frame["phase"] == ph.name) & frame["sent_ns"].notna()]
            sent = rows.sort_values("index")
            funnel = _fleet_funnel(ph, case, plan, fleet, sent, (capacity_blocks, block))
            funnel = funnel and _with_served(funnel, served, sent)
        phases[ph.name] = _phase(ph, frame, summary, capacity_blocks, block, slo, funnel)
    kv = None
    if fleet is not None and spec.record_kv_events and capacity_blocks and block:
        kv = case_kv_comparison(cdir, case.name, plan, frame, fleet, (capacity_blocks, block))
    kill = _kill(cdir, case, plan.phases_of(spec)) if fleet else None
    latency = case_router_latency(run_dir, case) if fleet else {}
    target_speedup = plan.params.get("target_speedup")
    answer = capacity_answer(
        phases,
        float(plan.params["attainment"]),  # type: ignore[arg-type]
        None if target_speedup is None else float(target_speedup),  # type: ignore[arg-type]
    )
    return CaseFigures(
        capacity_blocks=capacity_blocks, block_size=block, phases=phases, answer=answer,
        kv_events=kv, kill=kill, router_latency=latency,
    )  # fmt: skip


def _kill(cdir: Path, case: CaseData, phases: tuple[PhaseSpec, ...]) -> KillFigures | None:
    """The kill of the first phase that has one (``None`` without)."""
    spec = next((ph for ph in phases if ph.faults), None)
    if spec is None or not isinstance(spec.workload, TracePrompts):
        return None
    planned = [trace_request_id(spec.workload.salt, item.line) for item in spec.workload.items]
    return kill_figures(cdir, planned, [r for r in case.records if r.phase == spec.name])


def _sizing(figures: dict[str, CaseFigures]) -> tuple[int, int] | None:
    """(usable blocks, block tokens) of the first case that knows them."""
    sized = next((c for c in figures.values() if c.capacity_blocks and c.block_size), None)
    return None if sized is None else (sized.capacity_blocks or 0, sized.block_size or 0)


def _brackets(figures: dict[str, CaseFigures]) -> Brackets:
    """Per case, its measured bracket of the sustainable speedup and the interpolation."""
    return {name: (c.answer.lower_speedup, c.answer.upper_speedup, c.answer.sustainable_speedup)
            for name, c in figures.items()}  # fmt: skip


def trace_details(run: RunData, cases: dict[str, CaseSummary]) -> TraceReplayDetails:
    """The scenario's section of the report (module docstring)."""
    plan = run.plan
    sizing = plan.sizing
    slo = slo_limits(plan)
    figures = {c.name: _case(c, cases[c.name], plan, slo, run.run_dir) for c in run.cases}
    return TraceReplayDetails(
        trace_path=str(sizing.get("trace_path")),
        trace_sha256=str(sizing.get("trace_sha256")),
        token_scale=str(sizing.get("token_scale")),
        slice_requests=int(sizing.get("in_slice") or 0),  # type: ignore[call-overload]
        sent_per_phase=int(sizing.get("sent_per_phase") or 0),  # type: ignore[call-overload]
        skipped=int(sizing.get("skipped") or 0),  # type: ignore[call-overload]
        truncated=int(sizing.get("truncated") or 0),  # type: ignore[call-overload]
        too_long=str(sizing.get("too_long")),
        max_model_len=int(sizing.get("max_model_len") or 0),  # type: ignore[call-overload]
        slo_ms=slo.given(),
        hit_rate_tolerance=float(plan.params["hit_rate_tolerance"]),  # type: ignore[arg-type]
        cases=figures,
        fleet_capacity=run_fleet_capacity(run, _sizing(figures), _brackets(figures), slo),
    )
