"""metrics.samples: series over labels, counter deltas across resets, gauge peaks, value_at."""

from __future__ import annotations

from metrics.samples import Sample, counter_delta, gauge_peak, series, value_at

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
    # A window between two scrapes sees no increment.
    assert counter_delta(RESET, int(1.2 * S), int(1.8 * S)) == 0.0


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
