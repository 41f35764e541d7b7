"""trace-replay's fleet capacity answer (``analysis.fleet_capacity``) from a run's files: the
slice's requests and arrivals from the plan, the cost fitted on every case's unqueued
requests, and each case's measured sustainable speedup beside the prediction for its N and
policy."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import pandas as pd

from analysis.fleet import FleetData, load_fleet
from analysis.fleet_capacity import (
    MAX_FLEET,
    Arrivals,
    FleetCapacity,
    MeasuredCapacity,
    compare_measured,
    fleet_capacity,
    policy_point,
)
from analysis.fleet_engine_fit import CPU_BUDGET_TOKENS, CPU_MAX_SEQS, fit_step_cost
from analysis.goodput import SLOLimits
from analysis.latency import request_frame
from analysis.load import RunData
from analysis.replica_attribution import served_by
from loadgen.case.fleet import routing_name
from scenarios.arrivals import TraceArrival
from scenarios.fleet.model import GATEWAY_POLICIES
from scenarios.fleet.requests import workload_fleet_requests
from scenarios.workloads import TracePrompts

#: Most requests in a slice for which the report works out the fleet capacity answer (it
#: replays the fleet model and the queue per policy for every N up to ``MAX_FLEET``).
CAPACITY_MAX_REQUESTS = 2000


def arrivals_of(arrival: TraceArrival) -> Arrivals:
    """The phase's arrivals at speedup 1 (ms → s)."""
    return Arrivals(
        offsets_s=tuple(None if o is None else o / 1e3 for o in arrival.offsets_ms),
        follows=arrival.follows,
        delays_s=tuple(d / 1e3 for d in arrival.delays_ms),
        compress_delays=arrival.compress_delays,
    )


#: Per case: (highest speedup that met the target, next one measured, interpolation), each
#: ``None`` where the sweep has none (``details.CapacityAnswer``'s fields).
Brackets = Mapping[str, tuple[float | None, float | None, float | None]]


def measured_cases(run: RunData, brackets: Brackets) -> list[MeasuredCapacity]:
    """Each case's measured sustainable speedup, with its policy and N; a case that killed a
    replica is left out (its fleet was not N replicas throughout)."""
    out = []
    for spec in run.plan.cases:
        if spec.name not in brackets or any(p.faults for p in run.plan.phases_of(spec)):
            continue
        lower, upper, interpolated = brackets[spec.name]
        out.append(MeasuredCapacity(
            case=spec.name, policy=routing_name(spec), replicas=spec.replicas,
            lower_speedup=lower, upper_speedup=upper, interpolated=interpolated,
        ))  # fmt: skip
    return out


def served_upstreams(cdir: Path, fleet: FleetData | None, frame: pd.DataFrame) -> pd.DataFrame:
    """``frame`` (the request frame, ``analysis.latency.request_frame``, of the case in
    ``cdir`` with ``fleet``'s replicas) with each request's ``upstream`` where the gateway
    named none filled with the URL of the replica that served it by the replicas' own logs
    (``analysis.replica_attribution.served_by``: behind vllm-router), so the step-cost fit
    tells the replicas apart; unchanged for a case that is not a fleet (``fleet`` ``None``)
    or whose replicas' logs do not decide."""
    upstream = frame["upstream"] if "upstream" in frame else pd.Series(None, index=frame.index)
    if fleet is None or frame.empty or upstream.notna().all():
        return frame
    served, _ = served_by(cdir, fleet, frame)
    if served is None:
        return frame
    ids = frame["request_id"] if "request_id" in frame else pd.Series(None, index=frame.index)
    logged = [None if (k := served.get(str(i))) is None else fleet.replica_urls[k] for i in ids]
    named = upstream.where(upstream.notna(), pd.Series(logged, index=frame.index, dtype=object))
    return frame.assign(upstream=named)


def _flag(args: Sequence[str], name: str) -> int | None:
    """The integer value of ``--name N`` or ``--name=N`` in ``args`` (the last one given)."""
    found = None
    for i, arg in enumerate(args):
        if arg == name and i + 1 < len(args):
            found = args[i + 1]
        elif arg.startswith(name + "="):
            found = arg.split("=", 1)[1]
    try:
        return None if found is None else int(found)
    except ValueError:
        return None  # vLLM itself refuses such a flag: the run has no engine to model


def batch_limits(run: RunData) -> tuple[int, int]:
    """The engine's token budget per step and sequence cap: the first case's
    ``--max-num-batched-tokens`` and ``--max-num-seqs`` (its extra server arguments, or its
    ``max_num_seqs``), else vLLM's CPU defaults (``analysis.fleet_engine_fit``)."""
    budget, seqs = CPU_BUDGET_TOKENS, CPU_MAX_SEQS
    server = run.plan.cases[0].server if run.plan.cases else None
    if server is not None:
        args = list(server.extra_args)
        budget = _flag(args, "--max-num-batched-tokens") or budget
        seqs = _flag(args, "--max-num-seqs") or server.max_num_seqs or seqs
    return budget, seqs


def run_fleet_capacity(
    run: RunData, sizing: tuple[int, int] | None, brackets: Brackets, slo: SLOLimits
) -> FleetCapacity | None:
    """The fleet capacity answer for the run's policies (the gateway's three for a run
    without a router) on replicas of ``sizing`` (usable blocks, block tokens), fitted on every
    case's unqueued requests, with the checks against each case's measured ``brackets``;
    ``None`` without sizing, a cost fit or a timed trace phase, or above
    :data:`CAPACITY_MAX_REQUESTS`."""
    plan = run.plan
    phase = next((p for p in plan.phases if isinstance(p.workload, TracePrompts)), None)
    if phase is None or sizing is None or not isinstance(phase.arrival, TraceArrival):
        return None
    workload = phase.workload
    assert isinstance(workload, TracePrompts)
    capacity_blocks, block_tokens = sizing
    at = arrivals_of(phase.arrival)
    if (len(workload.items) > CAPACITY_MAX_REQUESTS or at.span_s <= 0
            or len(at.offsets_s) != len(workload.items)):  # fmt: skip
        return None
    frames = {c.name: served_upstreams(run.run_dir / "cases" / c.name,
                                       load_fleet(run.run_dir, c), f)
              for c in run.cases if not (f := request_frame(c.records)).empty}  # fmt: skip
    budget, seqs = batch_limits(run)
    pooled = pd.concat(frames.values()) if frames else pd.DataFrame()
    cost = fit_step_cost(pooled, budget, seqs)
    if cost is None:
        return None
    requests = workload_fleet_requests(workload, range(len(workload.items)), plan.seed,
                                       block_tokens, space=plan.tokens)  # fmt: skip
    routed = [routing_name(c) for c in plan.cases]
    policies = list(dict.fromkeys(r for r in routed if r is not None)) or list(GATEWAY_POLICIES)
    target = plan.params.get("target_speedup")
    judged = (slo, float(plan.params["attainment"]))  # type: ignore[arg-type]
    answer = fleet_capacity(
        requests, policies, (capacity_blocks, block_tokens), cost, at, judged,
        None if target is None else float(target),  # type: ignore[arg-type]
    )  # fmt: skip
    measured = [m for m in measured_cases(run, brackets) if m.replicas <= MAX_FLEET]
    own = {}
    for m in measured:
        case_cost = fit_step_cost(frames[m.case], budget, seqs) if m.case in frames else None
        if case_cost is not None:
            sizing_ = (capacity_blocks, block_tokens)
            own[m.case] = policy_point(requests, m.policy or policies[0], m.replicas, sizing_,
                                     case_cost, at, judged)  # fmt: skip
    return answer.model_copy(update={"checks": compare_measured(answer, measured, own)})
