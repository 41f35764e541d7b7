"""metrics.histograms: bucket deltas over a window, Prometheus quantile interpolation, means."""

from __future__ import annotations

import math

import pytest

from metrics.histograms import (
    HistogramDelta,
    MalformedHistogramError,
    histogram_delta,
    histogram_problem,
    histogram_quantile,
    mean_s,
    quantile_bucket,
    quantile_in_overflow,
)
from metrics.names import MissingFamilyError
from metrics.samples import Sample

S = 1_000_000_000


def scrape(
    t: int, buckets: dict[str, float], total: float, count: float, engine: str = "0"
) -> list[Sample]:
    """One scrape of ``ttft_seconds`` as the parser writes it (labels sorted, le as text)."""
    labels = (("engine", engine), ("model_name", "m"))
    out = [
        Sample(t, "ttft_seconds_bucket", tuple(sorted((*labels, ("le", le)))), v)
        for le, v in buckets.items()
    ]
    out.append(Sample(t, "ttft_seconds_sum", labels, total))
    out.append(Sample(t, "ttft_seconds_count", labels, count))
    return out


# The issue's example: cumulative buckets le=0.05/0.5/+Inf go from 1/4/6 (sum 1.0 s) to
# 4/10/14 (sum 3.0 s).
EXAMPLE = [
    *scrape(1 * S, {"0.05": 1, "0.5": 4, "+Inf": 6}, 1.0, 6),
    *scrape(2 * S, {"0.05": 4, "0.5": 10, "+Inf": 14}, 3.0, 14),
]


def test_the_issue_example_bucket_deltas_mean_and_quantiles() -> None:
    delta = histogram_delta(EXAMPLE, "ttft_seconds", 1 * S, 2 * S)
    # Deltas per cumulative bucket: 4−1 = 3, 10−4 = 6, 14−6 = 8; sum 3.0 − 1.0 = 2.0 s.
    assert delta == HistogramDelta((0.05, 0.5, math.inf), (3.0, 6.0, 8.0), 2.0, 8.0)
    assert delta.count == 8.0  # 8 requests
    assert mean_s(delta) == 0.25  # 2.0 s / 8
    # p50: rank 0.5 × 8 = 4 lies in (0.05, 0.5], which holds observations 4–6 (3 of them);
    # 4 − 3 = 1 of 3 into the bucket: 0.05 + (0.5 − 0.05) × 1/3 = 0.2 s.
    assert histogram_quantile(0.5, delta) == 0.2
    # p99: rank 7.92 > 6 (the last finite bucket's count): in +Inf, so the largest finite
    # bound, 0.5 s, flagged as a floor.
    assert histogram_quantile(0.99, delta) == 0.5
    assert quantile_in_overflow(0.99, delta)
    assert not quantile_in_overflow(0.5, delta)


def test_first_bucket_interpolates_from_zero() -> None:
    delta = HistogramDelta((0.05, 0.5, math.inf), (3.0, 6.0, 8.0), 2.0, 8.0)
    # rank 0.25 × 8 = 2 of the 3 in (0, 0.05]: 0.05 × 2/3.
    assert histogram_quantile(0.25, delta) == pytest.approx(0.05 * 2 / 3, abs=1e-15)
    # rank 6 exactly reaches the (0.05, 0.5] bucket's cumulative count: its upper bound.
    assert histogram_quantile(0.75, delta) == pytest.approx(0.5, abs=1e-15)


def test_a_quantile_s_bucket_is_the_one_its_rank_falls_in() -> None:
    delta = histogram_delta(EXAMPLE, "ttft_seconds", 1 * S, 2 * S)
    # Window counts 3/6/8 (cumulative): rank 0.25 × 8 = 2 ≤ 3 is in the first bucket, which
    # starts at 0; rank 4 in (0.05, 0.5]; rank 7.92 > 6 beyond 0.5 s, the +Inf bucket.
    assert quantile_bucket(0.25, delta) == (0.0, 0.05)
    assert quantile_bucket(0.5, delta) == (0.05, 0.5)
    assert quantile_bucket(0.99, delta) == (0.5, math.inf)
    # Rank 6 exactly reaches (0.05, 0.5]'s cumulative count: that bucket, not the next.
    assert quantile_bucket(0.75, delta) == (0.05, 0.5)


def test_no_observations_no_quantile_no_mean() -> None:
    quiet = [
        *scrape(1 * S, {"0.05": 1, "+Inf": 2}, 1.0, 2),
        *scrape(2 * S, {"0.05": 1, "+Inf": 2}, 1.0, 2),
    ]
    delta = histogram_delta(quiet, "ttft_seconds", 1 * S, 2 * S)
    assert delta is not None and delta.count == 0.0
    assert histogram_quantile(0.5, delta) is None
    assert mean_s(delta) is None
    with pytest.raises(ValueError, match="quantile must be in"):
        histogram_quantile(1.5, delta)


def test_engines_are_summed_per_bucket() -> None:
    samples = [
        *scrape(1 * S, {"0.05": 1, "0.5": 4, "+Inf": 6}, 1.0, 6, engine="0"),
        *scrape(1 * S, {"0.05": 0, "0.5": 0, "+Inf": 0}, 0.0, 0, engine="1"),
        *scrape(2 * S, {"0.05": 4, "0.5": 10, "+Inf": 14}, 3.0, 14, engine="0"),
        *scrape(2 * S, {"0.05": 2, "0.5": 2, "+Inf": 2}, 0.06, 2, engine="1"),
    ]
    delta = histogram_delta(samples, "ttft_seconds", 1 * S, 2 * S)
    # Engine 0 as in the example (3/6/8), engine 1 adds 2 observations ≤ 0.05 s (sum 0.06 s).
    assert delta == HistogramDelta((0.05, 0.5, math.inf), (5.0, 8.0, 10.0), 2.06, 10.0)
    only_one = histogram_delta(samples, "ttft_seconds", 1 * S, 2 * S, engine="1")
    assert only_one == HistogramDelta((0.05, 0.5, math.inf), (2.0, 2.0, 2.0), 0.06, 2.0)


def test_a_server_restart_inside_the_window_keeps_both_sides() -> None:
    samples = [
        *EXAMPLE,
        # Restart: counts start again from zero; 2 new observations ≤ 0.05 s, sum 0.04 s.
        *scrape(3 * S, {"0.05": 2, "0.5": 2, "+Inf": 2}, 0.04, 2),
    ]
    delta = histogram_delta(samples, "ttft_seconds", 1 * S, 3 * S)
    # Before the restart as in the example (3/6/8, 2.0 s), after it +2/+2/+2 and +0.04 s.
    assert delta is not None
    assert delta.cumulative == (5.0, 8.0, 10.0)
    assert delta.sum == pytest.approx(2.04)


def test_window_before_any_scrape_is_unknown() -> None:
    assert histogram_delta(EXAMPLE, "ttft_seconds", 0, S - 1) is None


def test_missing_family_raises() -> None:
    with pytest.raises(MissingFamilyError, match="vllm:inter_token_latency_seconds"):
        histogram_delta(EXAMPLE, "itl_seconds", 1 * S, 2 * S)


def test_non_monotonic_buckets_are_made_monotonic_as_prometheus_does() -> None:
    # A +Inf bucket below the one before it (scraped a moment apart): read as 6, not 5.
    delta = HistogramDelta((0.1, 1.0, math.inf), (2.0, 6.0, 5.0), 3.0, 6.0)
    # rank 0.5 × 6 = 3: 1 of 4 into (0.1, 1.0]: 0.1 + 0.9 × 1/4 = 0.325.
    assert histogram_quantile(0.5, delta) == pytest.approx(0.325)


def _without(samples: list[Sample], name: str, le: str | None = None) -> list[Sample]:
    return [s for s in samples if not (s.name == name and (le is None or ("le", le) in s.labels))]


def test_a_well_formed_histogram_has_no_problem() -> None:
    assert histogram_problem(EXAMPLE, "ttft_seconds") is None
    assert histogram_problem(EXAMPLE, "itl_seconds") is None  # absent: not this check's concern


def test_a_histogram_without_inf_bucket_is_refused_with_the_reason() -> None:
    # The m_noinf page: le=0.05 and 0.5 only; the observation count in the window is unknown.
    no_inf = _without(EXAMPLE, "ttft_seconds_bucket", "+Inf")
    assert histogram_problem(no_inf, "ttft_seconds") == (
        'no +Inf bucket (le="+Inf"), so its observation count is unknown'
    )
    with pytest.raises(MalformedHistogramError, match=r"ttft_seconds: no \+Inf bucket"):
        histogram_delta(no_inf, "ttft_seconds", 1 * S, 2 * S)


def test_every_broken_histogram_rule_is_named() -> None:
    # Not cumulative at one scrape: le=0.5 holds 3 < le=0.05's 4.
    falling = [*scrape(1 * S, {"0.05": 4, "0.5": 3, "+Inf": 6}, 1.0, 6)]
    assert histogram_problem(falling, "ttft_seconds") == (
        "buckets are not cumulative: le=0.5 holds 3, less than le=0.05 (4) at one scrape"
    )
    assert histogram_problem(_without(EXAMPLE, "ttft_seconds_count"), "ttft_seconds") == (
        "no _count beside its buckets"
    )
    no_sum_count = _without(_without(EXAMPLE, "ttft_seconds_count"), "ttft_seconds_sum")
    no_both = histogram_problem(no_sum_count, "ttft_seconds")
    assert no_both == "no _sum and _count beside its buckets"
    bad_le = [*scrape(1 * S, {"fast": 1, "+Inf": 6}, 1.0, 6)]
    assert histogram_problem(bad_le, "ttft_seconds") == (
        "a bucket bound is unparsable (could not convert string to float: 'fast')"
    )
    with pytest.raises(MalformedHistogramError, match="unparsable"):
        histogram_delta(bad_le, "ttft_seconds", 0, 2 * S)
    nan_le = [*scrape(1 * S, {"NaN": 1, "+Inf": 6}, 1.0, 6)]
    assert histogram_problem(nan_le, "ttft_seconds") == (
        "a bucket bound is unparsable (le='NaN' is not a number)"
    )
    # A bucket appears at the second scrape: 0.05/+Inf, then 0.05/0.5/+Inf.
    changed = [
        *scrape(1 * S, {"0.05": 1, "+Inf": 6}, 1.0, 6),
        *scrape(2 * S, {"0.05": 4, "0.5": 10, "+Inf": 14}, 3.0, 14),
    ]
    assert histogram_problem(changed, "ttft_seconds") == (
        "its bucket bounds changed between scrapes (['0.05', '+Inf'] → ['0.05', '0.5', '+Inf'])"
    )
    # Two engines with different bounds: summing them bucket by bucket would be meaningless.
    two = [*scrape(1 * S, {"0.05": 1, "+Inf": 2}, 1.0, 2, engine="0"),
           *scrape(1 * S, {"0.5": 1, "+Inf": 2}, 1.0, 2, engine="1")]  # fmt: skip
    assert histogram_problem(two, "ttft_seconds") == (
        "its series have different bucket bounds ({'engine': '0', 'model_name': 'm'}: "
        "['0.05', '+Inf']; {'engine': '1', 'model_name': 'm'}: ['0.5', '+Inf']), so they "
        "cannot be summed"
    )
    only_count = [s for s in EXAMPLE if s.name == "ttft_seconds_count"]
    assert histogram_problem(only_count, "ttft_seconds") == "_sum/_count without any _bucket sample"
