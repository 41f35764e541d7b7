"""The capacity answer for a fleet: the replicas a target speedup of the trace needs under each
routing policy, from what a request costs a replica unqueued, the hits the fleet model
predicts for that N and policy, and the queue the trace's own arrivals build on each replica.

Every number comes from the run's own files:

1. **What a request costs one replica unqueued** (:func:`fit_service_cost`), fitted on the
   run's successful requests that found their replica idle when they were sent
   (:func:`unqueued`: no other request of their case in flight on the same replica), so no
   queueing of an overloaded phase enters it: TTFT (s) = a + t_p × uncached prompt tokens
   (least squares; uncached = prompt tokens − ``usage.prompt_tokens_details.cached_tokens``),
   and t_d = Σ (E2EL − TTFT) ÷ Σ (output tokens − 1) (s per output token after the first).
   Where least squares cannot give a ≥ 0 and t_p > 0 (one uncached length, or a negative
   intercept), a = 0 and t_p = Σ TTFT ÷ Σ uncached. Sums, not medians: a replica's busy time
   is a sum, and these estimators keep the fitted requests' total. A request of q prompt
   tokens, h of them hit, generating o tokens then has TTFT a + t_p × (q − h) and keeps its
   replica busy, in two regimes that bracket vLLM's continuous batching:

   - **serial**: a + t_p × (q − h) + t_d × (o − 1) s, its decode steps its own, as measured
     unqueued (the most a request occupies its replica);
   - **batched**: t_p × (q − h + o − 1) s, every token costing what a prompt token costs and
     the per-request overhead a and each decode step's fixed cost shared with requests in the
     same engine steps: what chunked prefill approaches when requests queue (the least).

   An overloaded phase's own throughput (requests ÷ its busy time) lies between them
   (docs/fleet.md gives an example).
2. **Placement and hits** for N replicas under policy P: the fleet model
   (:func:`scenarios.fleet.model.predict_fleet`: requests one after another in file order,
   the run's per-replica capacity) places every request and gives its hits; a bracketed
   policy is taken at the low end of its bracket (fewer hits, more work).
3. **The sustainable speedup** S_N(P): each replica a first-come-first-served queue of its
   requests at the trace's arrivals sped up X times (:mod:`analysis.fleet_queue`); S_N(P) is
   the highest X whose predicted SLO attainment ≥ the run's target, the definition the
   measured sweep uses, and at most span ÷ the busiest replica's busy time, the speedup at
   which that replica is never idle (utilisation 1; the only bound without SLOs). Past it a
   queue grows without end (the stability condition of any single-server queue): a finite
   slice lets an overloaded replica still meet a TTFT limit for the few seconds the slice
   lasts sped up (20× the 62 s built-in slice lasts 3 s), which says nothing about traffic
   that goes on at that rate.
   S_N(P) is worked out in both regimes: serial the low end, batched the high end.
4. **The answer**: a target speedup X needs the smallest N ≤ :data:`MAX_FLEET` with
   S_N(P) ≥ X, in each regime; the policies needing the fewest in both regimes are named (all
   of them when tied), else each regime's first. S_N(P)
   need not grow with N: the hit rate a policy gets can fall as N grows (round-robin keeps
   each prefix group on one replica only when N divides the groups' rotation; a hash's
   imbalance changes with N), so a larger fleet can sustain less, and the answer is the
   smallest N that meets the target, not a promise for every larger N.

The cost is the one measured on the run's own N: where replicas share cores (this testbed
puts N replicas, the router and the client on one machine) a request costs more at N = 2 than
at N = 1, so answers for other N read as replicas with the measured run's per-request cost.
:func:`compare_measured` sets S at the run's N beside each case's measured sustainable
speedup.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import pandas as pd
from pydantic import BaseModel, ConfigDict

from analysis.fleet_queue import QueuedRequest, sustainable_speedup
from analysis.goodput import SLOLimits
from scenarios.fleet.model import predict_fleet
from scenarios.fleet.requests import FleetRequest
from scenarios.fleet.simulate import FleetOutcome

#: The largest fleet the answer considers (the model's replay grows with N).
MAX_FLEET = 8


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class ServiceCost(_Frozen):
    """What a request costs one replica unqueued (module docstring, step 1); seconds.

    Attributes:
        overhead_s: a, per request.
        prefill_s_per_token: t_p, per uncached prompt token.
        decode_s_per_token: t_d, per output token after the first.
        requests: the unqueued successful requests fitted on.
    """

    overhead_s: float
    prefill_s_per_token: float
    decode_s_per_token: float
    requests: int

    def ttft(self, prompt: int, hit: int) -> float:
        """TTFT (s) unqueued of a request of ``prompt`` tokens, ``hit`` of them cached."""
        return self.overhead_s + self.prefill_s_per_token * (prompt - hit)

    def of(self, prompt: int, hit: int, output: int, batched: bool = False) -> float:
        """Seconds of a replica's time one request of ``prompt`` tokens (``hit`` of them
        cached) generating ``output`` tokens takes, serial or batched (module docstring)."""
        if batched:
            return self.prefill_s_per_token * (prompt - hit + max(output - 1, 0))
        return self.ttft(prompt, hit) + self.decode_s_per_token * max(output - 1, 0)


def unqueued(frame: pd.DataFrame) -> pd.DataFrame:
    """The rows of ``frame`` (``analysis.latency.request_frame``) that were sent while no other
    request of their case was in flight on their replica: none sent at or before them and
    ending after their send. The replica is the record's ``upstream`` (the gateway names it);
    where it is unknown (one server, or a router that does not say) every request of the case
    counts as on the same replica."""
    if frame.empty or "sent_ns" not in frame:
        return frame.iloc[0:0]
    frame = frame.reset_index(drop=True)  # frames of several cases repeat index labels
    keep = []
    upstream = frame["upstream"] if "upstream" in frame else pd.Series(None, index=frame.index)
    place = frame["case"].astype(str) + "|" + upstream.fillna("").astype(str)
    for _, group in frame.assign(_place=place).groupby("_place", sort=False):
        sent = group["sent_ns"].astype(float).to_numpy()
        end = group["end_ns"].astype(float).fillna(np.inf).to_numpy()
        for row, s in zip(group.index, sent, strict=True):
            if math.isnan(s):
                continue
            others = (sent <= s) & (end > s)
            if int(others.sum()) == 1:  # itself only
                keep.append(row)
    return frame.loc[keep]


def fit_service_cost(frame: pd.DataFrame) -> ServiceCost | None:
    """Fit :class:`ServiceCost` (module docstring, step 1) on the successful :func:`unqueued`
    requests of ``frame`` that reported their cached tokens, had a TTFT and computed at least
    one prompt token. ``None`` when there is none."""
    if frame.empty or "cached_tokens" not in frame:
        return None
    idle = unqueued(frame)
    ok = idle[(idle["status"] == "ok") & idle["ttft_ms"].notna() & idle["cached_tokens"].notna()]
    uncached = (ok["prompt_tokens_sent"] - ok["cached_tokens"]).astype(float)
    ok, uncached = ok[uncached > 0], uncached[uncached > 0]
    if ok.empty:
        return None
    ttft_s = ok["ttft_ms"].astype(float) / 1e3
    slope, intercept = 0.0, -1.0
    if uncached.nunique() >= 2:
        slope, intercept = (float(v) for v in np.polyfit(uncached, ttft_s, 1))
    if slope <= 0 or intercept < 0:
        slope, intercept = float(ttft_s.sum() / uncached.sum()), 0.0
    decoded = ok[ok["output_tokens"] >= 2]
    decode_s = ((decoded["e2el_ms"] - decoded["ttft_ms"]).astype(float) / 1e3).sum()
    after_first = float((decoded["output_tokens"] - 1).sum())
    return ServiceCost(
        overhead_s=intercept,
        prefill_s_per_token=slope,
        decode_s_per_token=float(decode_s) / after_first if after_first else 0.0,
        requests=len(ok),
    )


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
    busiest replica's serial busy time for one pass (s), the sustainable speedup serial and
    batched, and the busiest replica's utilisation at the serial one (busy ÷ (span ÷
    speedup); ``None`` for an unbounded speedup)."""

    replicas: int
    hit_rate: float
    busiest_s: float
    sustainable_speedup: float
    sustainable_speedup_batched: float
    utilisation: float | None


class PolicyCapacity(_Frozen):
    """A policy's answer: a point per N = 1 … :data:`MAX_FLEET`, and the replicas the target
    speedup needs, serial and batched (``None``: no target, or more than :data:`MAX_FLEET`)."""

    policy: str
    points: list[FleetPoint]
    replicas_needed: int | None
    replicas_needed_batched: int | None = None


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

    ``within``: the predicted range [serial, batched] meets the measured bracket [lower,
    upper] (0 and ∞ for a missing end), the only statement the sweep supports: the
    attainment was measured at those speedups alone, and the interpolation assumes it falls
    linearly between them, where a queue's attainment falls off a cliff near full
    utilisation. ``ratio``: predicted ÷
    interpolated (``None`` without an interpolation), shown, not judged.
    """

    measured: MeasuredCapacity
    predicted: float
    predicted_batched: float
    hit_rate: float
    utilisation: float | None
    within: bool
    ratio: float | None


class FleetCapacity(_Frozen):
    """The fleet capacity answer (module docstring); ``attainment`` the target, ``slo_ms``
    the SLOs (metric → ms) the queue judges by."""

    cost: ServiceCost
    span_s: float
    attainment: float
    slo_ms: dict[str, float]
    target_speedup: float | None
    policies: list[PolicyCapacity]
    text: str
    #: The prediction beside each measured case (:func:`compare_measured`).
    checks: list[CapacityCheck] = []


def busy_seconds(
    outcome: FleetOutcome, requests: Sequence[FleetRequest], cost: ServiceCost, batched: bool
) -> list[float]:
    """Per replica, Σ cost (serial or batched) of the requests the outcome placed there (s)."""
    busy = [0.0] * outcome.replicas
    for replica, request, hit in zip(outcome.placement, requests, outcome.hit_tokens, strict=True):
        c = request.cache
        busy[replica] += cost.of(c.prompt_tokens, hit, c.output_tokens, batched)
    return busy


def queued_requests(
    outcome: FleetOutcome,
    requests: Sequence[FleetRequest],
    cost: ServiceCost,
    at: Arrivals,
    batched: bool,
) -> list[QueuedRequest]:
    """The queue's view (:class:`analysis.fleet_queue.QueuedRequest`) of the outcome's
    requests: TTFT unqueued a + t_p × uncached, busy time serial or batched."""
    out = []
    for i, (replica, request, hit) in enumerate(
        zip(outcome.placement, requests, outcome.hit_tokens, strict=True)
    ):
        c = request.cache
        out.append(QueuedRequest(
            replica=replica, offset_s=at.offsets_s[i], follows=at.follows[i],
            delay_s=at.delays_s[i], prefill_s=cost.ttft(c.prompt_tokens, hit),
            service_s=cost.of(c.prompt_tokens, hit, c.output_tokens, batched),
            decode_s_per_token=cost.decode_s_per_token if c.output_tokens >= 2 else None,
        ))  # fmt: skip
    return out


def fleet_point(
    outcome: FleetOutcome,
    requests: Sequence[FleetRequest],
    cost: ServiceCost,
    at: Arrivals,
    slo: SLOLimits,
    attainment: float,
) -> FleetPoint:
    """One N's :class:`FleetPoint` from the fleet model's ``outcome`` (module docstring)."""
    speedups = []
    for batched in (False, True):
        busiest = max(busy_seconds(outcome, requests, cost, batched))
        speedup = at.span_s / busiest if busiest > 0 else math.inf
        if slo.given():
            queued = queued_requests(outcome, requests, cost, at, batched)
            found = sustainable_speedup(queued, slo, attainment, at.compress_delays)
            speedup = min(speedup, found)
        speedups.append(speedup)
    busiest = max(busy_seconds(outcome, requests, cost, False))
    used = busiest * speedups[0] / at.span_s if math.isfinite(speedups[0]) else None
    return FleetPoint(replicas=outcome.replicas, hit_rate=outcome.hit_rate, busiest_s=busiest,
                      sustainable_speedup=speedups[0], sustainable_speedup_batched=speedups[1],
                      utilisation=used)  # fmt: skip


def _needed(points: Sequence[FleetPoint], target: float | None, batched: bool) -> int | None:
    """The smallest N whose sustainable speedup (serial or batched) ≥ ``target``."""
    if target is None:
        return None
    return next((p.replicas for p in points
                 if (p.sustainable_speedup_batched if batched else p.sustainable_speedup)
                 >= target), None)  # fmt: skip


def fleet_capacity(
    requests: Sequence[FleetRequest],
    policies: Sequence[str],
    sizing: tuple[int, int],
    cost: ServiceCost,
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
    capacity_blocks, block_tokens = sizing
    slo, attainment = judged
    answers = []
    for policy in policies:
        points = []
        for n in range(1, MAX_FLEET + 1):
            prediction = predict_fleet(requests, n, capacity_blocks, block_tokens, [policy])
            low = prediction.policies[0].low
            points.append(fleet_point(low, requests, cost, at, slo, attainment))
        answers.append(PolicyCapacity(
            policy=policy, points=points, replicas_needed=_needed(points, target_speedup, False),
            replicas_needed_batched=_needed(points, target_speedup, True),
        ))  # fmt: skip
    return FleetCapacity(cost=cost, span_s=at.span_s, attainment=attainment,
                         slo_ms=slo.given(), target_speedup=target_speedup, policies=answers,
                         text=_sentence(answers, target_speedup))  # fmt: skip


def _count(n: int | None) -> str:
    return str(n) if n is not None else f"> {MAX_FLEET}"


def _sentence(answers: Sequence[PolicyCapacity], target: float | None) -> str:
    """The answer in words: the policies needing the fewest replicas in both regimes (all of
    them when tied), or each regime's first when no policy is fewest in both."""
    if target is None:
        return "no --target-speedup: the sustainable speedup per N is given, no replica count"
    counts = ", ".join(
        f"{a.policy} {_count(a.replicas_needed)} ({_count(a.replicas_needed_batched)})"
        for a in answers
    )
    inf = MAX_FLEET + 1
    serial = min((a.replicas_needed or inf for a in answers), default=inf)
    batched = min((a.replicas_needed_batched or inf for a in answers), default=inf)
    if batched == inf:
        return f"{target:g}× needs more than {MAX_FLEET} replicas under every policy"
    both = [a for a in answers
            if (a.replicas_needed or inf) == serial
            and a.replicas_needed_batched == batched]  # fmt: skip
    first_b = next(a for a in answers if a.replicas_needed_batched == batched)
    if both:
        tied = [a.policy for a in both]
        names = tied[0] if len(tied) == 1 else f"{', '.join(tied[:-1])} and {tied[-1]}"
        lead = f"the fewest replicas under {names} ({_count(both[0].replicas_needed)} served "
        lead += f"one at a time, {batched} batched)"
    elif serial == inf:
        lead = (f"more than {MAX_FLEET} replicas under every policy served one at a time; "
                f"batched, the fewest under {first_b.policy} ({batched})")  # fmt: skip
    else:
        first_s = next(a for a in answers if a.replicas_needed == serial)
        lead = (f"the fewest replicas under {first_s.policy} served one at a time ({serial}) "
                f"and under {first_b.policy} batched ({batched})")  # fmt: skip
    return f"{target:g}× the trace's traffic needs {lead}; per policy, serial (batched): {counts}"


def compare_measured(
    answer: FleetCapacity, measured: Sequence[MeasuredCapacity]
) -> list[CapacityCheck]:
    """Each measured case beside the answer's point for its N and policy (a case without a
    router: N = 1's, the same for every policy). Cases whose N is above :data:`MAX_FLEET`, or
    whose policy the answer lacks, are left out."""
    by_policy = {a.policy: a.points for a in answer.policies}
    out = []
    for m in measured:
        points = by_policy.get(m.policy) if m.policy is not None else None
        if points is None and m.policy is None and answer.policies:
            points = answer.policies[0].points
        if points is None or not 1 <= m.replicas <= len(points):
            continue
        p = points[m.replicas - 1]
        low = m.lower_speedup if m.lower_speedup is not None else 0.0
        high = m.upper_speedup if m.upper_speedup is not None else math.inf
        ratio = (p.sustainable_speedup / m.interpolated
                 if m.interpolated and math.isfinite(p.sustainable_speedup) else None)  # fmt: skip
        within = p.sustainable_speedup <= high and p.sustainable_speedup_batched >= low
        out.append(CapacityCheck(measured=m, predicted=p.sustainable_speedup,
                                 predicted_batched=p.sustainable_speedup_batched,
                                 hit_rate=p.hit_rate, utilisation=p.utilisation,
                                 within=within, ratio=ratio))  # fmt: skip
    return out
