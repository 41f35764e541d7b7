"""The capacity answer for a fleet: the replicas a target speedup of the trace needs under each
routing policy, from what an engine step costs a replica, the hits the fleet model predicts
for that N and policy, and the engine steps the trace's own arrivals make each replica run.

Every number comes from the run's own files:

1. **What an engine step costs** (:mod:`analysis.fleet_engine_fit`): c0 + c_p × prompt tokens
   computed + c_d × decode sequences (s), fitted on the run's token gaps and on the first
   tokens of requests that found their replica idle (``unqueued``), with the time a
   request spends outside the engine (a) and how much replicas sharing one machine's cores
   slow each other's steps (κ).
2. **Placement and hits** for N replicas under policy P: the fleet model
   (:func:`scenarios.fleet.model.predict_fleet`: requests one after another in file order,
   the run's per-replica capacity) places every request and gives its hits; a bracketed
   policy is taken at the low end of its bracket (fewer hits, more work). The gateway's
   least-loaded and prefix-hash, whose decisions read the requests in flight, are instead
   placed inside each simulated replay, when each request is sent, with hits from its
   replica's cache model (:mod:`analysis.fleet_placement`). A request's uncached tokens are
   its prompt less its hits (at least 1).
3. **The sustainable speedup** S_N(P): the replicas' engine steps simulated as vLLM's
   scheduler batches them (:mod:`analysis.fleet_engine`: continuous batching, chunked
   prefill, a token budget per step) at the trace's arrivals sped up X times; S_N(P) is the
   highest X whose predicted SLO attainment ≥ the run's target, the definition the measured
   sweep uses, and whose busiest replica's least time in steps, however its requests are
   batched, fits the time the slice's traffic stands for, sped up (n timed sends over the
   span stand for n mean intervals; utilisation 1: past it a backlog grows without end on
   traffic that goes on at that rate, whatever a finite slice's attainment says). Worked
   out twice: with each replica on cores of its own (κ = 0: the deployment the answer is
   for) and sharing one machine's cores as the run's replicas did (κ fitted: what this run
   measured).
4. **The answer**: a target speedup X needs the smallest N ≤ :data:`MAX_FLEET` with
   S_N(P) ≥ X on cores of their own (and, beside it, sharing cores); the policies needing
   the fewest are named (all of them when tied). S_N(P) need not grow with N: the hit rate a
   policy gets can fall as N grows (round-robin keeps each prefix group on one replica only
   when N divides the groups' rotation; a hash's imbalance changes with N), so a larger
   fleet can sustain less, and the answer is the smallest N that meets the target, not a
   promise for every larger N.

The step costs are the ones measured on the run's own N and machine: answers for other N
read as replicas whose steps cost what the run's did. :func:`compare_measured` sets each
measured case beside the prediction for its N and policy, with the step costs fitted on that
case's own records (:func:`policy_point`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from pydantic import BaseModel, ConfigDict

from analysis.fleet_engine import (
    EngineRequest,
    least_utilisation,
    replay,
    sustainable_speedup,
    traffic_window_s,
)
from analysis.fleet_engine_fit import StepCost
from analysis.fleet_placement import LIVE_POLICIES, LivePlacement
from analysis.goodput import SLOLimits
from scenarios.fleet.model import predict_fleet
from scenarios.fleet.requests import FleetRequest
from scenarios.fleet.simulate import FleetOutcome

#: The largest fleet the answer considers (the model's replay grows with N).
MAX_FLEET = 8


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Arrivals(_Frozen):
    """The slice's arrivals at speedup 1, one per request in file order (s from its first
    request; ``None`` offsets for session turns, with the turn they follow and their delay),
    and whether the replay divides session delays by the speedup too."""

    offsets_s: tuple[float | None, ...]
    follows: tuple[int | None, ...]
    delays_s: tuple[float, ...]
    compress_delays: bool = True

    @property
    def span_s(self) -> float:
        """First to last timed arrival (s)."""
        timed = [o for o in self.offsets_s if o is not None]
        return max(timed) - min(timed) if timed else 0.0


class FleetPoint(_Frozen):
    """One policy on N replicas: the predicted fleet hit rate (the low end of a bracket), the
    sustainable speedup with each replica on cores of its own (κ = 0) and sharing one
    machine's cores as the run's replicas did (κ fitted), and the busiest replica's
    utilisation at the first (the least time its requests take in engine steps ÷ the time
    their traffic stands for, sped up: :func:`analysis.fleet_engine.least_utilisation`;
    ``None`` for an unbounded speedup)."""

    replicas: int
    hit_rate: float
    sustainable_speedup: float
    sustainable_speedup_shared: float
    utilisation: float | None


class PolicyCapacity(_Frozen):
    """A policy's answer: a point per N = 1 … :data:`MAX_FLEET`, and the replicas the target
    speedup needs, each on cores of its own and sharing one machine's cores as the run's did
    (``None``: no target, or more than :data:`MAX_FLEET`)."""

    policy: str
    points: list[FleetPoint]
    replicas_needed: int | None
    replicas_needed_shared: int | None = None


class MeasuredCapacity(_Frozen):
    """One case's measured sustainable speedup (``analysis.goodput.max_sustainable_rate``
    over its speedups): the highest speedup measured that met the target (``None``: none
    did), the next one measured, which did not (``None``: the highest met it), and the
    linear interpolation between them (``None`` unless both exist)."""

    case: str
    policy: str | None
    replicas: int
    lower_speedup: float | None
    upper_speedup: float | None
    interpolated: float | None


class CapacityCheck(_Frozen):
    """The prediction at a case's N and policy beside its measurement.

    ``predicted``: the sustainable speedup with the replicas sharing cores as the run's did
    (the conditions measured; the same as on cores of their own at N = 1), with the step
    costs fitted on the case's own records where ``own_fit`` (each case ran under its own
    load on the machine), else the answer's; ``predicted_own``: the same on cores of their
    own; ``answer_predicted``: the answer's table at the case's N and policy (step costs
    fitted on every case). ``within``: lower ≤ predicted < upper, the
    measured bracket (0 and ∞ for a missing end), the only statement the sweep supports: the
    attainment was measured at those speedups alone, and the interpolation assumes it falls
    linearly between them, where attainment falls off a cliff near full utilisation.
    ``ratio``: predicted ÷ interpolated (``None`` without an interpolation), shown, not
    judged.
    """

    measured: MeasuredCapacity
    predicted: float
    predicted_own: float
    answer_predicted: float
    own_fit: bool
    hit_rate: float
    utilisation: float | None
    within: bool
    ratio: float | None


class FleetCapacity(_Frozen):
    """The fleet capacity answer (module docstring); ``attainment`` the target, ``slo_ms``
    the SLOs (metric → ms) the queue judges by."""

    cost: StepCost
    span_s: float
    attainment: float
    slo_ms: dict[str, float]
    target_speedup: float | None
    policies: list[PolicyCapacity]
    text: str
    #: The prediction beside each measured case (:func:`compare_measured`).
    checks: list[CapacityCheck] = []


def engine_requests(
    outcome: FleetOutcome, requests: Sequence[FleetRequest], at: Arrivals
) -> list[EngineRequest]:
    """The engine's view (:class:`analysis.fleet_engine.EngineRequest`) of the outcome's
    requests: replica, arrival, uncached prompt tokens (≥ 1: vLLM computes a prompt's last
    token even on a full hit) and output tokens (≥ 1)."""
    out = []
    for i, (replica, request, hit) in enumerate(
        zip(outcome.placement, requests, outcome.hit_tokens, strict=True)
    ):
        c = request.cache
        out.append(EngineRequest(
            replica=replica, offset_s=at.offsets_s[i], follows=at.follows[i],
            delay_s=at.delays_s[i], uncached=max(c.prompt_tokens - hit, 1),
            output=max(c.output_tokens, 1),
        ))  # fmt: skip
    return out


def fleet_point(
    outcome: FleetOutcome,
    requests: Sequence[FleetRequest],
    cost: StepCost,
    at: Arrivals,
    judged: tuple[SLOLimits, float],
    placer: LivePlacement | None = None,
) -> FleetPoint:
    """One N's :class:`FleetPoint` from the fleet model's ``outcome`` (module docstring);
    with ``placer``, placement and hits are decided in each simulated replay instead
    (:mod:`analysis.fleet_placement`) and the hit rate is the one at the sustainable speedup
    on cores of their own (``outcome``'s where that speedup is 0 or unbounded)."""
    engine = engine_requests(outcome, requests, at)
    own = sustainable_speedup(engine, cost, judged, at.span_s, at.compress_delays,
                              placer=placer)  # fmt: skip
    shared = own
    if (cost.contention > 0 or cost.contention_decode > 0) and outcome.replicas > 1:
        shared = sustainable_speedup(engine, cost, judged, at.span_s, at.compress_delays,
                                     shared=True, placer=placer)  # fmt: skip
    used, hit_rate = None, outcome.hit_rate
    if math.isfinite(own) and own > 0:
        result = replay(engine, own, cost, at.compress_delays, placer=placer)
        used = least_utilisation(result, own, traffic_window_s(engine, at.span_s), cost)
        hit_rate = placer.outcome().hit_rate if placer is not None else hit_rate
    return FleetPoint(replicas=outcome.replicas, hit_rate=hit_rate,
                      sustainable_speedup=own, sustainable_speedup_shared=shared,
                      utilisation=used)  # fmt: skip


def policy_point(
    requests: Sequence[FleetRequest],
    policy: str,
    replicas: int,
    sizing: tuple[int, int],
    cost: StepCost,
    at: Arrivals,
    judged: tuple[SLOLimits, float],
) -> FleetPoint:
    """The :class:`FleetPoint` of ``policy`` on ``replicas`` replicas of ``sizing`` = (usable
    blocks, block tokens): the fleet model's placement (a bracket's low end), or for
    :data:`analysis.fleet_placement.LIVE_POLICIES` the placement decided in the simulation.

    Raises:
        ValueError: what :func:`scenarios.fleet.model.predict_fleet` refuses.
    """
    prediction = predict_fleet(requests, replicas, sizing[0], sizing[1], [policy])
    placer = (LivePlacement(policy, requests, replicas, sizing)
              if policy in LIVE_POLICIES else None)  # fmt: skip
    return fleet_point(prediction.policies[0].low, requests, cost, at, judged, placer)


def _needed(points: Sequence[FleetPoint], target: float | None, shared: bool) -> int | None:
    """The smallest N whose sustainable speedup (own or shared cores) ≥ ``target``."""
    if target is None:
        return None
    return next((p.replicas for p in points
                 if (p.sustainable_speedup_shared if shared else p.sustainable_speedup)
                 >= target), None)  # fmt: skip


def fleet_capacity(
    requests: Sequence[FleetRequest],
    policies: Sequence[str],
    sizing: tuple[int, int],
    cost: StepCost,
    at: Arrivals,
    judged: tuple[SLOLimits, float],
    target_speedup: float | None,
) -> FleetCapacity:
    """The answer for ``policies`` on the slice's ``requests`` (module docstring), replicas of
    ``sizing`` = (usable blocks, block tokens), SLOs and attainment target ``judged``.

    Raises:
        ValueError: arrivals not one per request, a span ≤ 0, or what
            :func:`scenarios.fleet.model.predict_fleet` refuses.
    """
    if len(at.offsets_s) != len(requests):
        raise ValueError(f"{len(at.offsets_s)} arrivals for {len(requests)} requests")
    if at.span_s <= 0:
        raise ValueError(f"the slice's span must be positive, got {at.span_s} s")
    slo, attainment = judged
    answers = []
    for policy in policies:
        points = [policy_point(requests, policy, n, sizing, cost, at, judged)
                  for n in range(1, MAX_FLEET + 1)]  # fmt: skip
        answers.append(PolicyCapacity(
            policy=policy, points=points, replicas_needed=_needed(points, target_speedup, False),
            replicas_needed_shared=_needed(points, target_speedup, True),
        ))  # fmt: skip
    return FleetCapacity(cost=cost, span_s=at.span_s, attainment=attainment,
                         slo_ms=slo.given(), target_speedup=target_speedup, policies=answers,
                         text=_sentence(answers, target_speedup))  # fmt: skip


def _count(n: int | None) -> str:
    return str(n) if n is not None else f"> {MAX_FLEET}"


def _sentence(answers: Sequence[PolicyCapacity], target: float | None) -> str:
    """The answer in words: the policies needing the fewest replicas on cores of their own
    (all of them when tied), then each policy's count, own cores (shared cores)."""
    if target is None:
        return "no --target-speedup: the sustainable speedup per N is given, no replica count"
    counts = ", ".join(
        f"{a.policy} {_count(a.replicas_needed)} ({_count(a.replicas_needed_shared)})"
        for a in answers
    )
    inf = MAX_FLEET + 1
    fewest = min((a.replicas_needed or inf for a in answers), default=inf)
    if fewest == inf:
        return (f"{target:g}× needs more than {MAX_FLEET} replicas under every policy; "
                f"per policy, own cores (shared cores): {counts}")  # fmt: skip
    tied = [a.policy for a in answers if a.replicas_needed == fewest]
    names = tied[0] if len(tied) == 1 else f"{', '.join(tied[:-1])} and {tied[-1]}"
    return (f"{target:g}× the trace's traffic needs the fewest replicas under {names} "
            f"({fewest}, each on cores of its own); per policy, own cores (sharing one "
            f"machine's cores as the run's replicas did): {counts}")  # fmt: skip


def compare_measured(
    answer: FleetCapacity,
    measured: Sequence[MeasuredCapacity],
    case_points: Mapping[str, FleetPoint] | None = None,
) -> list[CapacityCheck]:
    """Each measured case beside its prediction: the case's own point in ``case_points`` (its
    N and policy with the step costs fitted on its own records, :func:`policy_point`) where
    given, else the answer's point for its N and policy (a case without a router: N = 1's,
    the same for every policy). Cases whose N is above :data:`MAX_FLEET`, or whose policy the
    answer lacks, are left out."""
    by_policy = {a.policy: a.points for a in answer.policies}
    out = []
    for m in measured:
        points = by_policy.get(m.policy) if m.policy is not None else None
        if points is None and m.policy is None and answer.policies:
            points = answer.policies[0].points
        if points is None or not 1 <= m.replicas <= len(points):
            continue
        p = (case_points or {}).get(m.case, points[m.replicas - 1])
        low = m.lower_speedup if m.lower_speedup is not None else 0.0
        high = m.upper_speedup if m.upper_speedup is not None else math.inf
        shared = p.sustainable_speedup_shared
        ratio = (shared / m.interpolated
                 if m.interpolated and math.isfinite(shared) else None)  # fmt: skip
        out.append(CapacityCheck(
            measured=m, predicted=shared, predicted_own=p.sustainable_speedup,
            answer_predicted=points[m.replicas - 1].sustainable_speedup_shared,
            own_fit=m.case in (case_points or {}), within=low <= shared < high,
            hit_rate=p.hit_rate, utilisation=p.utilisation, ratio=ratio,
        ))  # fmt: skip
    return out
