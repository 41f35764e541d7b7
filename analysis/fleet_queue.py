"""The queue a fleet's replicas see when a trace is replayed sped up: each request's predicted
TTFT and E2EL, the SLO attainment they give and the highest speedup that keeps it at the
target (the predicted sustainable speedup).

Each replica is a single server taking its requests one at a time, first come first served
(Lindley's recursion for a FIFO single-server queue, D. V. Lindley, "The theory of queues with
a single server", Proc. Cambridge Phil. Soc. 48, 1952): request i of a replica, arriving at
tᵢ with service time sᵢ, waits

    Wᵢ = max(0, Wᵢ₋₁ + sᵢ₋₁ − (tᵢ − tᵢ₋₁))      (W of the replica's first request = 0)

then has TTFT = Wᵢ + its prefill time and E2EL = Wᵢ + sᵢ; its TPOT is its decode time per
token. It is good when every given SLO holds with ≤ (``analysis.goodput.judge``'s rule; TPOT
only for outputs of 2 tokens or more).

Sped up X times, the trace's timed arrivals come at offset ÷ X; a session turn, which the
replay sends a delay after the turn it follows ends, is taken to arrive that delay (÷ X when
the replay compresses delays) after the followed turn would end unqueued (its arrival plus
its service time): the wait of the turn it follows is left out, so turns arrive a little
early and the queue errs towards too much work at once.

Shrinking the gaps between arrivals never shortens a wait (Lindley's recursion is
non-decreasing in sᵢ₋₁ − gap, by induction), so with timed arrivals the attainment does not
rise with X, and the sustainable speedup, the highest X whose attainment ≥ the target, is
found by bisection.

What the queue leaves out (so the answer reads as the serving cost measured unqueued, spread
over the replicas the placement gives): vLLM's batching (several requests' decode steps in
one engine step cost less than one after another, so the queue errs towards more work), its
chunked prefill mixing prefills into decode steps (a TPOT inflation the queue does not
predict), and any contention between replicas beyond what the measured cost already holds.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from analysis.goodput import SLOLimits

#: Bisection stops when the bracket of the sustainable speedup is this narrow (relative).
RELATIVE_PRECISION = 1e-4
#: Speedups searched: a trace whose target holds beyond this is reported as unbounded.
MAX_SPEEDUP = 1e6


@dataclass(frozen=True)
class QueuedRequest:
    """One request as the queue sees it.

    Attributes:
        replica: the replica the placement sent it to (0-based).
        offset_s: its arrival at speedup 1, s from the slice's first request; ``None`` for a
            session turn (then ``follows`` and ``delay_s``).
        follows: the index (in the sequence) of the turn it follows, or ``None``.
        delay_s: its delay after the followed turn ends, s at speedup 1.
        prefill_s: its time to first token unqueued, s.
        service_s: the time it keeps its replica busy unqueued (prefill and decode), s.
        decode_s_per_token: its time per output token after the first, s (``None``: a
            1-token output, judged without TPOT).
    """

    replica: int
    offset_s: float | None
    follows: int | None
    delay_s: float
    prefill_s: float
    service_s: float
    decode_s_per_token: float | None


def arrivals(requests: Sequence[QueuedRequest], speedup: float, compress: bool) -> list[float]:
    """Each request's arrival (s from the slice's start) at ``speedup`` (module docstring).

    Raises:
        ValueError: a speedup ≤ 0, or a turn that follows itself or a later request.
    """
    if speedup <= 0:
        raise ValueError(f"speedup must be positive, got {speedup}")
    out: list[float] = []
    for i, r in enumerate(requests):
        if r.offset_s is not None:
            out.append(r.offset_s / speedup)
            continue
        if r.follows is None or not 0 <= r.follows < i:
            raise ValueError(f"request {i}: a session turn must follow an earlier request")
        prior = requests[r.follows]
        out.append(out[r.follows] + prior.service_s + r.delay_s / (speedup if compress else 1))
    return out


def _good(r: QueuedRequest, wait_s: float, slo: SLOLimits) -> bool:
    """Whether ``r`` after waiting ``wait_s`` meets every given SLO (≤, ms limits)."""
    if slo.ttft_ms is not None and (wait_s + r.prefill_s) * 1e3 > slo.ttft_ms:
        return False
    if slo.e2el_ms is not None and (wait_s + r.service_s) * 1e3 > slo.e2el_ms:
        return False
    tpot = r.decode_s_per_token
    return slo.tpot_ms is None or tpot is None or tpot * 1e3 <= slo.tpot_ms


def predicted_attainment(
    requests: Sequence[QueuedRequest], speedup: float, slo: SLOLimits, compress: bool = True
) -> float:
    """Good requests ÷ all requests when the slice is replayed ``speedup`` times faster, each
    replica a FIFO single server (module docstring); 1.0 without requests.

    Raises:
        ValueError: what :func:`arrivals` refuses.
    """
    if not requests:
        return 1.0
    at = arrivals(requests, speedup, compress)
    order = sorted(range(len(requests)), key=lambda i: (at[i], i))
    free_at: dict[int, float] = {}
    good = 0
    for i in order:
        r = requests[i]
        start = max(at[i], free_at.get(r.replica, -math.inf))
        free_at[r.replica] = start + r.service_s
        good += _good(r, start - at[i], slo)
    return good / len(requests)


def sustainable_speedup(
    requests: Sequence[QueuedRequest], slo: SLOLimits, target: float, compress: bool = True
) -> float:
    """The highest speedup whose :func:`predicted_attainment` ≥ ``target`` (0–1), to
    :data:`RELATIVE_PRECISION`: 0.0 when even an unqueued replay misses it (a request's own
    cost breaks an SLO), ``math.inf`` when it holds at :data:`MAX_SPEEDUP`.

    Raises:
        ValueError: a target outside (0, 1], or what :func:`arrivals` refuses.
    """
    if not 0 < target <= 1:
        raise ValueError(f"the attainment target must be in (0, 1], got {target}")

    def meets(x: float) -> bool:
        return predicted_attainment(requests, x, slo, compress) >= target

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
