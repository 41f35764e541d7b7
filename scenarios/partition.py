"""Splitting one phase's requests across N load-generator workers (processes or Ray actors).

Each worker sends its :class:`WorkerShare`: which request indices, at which offsets from the
shared phase start (open loop), with how many in flight (closed loop). Pure and seeded, so the
coordinator and a test compute the same split. With one worker the share is the whole phase,
sent exactly as a single process sends it.

- **Closed loop, C in flight.** A single process behaves like C *slots*, each taking the next
  request when its own finishes, so request i lands on slot ``i mod C``. The slots are dealt
  to workers in turn (slot s → worker ``s mod N``), so worker k holds ``C // N`` slots, plus
  one if ``k < C mod N`` (5 over 2 = 3 + 2: exactly C in flight in total), and receives the
  requests of its slots, in the order a single process would send them. Requests are thus
  dealt in proportion to each worker's concurrency, and neighbouring requests (which a single
  process sends at about the same time) go to different workers at about the same time.
- **All at once** is a closed loop with C = the phase's request count.
- **Open loop at rate r.** Worker k draws its own arrival stream at rate r/N from a seed
  derived from the phase's seed and k (``numpy.random.SeedSequence(seed, spawn_key=(k,))``:
  distinct, independent and reproducible streams). The phase's requests are the first n
  arrivals of the merged streams, request i being the i-th arrival overall. Why this gives
  the requested schedule: the superposition of N independent Poisson processes of rates
  r/N is a Poisson process of rate r (the merged gaps are independent exponentials of mean
  1/r), so the merged schedule has the requested rate *and* independent gaps. Seeding every
  worker alike would instead send N requests at the same instants (gaps of zero, then N/r).
  With ``burstiness`` ≠ 1 each worker's stream keeps its gamma gaps and the merged stream keeps
  the rate and the long-run burstiness (the variance-to-mean ratio of arrival counts, 1/shape
  for a gamma renewal stream, is preserved by superposing independent streams), but its gaps
  are no longer gamma-distributed themselves. A ``constant`` pattern's single schedule is
  dealt round-robin instead (every merged gap stays exactly 1/λ). A ``max_concurrency`` cap
  is split like a closed loop's concurrency (each worker caps its own in-flight requests).
- **Trace.** Its timestamps are the schedule: the requests are dealt round-robin (request i
  to worker i mod N), each keeping its own offset. A trace with session turns (sent after
  the end of another request) cannot be split: the turn's sender must see that end.

See docs/scaling-out.md.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from scenarios.arrivals import Arrival, OpenLoop, TraceArrival, open_loop_offsets_ns


@dataclass(frozen=True)
class WorkerShare:
    """The part of one phase a worker sends.

    Attributes:
        worker: worker index, 0..N−1.
        indices: request indices of the phase, in the order this worker sends them.
        offsets_ns: open loop: the send offset of each (same order), ns from the shared phase
            start; ``None`` for closed loop and all at once.
        concurrency: requests this worker keeps in flight (closed loop, all at once), or its
            share of an open loop's ``max_concurrency``; ``None`` for an uncapped open loop.
    """

    worker: int
    indices: tuple[int, ...]
    offsets_ns: tuple[int, ...] | None
    concurrency: int | None


def split_concurrency(total: int, workers: int) -> list[int]:
    """``total`` in-flight slots dealt to ``workers`` in turn: the first ``total mod workers``
    get one more (5 over 2 → [3, 2]; 1 over 2 → [1, 0]). The sum is always ``total``."""
    if workers < 1:
        raise ValueError(f"workers must be at least 1, got {workers}")
    base, extra = divmod(total, workers)
    return [base + (1 if k < extra else 0) for k in range(workers)]


def worker_seed_sequence(seed: int, worker: int) -> np.random.SeedSequence:
    """The seed of worker ``worker``'s arrival stream: ``SeedSequence(seed, spawn_key=(k,))``,
    numpy's way to derive independent streams from one seed (distinct for every k,
    the same on every run)."""
    return np.random.SeedSequence(seed, spawn_key=(worker,))


def worker_arrivals_s(arrival: OpenLoop, worker: int, workers: int, count: int) -> np.ndarray:
    """The first ``count`` arrival times (s, from 0) of worker ``worker``'s stream: gamma gaps
    of shape ``burstiness`` and mean N/r (rate r/N), the first arrival one gap after 0."""
    rng = np.random.default_rng(worker_seed_sequence(arrival.seed, worker))
    shape = arrival.burstiness
    rate = arrival.rate() / workers
    return np.cumsum(rng.gamma(shape, 1.0 / (rate * shape), size=count))


def merged_open_loop(arrival: OpenLoop, n: int, workers: int) -> tuple[np.ndarray, np.ndarray]:
    """(offsets_ns, worker) of the first ``n`` arrivals of the merged per-worker streams, in
    time order, shifted so the first is at 0 (as a single process's schedule starts).

    Each stream is drawn long enough to hold its part of the first n arrivals (n/N plus eight
    standard deviations, then doubled until it reaches past the n-th merged arrival), so
    the result does not depend on how much was drawn.
    """
    per = n / workers
    count = max(1, math.ceil(per + 8 * math.sqrt(per) + 16))
    while True:
        streams = [worker_arrivals_s(arrival, k, workers, count) for k in range(workers)]
        times = np.concatenate(streams)
        source = np.repeat(np.arange(workers), count)
        order = np.argsort(times, kind="stable")[:n]
        # Every stream must have been drawn past the n-th arrival, or one of its unseen
        # arrivals could belong among the first n.
        if all(s[-1] >= times[order[-1]] for s in streams) or count >= n:
            break
        count *= 2
    picked = times[order]
    offsets = np.round((picked - picked[0]) * 1e9).astype(np.int64)
    return offsets, source[order]


def _slot_shares(n: int, slots: int, workers: int) -> list[WorkerShare]:
    per_worker = split_concurrency(slots, workers)
    indices: list[list[int]] = [[] for _ in range(workers)]
    for i in range(n):
        indices[(i % slots) % workers].append(i)
    return [
        WorkerShare(k, tuple(indices[k]), None, per_worker[k] if indices[k] else 0)
        for k in range(workers)
    ]


def partition_phase(arrival: Arrival, n: int, workers: int) -> list[WorkerShare]:
    """Split a phase of ``n`` requests across ``workers`` (see the module docstring).

    Returns one share per worker (some may be empty: 2 in flight over 3 workers leaves one
    idle). With one worker the share is every request in order, with the single-process
    schedule (``open_loop_offsets_ns``) and concurrency.

    Raises:
        ValueError: ``workers`` < 1, or a trace with session turns over several workers.
    """
    if workers < 1:
        raise ValueError(f"workers must be at least 1, got {workers}")
    slots = arrival.slots(n)
    if slots is not None:  # closed loop, all at once
        return _slot_shares(n, slots, workers)
    if isinstance(arrival, TraceArrival):
        return _trace_shares(arrival, n, workers)
    assert isinstance(arrival, OpenLoop)
    return _open_loop_shares(arrival, n, workers)


def _open_loop_shares(arrival: OpenLoop, n: int, workers: int) -> list[WorkerShare]:
    """An open loop's shares: per-worker streams merged (a constant pattern dealt
    round-robin), its cap split like a closed loop's concurrency."""
    caps = (
        split_concurrency(arrival.max_concurrency, workers)
        if arrival.max_concurrency is not None
        else [None] * workers
    )
    if workers == 1:
        return [WorkerShare(0, tuple(range(n)), tuple(open_loop_offsets_ns(arrival, n)), caps[0])]
    active = workers if arrival.max_concurrency is None else min(workers, arrival.max_concurrency)
    if n == 0:
        return [WorkerShare(k, (), (), caps[k]) for k in range(workers)]
    if arrival.pattern == "constant":
        # Equal gaps: the single-process schedule, dealt round-robin (arrival i to worker i mod
        # N), keeps every gap exactly 1/λ across the merged stream.
        offsets = np.asarray(open_loop_offsets_ns(arrival, n), dtype=np.int64)
        source = np.arange(n) % active
    else:
        offsets, source = merged_open_loop(arrival, n, active)
    shares = []
    for k in range(workers):
        mine = np.flatnonzero(source == k)
        shares.append(WorkerShare(k, tuple(mine.tolist()), tuple(offsets[mine].tolist()), caps[k]))
    return shares


def _trace_shares(arrival: TraceArrival, n: int, workers: int) -> list[WorkerShare]:
    """A trace's requests dealt round-robin with their own offsets (a session turn's offset
    is 0: it is sent after the end of the turn it follows, not on the clock)."""
    if n != len(arrival.offsets_ms):
        raise ValueError(f"the trace arrival times {len(arrival.offsets_ms)} requests, not {n}")
    if workers > 1 and arrival.has_sessions:
        raise ValueError("a trace with session turns cannot be split across workers")
    offsets = [0 if arrival.follows[i] is not None else arrival.offset_ns(i) for i in range(n)]
    return [
        WorkerShare(
            k,
            tuple(range(k, n, workers)),
            tuple(offsets[k::workers]),
            None,
        )
        for k in range(workers)
    ]
