"""scenarios.arrivals: seeded open-loop offsets (mean gap 1/λ, burstiness), concurrency limits."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from pydantic import ValidationError

from scenarios.arrivals import (
    AllAtOnce,
    ClosedLoop,
    OpenLoop,
    concurrency_limit,
    open_loop_offsets_ns,
)


def gaps_s(arrival: OpenLoop, n: int) -> np.ndarray:
    return np.diff(np.asarray(open_loop_offsets_ns(arrival, n), dtype=float)) / 1e9


def test_first_offset_is_zero_and_offsets_never_decrease() -> None:
    offsets = open_loop_offsets_ns(OpenLoop(rate_rps=5.0, seed=7), 50)
    assert len(offsets) == 50
    assert offsets[0] == 0
    assert all(b >= a for a, b in itertools.pairwise(offsets))
    assert all(isinstance(x, int) for x in offsets)


def test_no_requests_means_no_offsets() -> None:
    assert open_loop_offsets_ns(OpenLoop(rate_rps=5.0), 0) == []
    assert open_loop_offsets_ns(OpenLoop(rate_rps=5.0), 1) == [0]


def test_offsets_are_a_pure_function_of_the_seed() -> None:
    a = open_loop_offsets_ns(OpenLoop(rate_rps=10.0, seed=42), 100)
    b = open_loop_offsets_ns(OpenLoop(rate_rps=10.0, seed=42), 100)
    c = open_loop_offsets_ns(OpenLoop(rate_rps=10.0, seed=43), 100)
    assert a == b
    assert a != c


@pytest.mark.parametrize("burstiness", [0.25, 1.0, 4.0])
def test_mean_gap_is_one_over_the_rate(burstiness: float) -> None:
    # 20,000 gaps at 50 req/s: mean gap 20 ms. The gap's std is 20 ms / sqrt(burstiness)
    # (≤ 40 ms), so the sample mean's std is ≤ 40 / sqrt(19,999) = 0.28 ms = 1.4 %; a 7 %
    # tolerance is 5 standard errors.
    gaps = gaps_s(OpenLoop(rate_rps=50.0, burstiness=burstiness, seed=0), 20_000)
    assert gaps.mean() == pytest.approx(0.020, rel=0.07)


@pytest.mark.parametrize(("burstiness", "cv"), [(0.25, 2.0), (1.0, 1.0), (4.0, 0.5)])
def test_burstiness_sets_the_dispersion_of_gaps(burstiness: float, cv: float) -> None:
    # Gamma(shape k) gaps have coefficient of variation 1/sqrt(k): 2 (bursty), 1 (Poisson),
    # 0.5 (smooth). The relative standard error of a sample std over 20,000 gamma draws is
    # ≤ sqrt((kurtosis − 1)/(4n)) = sqrt(26/80,000) = 1.8 % at k = 0.25; 10 % is > 5 of them.
    gaps = gaps_s(OpenLoop(rate_rps=50.0, burstiness=burstiness, seed=0), 20_000)
    assert gaps.std() / gaps.mean() == pytest.approx(cv, rel=0.10)


def test_concurrency_limits_per_arrival_kind() -> None:
    assert concurrency_limit(ClosedLoop(concurrency=4), 48) == 4
    assert concurrency_limit(AllAtOnce(), 16) == 16
    assert concurrency_limit(AllAtOnce(), 0) == 1
    assert concurrency_limit(OpenLoop(rate_rps=1.0), 16) is None
    assert concurrency_limit(OpenLoop(rate_rps=1.0, max_concurrency=3), 16) == 3


def test_open_loop_cap_must_be_positive() -> None:
    with pytest.raises(ValidationError):
        OpenLoop(rate_rps=1.0, max_concurrency=0)
