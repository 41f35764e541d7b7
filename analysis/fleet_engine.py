"""The engine steps a fleet's replicas run when a trace is replayed sped up: a discrete-event
simulation of vLLM's continuous batching per replica, each request's predicted TTFT, TPOT and
E2EL, the SLO attainment they give and the highest speedup that keeps it at the target.

**One engine step** (vLLM v1's scheduler, ``vllm/v1/core/sched/scheduler.py``,
``Scheduler.schedule``, vLLM 0.32.0): the running requests first, in the order they were
admitted, each taking its next tokens (the rest of its prompt, up to the budget, or its one
decode token), then waiting requests first come first served while the token budget
(``max_num_batched_tokens``) is left and fewer than ``max_num_seqs`` run; a prompt longer than
what is left of the budget is cut into chunks (chunked prefill) and goes on in the next step.
A request's first token comes at the end of the step that computes the last of its prompt,
each later token at the end of one more step. The step takes

    t = c0 + c_p × (prompt tokens computed in the step) + c_d × (decode sequences in the step)

seconds (:class:`analysis.fleet_engine_fit.StepCost`), a linear model of a CPU forward pass
whose cost grows with the tokens it computes.

**Outside the engine**: a request reaches its replica's engine ``a`` s after it is sent (the
HTTP path, the router, tokenizing); TTFT = first token − sent, E2EL = last token − sent,
TPOT = (E2EL − TTFT) ÷ (output − 1) (``analysis.latency``'s definitions).

**Replicas sharing cores**: where the fleet's replicas run on one machine (this testbed), a
step runs at 1 ÷ (1 + κ × (m − 1)) of its own speed while m replicas are in a step at once
(processor sharing), κ = κ_p for a step that computes prompt tokens and κ_d for one that only
decodes (a decode step's small matrix products suffer less from a neighbour's work than a
prompt's large ones: the fit measures each); on cores of their own, no slowdown.

Sped up X times, the trace's timed arrivals come at offset ÷ X; a session turn is sent its
delay (÷ X when the replay compresses delays) after the turn it follows ends, as the replay
does. A request is good when every given SLO holds with ≤ (``analysis.goodput.judge``'s rule;
TPOT only for outputs of 2 tokens or more).

**When a replica is full**: not when it is in steps all the time. A decode token that takes
a step of its own (c0 + c_d) while the replica is quiet rides, once another prompt waits, in
that prompt's step for c_d alone, so a replica whose requests would fill the time apart can
keep up together. The least time a replica's requests can take in steps however they are
batched (:func:`least_busy_s`: c0 shared by a full budget of tokens or a full cap of
sequences) is its load; above the time its traffic stands for (:func:`traffic_window_s`),
no batching works the backlog off (:func:`least_utilisation`).

What it leaves out: preemption and a full KV cache (the requests' blocks are assumed to fit;
the fleet model's hits already account for eviction), async scheduling's overlap of one step's
CPU work with the next (vLLM's CPU platform turns it off), and per-token streaming delays
on the way back to the client.
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from analysis.fleet_engine_fit import StepCost
from analysis.goodput import SLOLimits

#: Bisection stops when the bracket of the sustainable speedup is this narrow (relative).
RELATIVE_PRECISION = 1e-3
#: Speedups searched: a trace whose target holds beyond this is reported as unbounded.
MAX_SPEEDUP = 1e4
#: Remaining work (s) below which a step counts as done (float round-off of the sharing).
_EPS = 1e-12
#: A request's two events: sent (placed, in flight from then on), arrived at its engine.
_SENT, _ARRIVED = 0, 1


@dataclass(frozen=True)
class EngineRequest:
    """One request as the engine sees it.

    Attributes:
        replica: the replica the placement sent it to (0-based).
        offset_s: its send time at speedup 1, s from the slice's first request; ``None`` for
            a session turn (then ``follows`` and ``delay_s``).
        follows: the index (in the sequence) of the turn it follows, or ``None``.
        delay_s: its delay after the followed turn ends, s at speedup 1.
        uncached: prompt tokens its replica computes (prompt − cache hits; ≥ 1).
        output: tokens it generates (≥ 1).
    """

    replica: int
    offset_s: float | None
    follows: int | None
    delay_s: float
    uncached: int
    output: int


@dataclass(frozen=True)
class Served:
    """One request's predicted latencies, s (``tpot_s`` ``None`` for a 1-token output)."""

    ttft_s: float
    e2el_s: float
    tpot_s: float | None


@dataclass
class _Replica:
    """A replica's scheduler state: waiting (FCFS) and running request indices, the step in
    progress (its work left in s of its own speed, and what it computes)."""

    waiting: deque[int] = field(default_factory=deque)
    running: list[int] = field(default_factory=list)
    work_s: float = 0.0
    chunks: list[tuple[int, int]] = field(default_factory=list)  # (request, prompt tokens)
    decodes: list[int] = field(default_factory=list)
    stepping: bool = False
    busy_s: float = 0.0


@dataclass
class Replay:
    """The outcome of one simulated replay: per request its :class:`Served` and its replica,
    and per replica the wall time it spent in steps (s) and the least time its requests
    could take in steps however they were batched (s, :func:`least_busy_s`)."""

    served: list[Served]
    busy_s: list[float]
    placement: list[int] = field(default_factory=list)
    least_s: list[float] = field(default_factory=list)


class Placer(Protocol):
    """A placement decided as the replay runs (``analysis.fleet_placement.LivePlacement``):
    :meth:`reset` before the replay, :meth:`place` when a request is sent (given each
    replica's requests in flight: placed and not ended) returning its replica and
    uncached prompt tokens (≥ 1), :meth:`done` when it ends."""

    replicas: int

    def reset(self) -> None: ...

    def place(self, index: int, in_flight: Sequence[int]) -> tuple[int, int]: ...

    def done(self, index: int) -> None: ...


def _start_step(rep: _Replica, left: list[int], cost: StepCost) -> None:
    """Schedule ``rep``'s next step as vLLM's scheduler does (module docstring) and set its
    time by the step model."""
    budget = cost.budget_tokens
    rep.chunks, rep.decodes = [], []
    for i in rep.running:
        if budget <= 0:
            break
        if left[i] > 0:
            n = min(left[i], budget)
            rep.chunks.append((i, n))
            budget -= n
        else:
            rep.decodes.append(i)
            budget -= 1
    while rep.waiting and budget > 0 and len(rep.running) < cost.max_seqs:
        i = rep.waiting.popleft()
        rep.running.append(i)
        n = min(left[i], budget)
        rep.chunks.append((i, n))
        budget -= n
    prefill = sum(n for _, n in rep.chunks)
    rep.work_s = cost.step_s + cost.prefill_s_per_token * prefill
    rep.work_s += cost.decode_s_per_seq * len(rep.decodes)
    rep.stepping = bool(rep.chunks or rep.decodes)


@dataclass
class _Clock:
    """Per request: sent (s), prompt tokens its replica computes, tokens still to compute and
    to generate, first and last token."""

    sent: list[float]
    uncached: list[int]
    left: list[int]
    to_go: list[int]
    first: list[float]
    last: list[float]


def _end_step(rep: _Replica, now: float, c: _Clock) -> list[int]:
    """Apply ``rep``'s finished step at ``now``; returns the requests it completed."""
    done = []
    for i, n in rep.chunks:
        c.left[i] -= n
        if c.left[i] == 0:
            c.first[i] = now
            c.to_go[i] -= 1
    for i in rep.decodes:
        c.to_go[i] -= 1
    for i, _ in rep.chunks + [(d, 0) for d in rep.decodes]:
        if c.left[i] == 0 and c.to_go[i] == 0 and i in rep.running:
            c.last[i] = now
            rep.running.remove(i)
            done.append(i)
    rep.stepping = False
    return done


def replay(
    requests: Sequence[EngineRequest],
    speedup: float,
    cost: StepCost,
    compress: bool = True,
    shared: bool = False,
    placer: Placer | None = None,
) -> Replay:
    """Simulate the replicas' engine steps for ``requests`` sent ``speedup`` times faster
    (module docstring); ``shared``: the replicas share cores (``cost.contention`` for a
    step that computes prompt tokens, ``cost.contention_decode`` for one that only decodes);
    ``placer``: each request's replica and uncached tokens decided by it when the request
    is sent, as a router decides (``None``: the requests' own); a request counts in flight
    on its replica from its send to its last token.

    Raises:
        ValueError: a speedup ≤ 0, a turn that follows itself or a later request, or a
            request with no prompt token to compute or no output.
    """
    if speedup <= 0:
        raise ValueError(f"speedup must be positive, got {speedup}")
    n = len(requests)
    followers, pending = _arrivals(requests, speedup, cost)
    if placer is not None:
        placer.reset()
    placed = [r.replica for r in requests]
    width = placer.replicas if placer is not None else max(placed, default=-1) + 1
    in_flight = [0] * width
    clock = _Clock(sent=[math.nan] * n, uncached=[r.uncached for r in requests],
                   left=[r.uncached for r in requests],
                   to_go=[r.output for r in requests], first=[math.nan] * n,
                   last=[math.nan] * n)  # fmt: skip
    for r_at, _, i in pending:
        clock.sent[i] = r_at
    replicas: dict[int, _Replica] = {}
    now = 0.0
    while pending or any(rep.stepping for rep in replicas.values()):
        stepping = [rep for rep in replicas.values() if rep.stepping]
        others = len(stepping) - 1 if shared else 0
        slow = [1.0 + others * (cost.contention if rep.chunks else cost.contention_decode)
                for rep in stepping]  # fmt: skip
        finish = min((rep.work_s * k for rep, k in zip(stepping, slow, strict=True)),
                     default=math.inf)  # fmt: skip
        arrive = pending[0][0] - now if pending else math.inf
        dt = max(min(finish, arrive), 0.0)
        now += dt
        for rep, k in zip(stepping, slow, strict=True):
            rep.work_s -= dt / k
            rep.busy_s += dt
        for rep in stepping:
            if rep.work_s <= _EPS:
                for i in _end_step(rep, now, clock):
                    in_flight[placed[i]] -= 1
                    if placer is not None:
                        placer.done(i)
                    for j in followers.get(i, []):
                        sent = now + requests[j].delay_s / (speedup if compress else 1)
                        clock.sent[j] = sent
                        heapq.heappush(pending, (sent, _SENT, j))
        while pending and pending[0][0] <= now + _EPS:
            at, stage, i = heapq.heappop(pending)
            if stage == _SENT:  # the router decides; the request is in flight from now
                if placer is not None:
                    placed[i], clock.left[i] = placer.place(i, in_flight)
                    clock.uncached[i] = clock.left[i]
                in_flight[placed[i]] += 1
                heapq.heappush(pending, (at + cost.overhead_s, _ARRIVED, i))
            else:
                replicas.setdefault(placed[i], _Replica()).waiting.append(i)
        for rep in replicas.values():
            if not rep.stepping and (rep.waiting or rep.running):
                _start_step(rep, clock.left, cost)
    return _served(requests, clock, replicas, placed, cost)


def _arrivals(
    requests: Sequence[EngineRequest], speedup: float, cost: StepCost
) -> tuple[dict[int, list[int]], list[tuple[float, int, int]]]:
    """The session turns following each request, and the timed requests' sends as a heap of
    (s, :data:`_SENT`, index); checks each request (:func:`replay`'s errors)."""
    followers: dict[int, list[int]] = {}
    pending: list[tuple[float, int, int]] = []
    for i, r in enumerate(requests):
        if r.uncached < 1 or r.output < 1:
            raise ValueError(f"request {i}: needs ≥ 1 uncached prompt token and output token")
        if r.offset_s is not None:
            pending.append((r.offset_s / speedup, _SENT, i))
        elif r.follows is None or not 0 <= r.follows < i:
            raise ValueError(f"request {i}: a session turn must follow an earlier request")
        else:
            followers.setdefault(r.follows, []).append(i)
    heapq.heapify(pending)
    return followers, pending


def _served(
    requests: Sequence[EngineRequest],
    c: _Clock,
    reps: dict[int, _Replica],
    placed: list[int],
    cost: StepCost,
) -> Replay:
    """The :class:`Replay` of a finished simulation (``placed``: each request's replica)."""
    served = []
    for i, r in enumerate(requests):
        ttft, e2el = c.first[i] - c.sent[i], c.last[i] - c.sent[i]
        tpot = (e2el - ttft) / (r.output - 1) if r.output >= 2 else None
        served.append(Served(ttft_s=ttft, e2el_s=e2el, tpot_s=tpot))
    top = max(placed, default=-1)
    busy = [reps[k].busy_s if k in reps else 0.0 for k in range(top + 1)]
    least = [least_busy_s([c.uncached[i] for i in range(len(requests)) if placed[i] == k],
                          [r.output for i, r in enumerate(requests) if placed[i] == k], cost)
             for k in range(top + 1)]  # fmt: skip
    return Replay(served=served, busy_s=busy, placement=placed, least_s=least)


def least_busy_s(uncached: Sequence[int], outputs: Sequence[int], cost: StepCost) -> float:
    """The least time (s) a replica's steps can take to serve requests computing ``uncached``
    prompt tokens and generating ``outputs`` tokens (one entry per request), however the
    scheduler batches them: each request's prompt tokens and its output − 1 decode tokens
    cost c_p and c_d each in whatever step computes them, and a step's c0 is shared by at most
    ``budget_tokens`` tokens and ``max_seqs`` sequences, a request holding a sequence in at
    least ``output`` steps (its first token's and one per decode token), so

        least = c0 × max(Σ (u + o − 1) ÷ budget, Σ o ÷ max_seqs) + c_p × Σ u + c_d × Σ (o − 1).

    The time a replica spends in steps is no measure of its load under continuous batching:
    a decode-only step (c0 + c_d × k) becomes, once another prompt waits, a c_d that rides
    in the prompt's step. Traffic whose least time exceeds the time it takes to arrive
    builds a backlog that no batching works off; below it the steps grow until they keep up.
    """
    u, o = sum(uncached), sum(outputs)
    decodes = o - len(outputs)
    steps = max((u + decodes) / cost.budget_tokens, o / cost.max_seqs)
    return cost.step_s * steps + cost.prefill_s_per_token * u + cost.decode_s_per_seq * decodes


def good(s: Served, slo: SLOLimits) -> bool:
    """Whether ``s`` meets every given SLO (≤, ms limits; TPOT only where it exists)."""
    if slo.ttft_ms is not None and s.ttft_s * 1e3 > slo.ttft_ms:
        return False
    if slo.e2el_ms is not None and s.e2el_s * 1e3 > slo.e2el_ms:
        return False
    return slo.tpot_ms is None or s.tpot_s is None or s.tpot_s * 1e3 <= slo.tpot_ms


def attainment(result: Replay, slo: SLOLimits) -> float:
    """Good requests ÷ all requests of a replay; 1.0 without requests."""
    if not result.served:
        return 1.0
    return sum(good(s, slo) for s in result.served) / len(result.served)


def highest_meeting(meets: Callable[[float], bool]) -> float:
    """The highest speedup X with ``meets(X)``, by doubling then bisection to
    :data:`RELATIVE_PRECISION`, assuming ``meets`` holds below some X and fails above it: 0.0
    when it fails at 1 ÷ :data:`MAX_SPEEDUP`, ``math.inf`` when it holds at
    :data:`MAX_SPEEDUP`."""
    if not meets(1 / MAX_SPEEDUP):
        return 0.0
    low, high = 1.0, 1.0
    if meets(1.0):
        while meets(high):
            low, high = high, high * 2
            if high > MAX_SPEEDUP:
                return math.inf
    else:
        while not meets(low):
            high, low = low, low / 2
    while high - low > RELATIVE_PRECISION * low:
        mid = (low + high) / 2
        low, high = (mid, high) if meets(mid) else (low, mid)
    return low


def sustainable_speedup(
    requests: Sequence[EngineRequest],
    cost: StepCost,
    judged: tuple[SLOLimits, float],
    span_s: float,
    compress: bool = True,
    shared: bool = False,
    placer: Placer | None = None,
) -> float:
    """The highest speedup X whose replay's attainment ≥ the target (``judged`` = SLOs,
    target in (0, 1]) and whose busiest replica's least time in steps fits the time the
    slice's traffic stands for, sped up (:func:`least_utilisation` ≤ 1 over
    :func:`traffic_window_s` of ``span_s``, the first to last timed send, s): past that
    point a replica's backlog grows without end on traffic that goes on at that rate,
    however it batches and whatever a finite slice's attainment says; ``placer`` as for
    :func:`replay` (each X's replay places afresh).

    Raises:
        ValueError: a target outside (0, 1], or what :func:`replay` refuses.
    """
    slo, target = judged
    if not 0 < target <= 1:
        raise ValueError(f"the attainment target must be in (0, 1], got {target}")
    window = traffic_window_s(requests, span_s)

    def meets(x: float) -> bool:
        result = replay(requests, x, cost, compress, shared, placer)
        full = least_utilisation(result, x, window, cost, shared)
        return attainment(result, slo) >= target and full <= 1

    return highest_meeting(meets)


def traffic_window_s(requests: Sequence[EngineRequest], span_s: float) -> float:
    """The time (s, at speedup 1) the slice's traffic stands for at its own rate: n timed
    requests sent over ``span_s`` (first to last send) come at (n − 1) ÷ span_s a second, so
    their work stands for n mean intervals, span_s × n ÷ (n − 1) (``span_s`` itself for fewer
    than 2). Measured against the span alone, the work of n requests would be set against
    n − 1 intervals."""
    timed = sum(r.offset_s is not None for r in requests)
    return span_s * timed / (timed - 1) if timed >= 2 else span_s


def least_utilisation(
    result: Replay, speedup: float, window_s: float, cost: StepCost, shared: bool = False
) -> float:
    """The busiest replica's least time in steps (:attr:`Replay.least_s`) ÷ the time its
    traffic stands for at ``speedup`` (``window_s`` ÷ speedup; :func:`traffic_window_s`):
    above 1 its backlog grows without end however the scheduler batches; 0.0 without
    requests, ``math.inf`` for a window ≤ 0 with work. ``shared``: the replicas share cores,
    and a replica's steps run at 1 ÷ (1 + κ_p × Σ ρ) of their speed, ρ each other replica's
    own least utilisation (at most 1): the least they can be in steps beside it; κ_p because
    at full load a step carries prompt tokens."""
    window = window_s / speedup
    if window <= 0:
        return math.inf if any(t > 0 for t in result.least_s) else 0.0
    own = [t / window for t in result.least_s]
    if not shared:
        return max(own, default=0.0)
    rho = [min(u, 1.0) for u in own]
    total = sum(rho)
    return max((u * (1 + cost.contention * (total - r)) for u, r in zip(own, rho, strict=True)),
               default=0.0)  # fmt: skip
