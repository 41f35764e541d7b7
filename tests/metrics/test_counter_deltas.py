"""metrics.samples: series over labels and per engine, counter deltas and resets, gauge peaks,
value_at, missing families, and NaN never changing a result."""

from __future__ import annotations

import math

import pytest

from metrics.names import MissingFamilyError
from metrics.samples import (
    Sample,
    counter_delta,
    counter_resets,
    gauge_peak,
    gauge_peak_by,
    require_family,
    series,
    series_by,
    value_at,
)

# A counter scraped at t = 1..5 s (ns below); the server restarted between t=3 and t=4.
S = 1_000_000_000
RESET = [(1 * S, 10.0), (2 * S, 15.0), (3 * S, 20.0), (4 * S, 3.0), (5 * S, 8.0)]


def test_delta_without_reset() -> None:
    points = [(1 * S, 100.0), (2 * S, 130.0), (3 * S, 175.0)]
    assert counter_delta(points, 1 * S, 3 * S) == 75.0  # 175 − 100


def test_delta_across_a_reset_keeps_both_sides() -> None:
    # 10→15 (+5), 15→20 (+5), restart 20→3 (+3: counted from zero), 3→8 (+5) = 18.
    assert counter_delta(RESET, 1 * S, 5 * S) == 18.0


def test_window_uses_last_points_at_or_before_its_bounds() -> None:
    # start 2.5 s → base is the t=2 point (15); end 4.5 s → last is the t=4 point (3):
    # 15→20 (+5), restart → 3 (+3) = 8.
    assert counter_delta(RESET, int(2.5 * S), int(4.5 * S)) == 8.0


def test_a_window_with_no_reading_of_its_own_is_unknown_not_zero() -> None:
    # Between the scrapes at 1 s and 2 s: the last point at or before the end (t=1) is the
    # base itself, so the counter was never read in the window; 0 would be made up.
    assert counter_delta(RESET, int(1.2 * S), int(1.8 * S)) is None
    # Scrapes failed from 2 s to 5 s (no point there): a window [2.5 s, 4.9 s] read nothing
    # after its base (t=2, value 15) — not 0, though the counter rose meanwhile.
    failed = [(1 * S, 10.0), (2 * S, 15.0), (5 * S, 40.0)]
    assert counter_delta(failed, int(2.5 * S), int(4.9 * S)) is None
    assert counter_resets(failed, int(2.5 * S), int(4.9 * S)) == []
    # Once a reading lands in the window the delta is known: 15 → 40 = 25.
    assert counter_delta(failed, int(2.5 * S), 5 * S) == 25.0
    # No point before the window and a single one inside: no increment can be measured.
    assert counter_delta(RESET, 0, int(1.5 * S)) is None


def test_window_starting_before_the_first_point_uses_it_as_base() -> None:
    # Nothing known before t=1: 10→15→20 = +10 up to t=3.
    assert counter_delta(RESET, 0, 3 * S) == 10.0


def test_window_ending_before_the_first_point_is_unknown() -> None:
    assert counter_delta(RESET, 0, S - 1) is None


def test_no_points_is_unknown() -> None:
    assert counter_delta([], 0, 10 * S) is None


def test_gauge_peak_inside_the_window_only() -> None:
    points = [(1 * S, 0.2), (2 * S, 0.9), (3 * S, 0.5), (4 * S, 0.95)]
    assert gauge_peak(points, 1 * S, 3 * S) == 0.9  # bounds inclusive, t=4 excluded
    assert gauge_peak(points, int(1.5 * S), int(1.7 * S)) is None
    assert gauge_peak([], 0, S) is None


def test_value_at() -> None:
    assert value_at(RESET, 0) is None
    assert value_at(RESET, 1 * S) == 10.0
    assert value_at(RESET, int(3.5 * S)) == 20.0
    assert value_at(RESET, 99 * S) == 8.0


def success(t: int, reason: str, value: float) -> Sample:
    return Sample(t, "request_success", (("finished_reason", reason), ("model_name", "m")), value)


SAMPLES = [
    success(1 * S, "length", 10.0),
    success(1 * S, "stop", 2.0),
    success(1 * S, "abort", 0.0),
    Sample(1 * S, "num_requests_running", (("model_name", "m"),), 4.0),
    success(2 * S, "length", 14.0),
    success(2 * S, "stop", 2.0),
    success(2 * S, "abort", 1.0),
]


def test_series_sums_over_unmatched_labels_per_scrape() -> None:
    assert series(SAMPLES, "request_success") == [(1 * S, 12.0), (2 * S, 17.0)]


def test_series_filters_on_given_labels() -> None:
    assert series(SAMPLES, "request_success", finished_reason="length") == [
        (1 * S, 10.0),
        (2 * S, 14.0),
    ]
    assert series(SAMPLES, "request_success", finished_reason="repetition") == []


def test_series_is_sorted_by_time() -> None:
    shuffled = [SAMPLES[4], SAMPLES[0], SAMPLES[5], SAMPLES[1]]
    assert series(shuffled, "request_success") == [(1 * S, 12.0), (2 * S, 16.0)]


def test_delta_of_a_summed_series() -> None:
    # Total successes over the window: 12 → 17 = 5.
    assert counter_delta(series(SAMPLES, "request_success"), 1 * S, 2 * S) == 5.0


def test_resets_are_listed_where_counter_delta_handles_them() -> None:
    # The only decrease is 20 → 3 at t=4.
    assert counter_resets(RESET, 1 * S, 5 * S) == [4 * S]
    # Window [2.5 s, 4.5 s]: base t=2, steps to t=3 and t=4; the reset at t=4 is in it.
    assert counter_resets(RESET, int(2.5 * S), int(4.5 * S)) == [4 * S]
    # Window [4 s, 5 s]: base is the t=4 point itself; 3 → 8 is no reset.
    assert counter_resets(RESET, 4 * S, 5 * S) == []
    assert counter_resets([], 0, S) == []


def test_nan_points_change_no_delta_reset_peak_or_value() -> None:
    nan = math.nan
    with_nan = [(1 * S, 10.0), (2 * S, nan), (3 * S, 20.0), (4 * S, 3.0), (5 * S, 8.0)]
    # Same as without the t=2 point: 10→20 (+10), reset → 3 (+3), 3→8 (+5) = 18.
    assert counter_delta(with_nan, 1 * S, 5 * S) == 18.0
    assert counter_resets(with_nan, 1 * S, 5 * S) == [4 * S]
    assert value_at(with_nan, int(2.5 * S)) == 10.0
    # Once, [NaN, 0.2] gave a null peak while [0.2, NaN] gave 0.2.
    assert gauge_peak([(1 * S, nan), (2 * S, 0.2)], 0, 3 * S) == 0.2
    assert gauge_peak([(1 * S, 0.2), (2 * S, nan)], 0, 3 * S) == 0.2
    assert gauge_peak([(1 * S, nan)], 0, 3 * S) is None


def kv(t: int, engine: str, value: float) -> Sample:
    return Sample(t, "kv_cache_usage_perc", (("engine", engine), ("model_name", "m")), value)


# Two data-parallel engines at 0.6 and 0.7 KV usage, then lower.
TWO_ENGINES = [
    kv(1 * S, "0", 0.6),
    kv(1 * S, "1", 0.7),
    kv(2 * S, "0", 0.5),
    kv(2 * S, "1", 0.2),
]


def test_gauges_per_engine_peak_at_their_own_values_not_their_sum() -> None:
    assert series_by(TWO_ENGINES, "kv_cache_usage_perc") == {
        "0": [(1 * S, 0.6), (2 * S, 0.5)],
        "1": [(1 * S, 0.7), (2 * S, 0.2)],
    }
    peaks = gauge_peak_by(TWO_ENGINES, "kv_cache_usage_perc", 0, 3 * S)
    assert peaks == {"0": 0.6, "1": 0.7}
    assert max(peaks.values()) == 0.7
    # Summing over engines (what the old parser did by dropping the label) gives 0.6 + 0.7.
    assert gauge_peak(series(TWO_ENGINES, "kv_cache_usage_perc"), 0, 3 * S) == pytest.approx(1.3)


def test_series_by_filters_labels_and_keeps_samples_without_the_label() -> None:
    v0 = [Sample(1 * S, "kv_cache_usage_perc", (("model_name", "m"),), 0.25)]
    assert series_by(v0, "kv_cache_usage_perc") == {"": [(1 * S, 0.25)]}
    assert series_by(SAMPLES, "request_success", label="finished_reason") == {
        "abort": [(1 * S, 0.0), (2 * S, 1.0)],
        "length": [(1 * S, 10.0), (2 * S, 14.0)],
        "stop": [(1 * S, 2.0), (2 * S, 2.0)],
    }
    assert series_by(SAMPLES, "request_success", label="finished_reason", model_name="x") == {}


def test_counters_sum_over_engines() -> None:
    # Each engine counts its own tokens; the server's total is their sum per scrape.
    tokens = [
        Sample(1 * S, "generation_tokens", (("engine", "0"),), 100.0),
        Sample(1 * S, "generation_tokens", (("engine", "1"),), 40.0),
        Sample(2 * S, "generation_tokens", (("engine", "0"),), 130.0),
        Sample(2 * S, "generation_tokens", (("engine", "1"),), 90.0),
    ]
    # (130 + 90) − (100 + 40) = 80.
    assert counter_delta(series(tokens, "generation_tokens"), 1 * S, 2 * S) == 80.0


def test_a_missing_family_is_an_error_not_zero() -> None:
    require_family(SAMPLES, "request_success")
    with pytest.raises(MissingFamilyError, match="vllm:prefix_cache_hits_total"):
        require_family(SAMPLES, "prefix_cache_hits")
    hist = [Sample(1, "ttft_seconds_count", (), 3.0)]
    require_family(hist, "ttft_seconds")
