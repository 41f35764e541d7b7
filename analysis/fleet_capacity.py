"""The capacity answer for a fleet: the replicas a target speedup of the trace needs under each
routing policy, from the per-replica cost of a request at the hit rate the fleet model
predicts for that N and policy.

Every number comes from the run's own files:

1. **What a request costs one replica** (:func:`fit_service_cost`), fitted on the run's
   successful requests: TTFT (s) = a + t_p × uncached prompt tokens (least squares, uncached =
   prompt tokens sent − ``usage.prompt_tokens_details.cached_tokens``), and t_d = the median
   TPOT (s per output token after the first). A request of q prompt tokens of which h hit and
   o output tokens then keeps its replica busy a + t_p × (q − h) + t_d × (o − 1) seconds.
   The TTFTs include any queueing of the run, so the cost is an upper estimate, and a replica
   is taken to serve its requests one at a time (no gain from batching decode steps): the
   answer errs towards more replicas.
2. **Each replica's busy time** for one pass of the slice with N replicas under policy P:
   the fleet model (:func:`scenarios.fleet.model.predict_fleet`, requests one after another
   in file order, the run's per-replica capacity) places every request and gives its hits;
   replica k is busy B_k = Σ of its requests' costs. A bracketed policy is taken at the low
   end of its bracket (fewer hits, more work).
3. **Sustainable speedup** S_N(P) = span ÷ max_k B_k: the trace sped up S times keeps its
   busiest replica busy all the time (span: the slice's timed arrivals, first to last, at
   speedup 1, s). A target speedup X needs the smallest N ≤ :data:`MAX_FLEET` with
   S_N(P) ≥ X; the policy needing the fewest is named (ties: the first asked).

The same arithmetic at N = 1 is the single server's answer on this cost model, so runs at N = 1
and N = 2 check it against their measured sustainable speedups (the attainment sweep of
``analysis.goodput.max_sustainable_rate``, per case).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import pandas as pd
from pydantic import BaseModel, ConfigDict

from scenarios.fleet.model import predict_fleet
from scenarios.fleet.requests import FleetRequest
from scenarios.fleet.simulate import FleetOutcome

#: The largest fleet the answer considers (the model's replay grows with N).
MAX_FLEET = 8


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class ServiceCost(_Frozen):
    """What a request costs one replica (module docstring, step 1); seconds.

    Attributes:
        overhead_s: a, per request.
        prefill_s_per_token: t_p, per uncached prompt token.
        decode_s_per_token: t_d, per output token after the first.
        requests: the successful requests fitted on.
    """

    overhead_s: float
    prefill_s_per_token: float
    decode_s_per_token: float
    requests: int

    def of(self, prompt: int, hit: int, output: int) -> float:
        """Seconds of a replica's time one request of ``prompt`` tokens (``hit`` of them
        cached) generating ``output`` tokens takes."""
        return (
            self.overhead_s
            + self.prefill_s_per_token * (prompt - hit)
            + self.decode_s_per_token * max(output - 1, 0)
        )


def fit_service_cost(frame: pd.DataFrame) -> ServiceCost | None:
    """Fit :class:`ServiceCost` on the successful requests of ``frame`` (a request frame,
    ``analysis.latency.request_frame``, with ``prompt_tokens_sent`` and ``cached_tokens``):
    least squares of TTFT on uncached tokens when they take two values or more (a negative
    intercept is taken as 0), else a = 0 and t_p = the median TTFT ÷ uncached tokens.
    ``None`` with no successful request that reported its cached tokens and had a TTFT."""
    if frame.empty:
        return None
    ok = frame[
        (frame["status"] == "ok") & frame["ttft_ms"].notna() & frame["cached_tokens"].notna()
    ]
    uncached = (ok["prompt_tokens_sent"] - ok["cached_tokens"]).astype(float)
    ttft_s = ok["ttft_ms"].astype(float) / 1e3
    keep = uncached > 0
    uncached, ttft_s = uncached[keep], ttft_s[keep]
    if uncached.empty:
        return None
    slope, intercept = 0.0, 0.0
    if uncached.nunique() >= 2:
        slope, intercept = (float(v) for v in np.polyfit(uncached, ttft_s, 1))
    if slope <= 0:
        slope, intercept = float((ttft_s / uncached).median()), 0.0
    tpot = ok["tpot_ms"].dropna()
    return ServiceCost(
        overhead_s=max(intercept, 0.0),
        prefill_s_per_token=slope,
        decode_s_per_token=float(tpot.median()) / 1e3 if not tpot.empty else 0.0,
        requests=len(uncached),
    )


class FleetPoint(_Frozen):
    """One policy on N replicas: the predicted fleet hit rate (the low end of a bracket), the
    busiest replica's busy time for one pass (s) and the sustainable speedup."""

    replicas: int
    hit_rate: float
    busiest_s: float
    sustainable_speedup: float


class PolicyCapacity(_Frozen):
    """A policy's answer: a point per N = 1 … :data:`MAX_FLEET`, and the replicas the target
    speedup needs (``None``: no target, or more than :data:`MAX_FLEET`)."""

    policy: str
    points: list[FleetPoint]
    replicas_needed: int | None


class FleetCapacity(_Frozen):
    """The fleet capacity answer (module docstring)."""

    cost: ServiceCost
    span_s: float
    target_speedup: float | None
    policies: list[PolicyCapacity]
    text: str


def busiest_seconds(
    outcome: FleetOutcome, requests: Sequence[FleetRequest], cost: ServiceCost
) -> float:
    """max over replicas of Σ cost of the requests the outcome placed there (s)."""
    busy = [0.0] * outcome.replicas
    for replica, request, hit in zip(outcome.placement, requests, outcome.hit_tokens, strict=True):
        c = request.cache
        busy[replica] += cost.of(c.prompt_tokens, hit, c.output_tokens)
    return max(busy)


def fleet_capacity(
    requests: Sequence[FleetRequest],
    policies: Sequence[str],
    capacity_blocks: int,
    block_tokens: int,
    cost: ServiceCost,
    span_s: float,
    target_speedup: float | None,
) -> FleetCapacity:
    """The answer for ``policies`` on the slice's ``requests`` (module docstring).

    Raises:
        ValueError: ``span_s`` ≤ 0, or what :func:`scenarios.fleet.model.predict_fleet`
            refuses.
    """
    if span_s <= 0:
        raise ValueError(f"the slice's span must be positive, got {span_s} s")
    answers = []
    for policy in policies:
        points = []
        for n in range(1, MAX_FLEET + 1):
            low = (
                predict_fleet(requests, n, capacity_blocks, block_tokens, [policy]).policies[0].low
            )
            busiest = busiest_seconds(low, requests, cost)
            speedup = span_s / busiest if busiest > 0 else math.inf
            points.append(FleetPoint(replicas=n, hit_rate=low.hit_rate, busiest_s=busiest,
                                     sustainable_speedup=speedup))  # fmt: skip
        needed = None
        if target_speedup is not None:
            needed = next((p.replicas for p in points if p.sustainable_speedup >= target_speedup),
                          None)  # fmt: skip
        answers.append(PolicyCapacity(policy=policy, points=points, replicas_needed=needed))
    return FleetCapacity(cost=cost, span_s=span_s, target_speedup=target_speedup,
                         policies=answers, text=_sentence(answers, target_speedup))  # fmt: skip


def _sentence(answers: Sequence[PolicyCapacity], target: float | None) -> str:
    if target is None:
        return "no --target-speedup: the sustainable speedup per N is given, no replica count"
    found = [a for a in answers if a.replicas_needed is not None]
    if not found:
        return f"{target:g}× needs more than {MAX_FLEET} replicas under every policy"
    best = min(found, key=lambda a: a.replicas_needed or 0)
    counts = ", ".join(
        f"{a.policy} {a.replicas_needed if a.replicas_needed is not None else f'> {MAX_FLEET}'}"
        for a in answers
    )
    return (
        f"{target:g}× the trace's traffic needs the fewest replicas under {best.policy} "
        f"({best.replicas_needed}); per policy: {counts}"
    )
