"""trace-replay's fleet capacity answer (``analysis.fleet_capacity``) from a run's files: the
slice's requests and arrivals from the plan, the cost fitted on every case's unqueued
requests, and each case's measured sustainable speedup beside the prediction for its N and
policy."""

from __future__ import annotations

from collections.abc import Mapping

import pandas as pd

from analysis.fleet_capacity import (
    Arrivals,
    FleetCapacity,
    MeasuredCapacity,
    compare_measured,
    fit_service_cost,
    fleet_capacity,
)
from analysis.goodput import SLOLimits
from analysis.latency import request_frame
from analysis.load import RunData
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
    frames = [f for f in (request_frame(c.records) for c in run.cases) if not f.empty]
    cost = fit_service_cost(pd.concat(frames) if frames else pd.DataFrame())
    if cost is None:
        return None
    requests = workload_fleet_requests(workload, range(len(workload.items)), plan.seed,
                                       block_tokens, space=plan.tokens)  # fmt: skip
    routed = [routing_name(c) for c in plan.cases]
    policies = list(dict.fromkeys(r for r in routed if r is not None)) or list(GATEWAY_POLICIES)
    target = plan.params.get("target_speedup")
    answer = fleet_capacity(
        requests, policies, (capacity_blocks, block_tokens), cost, at,
        (slo, float(plan.params["attainment"])),  # type: ignore[arg-type]
        None if target is None else float(target),  # type: ignore[arg-type]
    )  # fmt: skip
    return answer.model_copy(
        update={"checks": compare_measured(answer, measured_cases(run, brackets))}
    )
