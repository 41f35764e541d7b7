"""scenarios.trace_stats: arrival rates, length percentiles and the default cache sweep."""

from __future__ import annotations

import pytest

from scenarios.trace_stats import cache_tokens_for_bytes, default_cache_tokens, summarize
from scenarios.traces import Trace, TraceRequest


def trace_of(timestamps_ms: list[float], inputs: list[int] | None = None) -> Trace:
    inputs = inputs or [10] * len(timestamps_ms)
    requests = tuple(
        TraceRequest(line=i + 1, timestamp_ms=t, input_length=n, output_length=1, hash_ids=(i,))
        for i, (t, n) in enumerate(zip(timestamps_ms, inputs, strict=True))
    )
    return Trace(path="t", sha256="0", kind="mooncake", block_tokens=512, requests=requests)


def test_rates_over_the_span_and_the_busiest_window() -> None:
    # Arrivals at 0, 0.1, 0.2, 0.3 s, then 5, 10 s: span 10 s, 6 arrivals → 0.6 req/s. With a
    # 1 s window the busiest one, [0, 1), holds 4 → 4 req/s; with a 10 s window [0, 10) holds
    # 5 (10 s itself is outside) → 0.5 req/s.
    trace = trace_of([0, 100, 200, 300, 5000, 10000])
    s = summarize(trace, peak_window_s=1)
    assert s.span_s == 10 and s.mean_rate_per_s == pytest.approx(0.6)
    assert s.peak_rate_per_s == 4
    assert summarize(trace, peak_window_s=10).peak_rate_per_s == 0.5
    assert summarize(trace, peak_window_s=11).peak_rate_per_s is None  # span < window


def test_a_single_request_has_no_rate() -> None:
    s = summarize(trace_of([0]))
    assert (s.span_s, s.mean_rate_per_s, s.peak_rate_per_s) == (0, None, None)


def test_length_percentiles_interpolate() -> None:
    # 1..100: numpy's linear percentiles are 50.5, 90.1, 99.01.
    s = summarize(trace_of([float(i) for i in range(100)], list(range(1, 101))))
    assert (s.input_tokens.p50, s.input_tokens.p90) == pytest.approx((50.5, 90.1))
    assert s.input_tokens.p99 == pytest.approx(99.01)
    assert (s.input_tokens.mean, s.input_tokens.max) == (50.5, 100)


def test_default_sweep_halves_down_from_the_footprint_in_whole_blocks() -> None:
    # 1,000 blocks of 128: 1000, 500, 250, 125, 62, 31, 15, 7 blocks.
    sizes = default_cache_tokens(128_000, 128)
    assert [n // 128 for n in sizes] == [7, 15, 31, 62, 125, 250, 500, 1000]
    assert default_cache_tokens(3 * 128, 128) == [256, 384]  # at least 2 blocks, no repeats


def test_bytes_to_tokens_in_whole_blocks() -> None:
    # 1 GiB of the embedded model's 57,344 B/token at 128-token blocks: 146 blocks.
    assert cache_tokens_for_bytes(2**30, 57_344, 128) == 146 * 128 == 18_688
