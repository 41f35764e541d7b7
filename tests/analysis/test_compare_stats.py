"""analysis.compare_stats: pooled statistics, the seeded bootstrap ratio interval, the run-to-run
interval of per-run figures, the minimum-sample rule and the four-way classification."""

from __future__ import annotations

import numpy as np
import pytest

from analysis.compare_stats import (
    bootstrap_ratio,
    bootstrap_ratio_runs,
    classify,
    per_run_difference,
    pooled_stat,
    too_few,
)


def test_pooled_p99_is_over_every_request_not_the_average_of_the_workers_p99s() -> None:
    # Worker A: 100 requests at 10 ms; worker B: 100 requests at 500 ms. Each worker's p99 is
    # its only value (10 and 500), so averaging them gives 255 ms; pooled, 99 % of 199 = 197.01
    # falls between the sorted positions 197 and 198, both 500 ms: the pooled p99 is 500 ms.
    worker_a, worker_b = np.full(100, 10.0), np.full(100, 500.0)
    averaged = (pooled_stat(worker_a, "p99") + pooled_stat(worker_b, "p99")) / 2
    assert averaged == 255.0
    assert pooled_stat(np.concatenate([worker_a, worker_b]), "p99") == 500.0


def test_pooled_mean_and_percentile_use_linear_interpolation() -> None:
    values = np.array([1.0, 2.0, 3.0, 4.0])
    assert pooled_stat(values, "mean") == 2.5
    assert pooled_stat(values, "p50") == 2.5  # halfway between positions 1 and 2
    assert pooled_stat(values, "p95") == pytest.approx(3.85)  # 0.95 × 3 = 2.85 → 3 + 0.85


@pytest.mark.parametrize(
    ("low", "high", "expected"),
    [
        # tolerance 0.10 around 1, lower is better: band [0.9, 1.1]
        (1.20, 1.30, "regression"),  # entirely above 1.1
        (0.70, 0.85, "improvement"),  # entirely below 0.9
        (0.95, 1.05, "no change"),  # inside [0.9, 1.1]
        (0.90, 1.10, "no change"),  # the band's edges belong to it
        (1.05, 1.20, "inconclusive"),  # straddles 1.1
        (0.80, 1.20, "inconclusive"),  # straddles both edges
    ],
)
def test_classify_a_ratio_interval_when_lower_is_better(
    low: float, high: float, expected: str
) -> None:
    assert classify(low, high, neutral=1.0, tolerance=0.10, better="lower") == expected


def test_classify_mirrors_when_higher_is_better() -> None:
    # A hit rate 0.05 lower (difference interval [-0.06, -0.04], tolerance 0.02) regressed.
    assert classify(-0.06, -0.04, neutral=0.0, tolerance=0.02, better="higher") == "regression"
    assert classify(0.04, 0.06, neutral=0.0, tolerance=0.02, better="higher") == "improvement"
    assert classify(-0.01, 0.01, neutral=0.0, tolerance=0.02, better="higher") == "no change"


def test_zero_tolerance_makes_any_increase_of_a_count_a_regression() -> None:
    # Preemptions 0 → 3 with one run per side: the interval is the point 3.
    assert classify(3.0, 3.0, neutral=0.0, tolerance=0.0, better="lower") == "regression"
    assert classify(0.0, 0.0, neutral=0.0, tolerance=0.0, better="lower") == "no change"


def _lognormal(seed: int, n: int, scale: float, sigma: float = 0.2) -> np.ndarray:
    return scale * np.random.default_rng(seed).lognormal(0.0, sigma, n)


def _class(base: np.ndarray, cand: np.ndarray, stat: str, tolerance: float = 0.10) -> str:
    interval = bootstrap_ratio(list(base), list(cand), stat)  # type: ignore[arg-type]
    assert interval.low is not None and interval.high is not None
    return classify(interval.low, interval.high, neutral=1.0, tolerance=tolerance, better="lower")


def test_bootstrap_classifies_known_distributions() -> None:
    # Lognormal TTFTs (median 100 ms, σ = 0.2), 400 requests a side, independent draws.
    base = _lognormal(1, 400, 100.0)
    # Candidate 1.5× slower: the true ratio of every statistic is 1.5, far above 1.1.
    assert _class(base, _lognormal(2, 400, 150.0), "p95") == "regression"
    # Candidate 0.6×: far below 0.9.
    assert _class(base, _lognormal(3, 400, 60.0), "mean") == "improvement"
    # Same distribution: the ratio's interval (about ±3 % for the median at n = 400) lies
    # inside ±10 %.
    assert _class(base, _lognormal(4, 400, 100.0), "p50") == "no change"
    # True ratio exactly 1.1, the band's edge: the interval must straddle it.
    assert _class(base, _lognormal(5, 400, 110.0), "mean") == "inconclusive"


def test_bootstrap_is_seeded_and_covers_the_point_estimate() -> None:
    base, cand = list(_lognormal(1, 200, 100.0)), list(_lognormal(2, 200, 120.0))
    first = bootstrap_ratio(base, cand, "p50", seed=7)
    again = bootstrap_ratio(base, cand, "p50", seed=7)
    assert first == again
    assert first.low is not None and first.high is not None and first.point is not None
    assert first.low < first.point < first.high
    assert bootstrap_ratio(base, cand, "p50", seed=8) != first  # another seed, other draws


def test_per_token_values_are_resampled_by_request() -> None:
    # Baseline: 50 requests, each with 10 ITL values of 10 ms; candidate: 50 requests with 20 ms.
    # Every resample's mean is exactly 10 and 20, so the interval is the point 2.0.
    base = [np.full(10, 10.0)] * 50
    cand = [np.full(10, 20.0)] * 50
    interval = bootstrap_ratio(base, cand, "mean")
    assert (interval.point, interval.low, interval.high) == (2.0, 2.0, 2.0)
    # Requests of different lengths (the ragged path) give the same answer.
    ragged = [np.full(5 + i % 3, 20.0) for i in range(50)]
    assert bootstrap_ratio(base, ragged, "p95").point == 2.0


def test_bootstrap_rejects_too_few_resamples_and_a_zero_baseline_has_no_ratio() -> None:
    with pytest.raises(ValueError, match="at least 1000"):
        bootstrap_ratio([1.0] * 20, [1.0] * 20, "mean", resamples=500)
    interval = bootstrap_ratio([0.0] * 20, [1.0] * 20, "mean")
    assert interval.point is None and interval.low is None


def test_too_few_values_for_a_percentile_tail_or_a_mean() -> None:
    # p99 of 150 values leaves 1.5 beyond it; with min_tail 2 it needs 200.
    assert too_few([1.0] * 150, "p99", 10, 2) == "150 values leave 1.5 beyond the p99; it needs 200"
    assert too_few([1.0] * 200, "p99", 10, 2) is None
    # p95 of 48 values leaves 2.4 beyond it: enough for min_tail 2, not for 4 (needs 80).
    assert too_few([1.0] * 48, "p95", 10, 2) is None
    assert too_few([1.0] * 48, "p95", 10, 4) == "48 values leave 2.4 beyond the p95; it needs 80"
    assert too_few([1.0] * 6, "mean", 10, 2) == "6 values, fewer than the 10 needed"


def test_per_run_difference_uses_the_larger_run_to_run_range() -> None:
    # Hit rates: baseline runs 0.90, 0.95 (mean 0.925, range 0.05); candidate 0.80, 0.82
    # (mean 0.81, range 0.02). d = −0.115, interval −0.115 ± 0.05.
    spread = per_run_difference([0.90, 0.95], [0.80, 0.82])
    assert spread.spread == pytest.approx(0.05)
    assert spread.difference.point == pytest.approx(-0.115)
    assert spread.difference.low == pytest.approx(-0.165)
    assert spread.difference.high == pytest.approx(-0.065)


def test_one_run_per_side_has_no_spread_and_the_interval_is_the_point() -> None:
    spread = per_run_difference([4.0], [7.0])
    assert spread.spread is None
    assert (spread.difference.point, spread.difference.low, spread.difference.high) == (
        3.0,
        3.0,
        3.0,
    )


def test_the_spread_comes_from_the_side_that_has_repeats() -> None:
    # Baseline one run (4), candidate 7 and 9: d = 8 − 4 = 4, spread = 9 − 7 = 2.
    spread = per_run_difference([4.0], [7.0, 9.0])
    assert spread.spread == 2.0
    assert (spread.difference.low, spread.difference.high) == (2.0, 6.0)


def test_runs_that_disagree_widen_the_interval_instead_of_making_a_regression() -> None:
    # Two baseline runs at 100 ms; two candidate runs, one at 100 and one disturbed at 150 ms.
    # Pooled ratio 125/100 = 1.25. Drawing runs with replacement gives the candidate runs
    # {100, 100}, {100, 150} or {150, 150} (means 100, 125, 150) with probability 1/4, 1/2,
    # 1/4, so the 2.5 % and 97.5 % quantiles of the ratio are 1.0 and 1.5: inconclusive.
    base = [[100.0] * 50, [100.0] * 50]
    cand = [[100.0] * 50, [150.0] * 50]
    interval = bootstrap_ratio_runs(base, cand, "mean")
    assert interval.point == 1.25
    assert (interval.low, interval.high) == (1.0, 1.5)
    assert classify(1.0, 1.5, neutral=1.0, tolerance=0.15, better="lower") == "inconclusive"
    # The same requests taken as one run per side: a request bootstrap alone sees only the
    # within-run spread (sd of the candidate mean 25 / √100 = 2.5 ms) and calls it a regression.
    pooled = bootstrap_ratio([100.0] * 100, [100.0] * 50 + [150.0] * 50, "mean")
    assert pooled.low is not None and pooled.low > 1.15
