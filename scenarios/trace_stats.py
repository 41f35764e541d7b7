"""Offline statistics of a trace: arrivals, lengths, sessions, its predicted prefix-cache
hit rate against cache size (the cache-size half of a capacity plan), and on a fleet of N
replicas under each routing policy.

Pure functions from a :class:`scenarios.traces.Trace` to typed summaries; printing and
plotting live in the command (``loadgen trace stats``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from gateway.routing import PrefixKeys
from scenarios.fleet.model import FleetOptions, FleetPrediction, predict_fleet
from scenarios.fleet.requests import TraceTokens, closed_loop_events, trace_fleet_requests
from scenarios.prefix_cache_model import (
    CacheRequest,
    capacity_blocks_for_tokens,
    predict_hits,
    trace_cache_requests,
)
from scenarios.traces import Trace

#: Default window of the peak arrival rate (s).
PEAK_WINDOW_S = 10.0
#: Shortest peak window: 1 ms, the unit of a trace's timestamps.
MIN_PEAK_WINDOW_S = 0.001
#: Fraction of the maximum hit rate whose smallest cache the curve reports.
TARGET_FRACTION = 0.9
#: Relative precision of that smallest cache (bisection between two swept sizes).
KNEE_PRECISION = 0.05


@dataclass(frozen=True)
class LengthStats:
    """Distribution of a length (tokens): mean, percentiles by linear interpolation
    (``numpy.percentile``'s default method) and maximum."""

    mean: float
    p50: float
    p90: float
    p99: float
    max: int

    @classmethod
    def of(cls, values: Sequence[int]) -> LengthStats:
        a = np.asarray(values, dtype=np.int64)
        p50, p90, p99 = np.percentile(a, [50, 90, 99])
        return cls(float(a.mean()), float(p50), float(p90), float(p99), int(a.max()))


@dataclass(frozen=True)
class TraceSummary:
    """What a trace asks of a server, before any cache.

    Attributes:
        requests: all requests (session turns included).
        sessions: distinct session ids (0 for a Mooncake trace).
        session_turns: requests that belong to a session.
        span_s: first to last timestamped arrival (later session turns have no timestamp).
        mean_rate_per_s: timestamped arrivals / ``span_s`` (``None`` when the span is 0).
        peak_rate_per_s: the most timestamped arrivals in any window [t, t + W) that starts at
            an arrival, divided by W (``None`` when the span is shorter than W).
        peak_window_s: W.
        input_tokens, output_tokens: length distributions.
    """

    requests: int
    sessions: int
    session_turns: int
    span_s: float
    mean_rate_per_s: float | None
    peak_rate_per_s: float | None
    peak_window_s: float
    input_tokens: LengthStats
    output_tokens: LengthStats


def summarize(trace: Trace, peak_window_s: float = PEAK_WINDOW_S) -> TraceSummary:
    """Arrivals, lengths and sessions of ``trace`` (see :class:`TraceSummary`).

    Raises:
        ValueError: ``peak_window_s`` is not a finite number of at least
            :data:`MIN_PEAK_WINDOW_S` (a shorter window divides a count into an infinite rate).
    """
    if not (math.isfinite(peak_window_s) and peak_window_s >= MIN_PEAK_WINDOW_S):
        raise ValueError(
            f"peak window must be a finite number of seconds ≥ {MIN_PEAK_WINDOW_S:g} (1 ms, the "
            f"trace's unit), got {peak_window_s}"
        )
    arrivals_s = np.sort(np.asarray(trace.arrivals_ms, dtype=np.float64)) / 1000.0
    span_s = trace.span_ms / 1000.0
    peak = None
    if span_s >= peak_window_s:
        ends = np.searchsorted(arrivals_s, arrivals_s + peak_window_s, side="left")
        peak = float((ends - np.arange(len(arrivals_s))).max()) / peak_window_s
    sessions = trace.sessions()
    return TraceSummary(
        requests=len(trace.requests),
        sessions=len(sessions),
        session_turns=sum(len(turns) for turns in sessions.values()),
        span_s=span_s,
        mean_rate_per_s=len(arrivals_s) / span_s if span_s > 0 else None,
        peak_rate_per_s=peak,
        peak_window_s=peak_window_s,
        input_tokens=LengthStats.of([r.input_length for r in trace.requests]),
        output_tokens=LengthStats.of([r.output_length for r in trace.requests]),
    )


@dataclass(frozen=True)
class CachePoint:
    """The predicted hit rate at one cache size.

    Attributes:
        cache_tokens: the cache as vLLM reports it (``num_gpu_blocks × block_size``).
        capacity_blocks: usable blocks (one fewer: the null block).
        hit_rate: predicted hit tokens / query tokens (0–1).
        short_requests: requests that started when the cache could not hold them (the model
            lent them blocks; vLLM would have queued or preempted them).
    """

    cache_tokens: int
    capacity_blocks: int
    hit_rate: float
    short_requests: int


@dataclass(frozen=True)
class HitCurve:
    """Predicted prefix-cache hit rate against cache size, requests sent one after another.

    Attributes:
        block_tokens: the server's block size B.
        max_hit_rate: the unbounded cache's hit rate (the trace's theoretical maximum).
        footprint_tokens: the smallest cache (vLLM's tokens, null block included) that never
            evicts a cached block: from there on the hit rate is the maximum.
        points: the swept sizes, ascending.
        target_fraction: the fraction of ``max_hit_rate`` asked for (0.9).
        target_cache_tokens: the smallest cache found reaching ``target_fraction ×
            max_hit_rate`` (within ``KNEE_PRECISION`` when bisected between two swept sizes;
            only sizes at or above the smallest swept one are searched), ``None`` if none of
            the swept sizes reaches it.
    """

    block_tokens: int
    max_hit_rate: float
    footprint_tokens: int
    points: tuple[CachePoint, ...]
    target_fraction: float
    target_cache_tokens: int | None


def default_cache_tokens(footprint_tokens: int, block_tokens: int, points: int = 8) -> list[int]:
    """``points`` sizes halving down from the footprint (footprint, /2, /4, …), in whole
    blocks, at least 2 blocks; ascending, without repeats."""
    sizes = {max(2, (footprint_tokens >> k) // block_tokens) * block_tokens for k in range(points)}
    return sorted(sizes)


def _point(requests: Sequence[CacheRequest], cache_tokens: int, block_tokens: int) -> CachePoint:
    blocks = capacity_blocks_for_tokens(cache_tokens, block_tokens)
    # A pool with a block for every block the requests ever allocate never evicts, so any
    # larger one predicts the same: replay that many (a cache of 10^20 tokens would
    # otherwise be a free list of 10^20 entries).
    ever = sum(-(-(r.prompt_tokens + r.output_tokens) // block_tokens) for r in requests)
    prediction = predict_hits(requests, min(blocks, ever), block_tokens)
    return CachePoint(cache_tokens, blocks, prediction.hit_rate, prediction.short_requests)


def hit_curve(
    trace: Trace,
    block_tokens: int,
    cache_tokens: Sequence[int] | None = None,
    target_fraction: float = TARGET_FRACTION,
) -> HitCurve:
    """The predicted hit rate of ``trace`` (requests one after another, in file order) at each
    cache size in ``cache_tokens`` (default: :func:`default_cache_tokens`), its maximum, and
    the smallest cache reaching ``target_fraction`` of that maximum.

    Raises:
        ValueError: a cache size smaller than one block plus the null block.
    """
    requests = trace_cache_requests(trace, block_tokens)
    unbounded = predict_hits(requests, None, block_tokens)
    footprint = (unbounded.pool_blocks + 1) * block_tokens
    sizes = (
        sorted(set(cache_tokens)) if cache_tokens else default_cache_tokens(footprint, block_tokens)
    )
    for size in sizes:
        if size < 2 * block_tokens:
            raise ValueError(
                f"cache of {size} tokens: needs at least 2 blocks of {block_tokens} tokens "
                "(one is vLLM's null block)"
            )
    points = [_point(requests, size, block_tokens) for size in sizes]
    target = target_fraction * unbounded.hit_rate
    reached = [p for p in points if p.hit_rate >= target]
    target_tokens: int | None = None
    if reached and unbounded.hit_rate > 0:
        hi = reached[0].cache_tokens
        below = [p.cache_tokens for p in points if p.cache_tokens < hi]
        lo = below[-1] if below else None
        # Bisect (in blocks) between the last size below the target and the first above.
        while lo is not None and hi - lo > max(block_tokens, KNEE_PRECISION * hi):
            mid = (lo + hi) // 2 // block_tokens * block_tokens
            if mid <= lo:
                break
            if _point(requests, mid, block_tokens).hit_rate >= target:
                hi = mid
            else:
                lo = mid
        target_tokens = hi
    return HitCurve(
        block_tokens=block_tokens,
        max_hit_rate=unbounded.hit_rate,
        footprint_tokens=footprint,
        points=tuple(points),
        target_fraction=target_fraction,
        target_cache_tokens=target_tokens,
    )


def cache_tokens_for_bytes(cache_bytes: int, kv_bytes_per_token: int, block_tokens: int) -> int:
    """Tokens vLLM fits in ``cache_bytes``: whole blocks of ``block_tokens × kv_bytes_per_token``
    bytes (``available_memory // bytes_per_block`` in ``vllm/v1/core/kv_cache_utils.py``, as
    ``server.model_variant.ModelVariant.capacity_tokens`` computes for the embedded model)."""
    return cache_bytes // (block_tokens * kv_bytes_per_token) * block_tokens


@dataclass(frozen=True)
class FleetStats:
    """A trace's predicted hit rate on a fleet, per routing policy (``loadgen trace stats
    --replicas N``).

    Attributes:
        cache_tokens: one replica's cache as vLLM reports it.
        concurrency: the closed loop's clients (1: requests one after another).
        prediction: the fleet model's answer (:class:`scenarios.fleet.model.FleetPrediction`).
    """

    cache_tokens: int
    concurrency: int
    prediction: FleetPrediction


def fleet_stats(
    trace: Trace,
    block_tokens: int,
    cache_tokens: int,
    replicas: int,
    policies: Sequence[str],
    concurrency: int = 1,
    keys: PrefixKeys | None = None,
    options: FleetOptions | None = None,
    tokens: TraceTokens | None = None,
) -> FleetStats:
    """``trace`` (file order) on ``replicas`` replicas of ``cache_tokens`` each, sent by
    ``concurrency`` clients in a closed loop, under each of ``policies``
    (:func:`scenarios.fleet.model.predict_fleet`); the gateway's keys are those of the
    prompts a replay with ``tokens`` sends.

    Raises:
        ValueError: a cache smaller than 2 blocks, or what ``predict_fleet`` refuses.
    """
    if cache_tokens < 2 * block_tokens:
        raise ValueError(
            f"cache of {cache_tokens} tokens: needs at least 2 blocks of {block_tokens} tokens "
            "(one is vLLM's null block)"
        )
    requests = trace_fleet_requests(trace, block_tokens, keys, tokens)
    events = closed_loop_events(len(requests), concurrency)
    capacity = capacity_blocks_for_tokens(cache_tokens, block_tokens)
    prediction = predict_fleet(
        requests, replicas, capacity, block_tokens, policies, events, options
    )
    return FleetStats(cache_tokens, concurrency, prediction)
