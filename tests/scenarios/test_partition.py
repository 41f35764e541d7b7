"""scenarios.partition: how a phase's requests, concurrency and open-loop schedule are split
across workers. Every expected value is derived by hand in the comment beside it."""

from __future__ import annotations

import numpy as np
import pytest

from scenarios.arrivals import AllAtOnce, ClosedLoop, OpenLoop, open_loop_offsets_ns
from scenarios.partition import (
    merged_open_loop,
    partition_phase,
    split_concurrency,
    worker_arrivals_s,
    worker_seed_sequence,
)


def test_concurrency_is_split_so_the_total_in_flight_is_exactly_the_request() -> None:
    assert split_concurrency(5, 2) == [3, 2]  # 5 = 2 × 2 + 1: the first worker takes the 1
    assert split_concurrency(4, 2) == [2, 2]
    assert split_concurrency(1, 2) == [1, 0]
    assert split_concurrency(128, 3) == [43, 43, 42]  # 128 = 3 × 42 + 2
    for total in range(0, 40):
        for workers in range(1, 7):
            assert sum(split_concurrency(total, workers)) == total


def test_closed_loop_deals_each_workers_slots_requests() -> None:
    # C = 5 slots, request i on slot i mod 5, slot s on worker s mod 2: slots 0, 2, 4 → worker
    # 0 (3 in flight), slots 1, 3 → worker 1 (2 in flight). i = 0..9 → slots 0 1 2 3 4 0 1 2 3 4
    # → workers 0 1 0 1 0 0 1 0 1 0.
    shares = partition_phase(ClosedLoop(concurrency=5), 10, 2)
    assert shares[0].indices == (0, 2, 4, 5, 7, 9)
    assert shares[1].indices == (1, 3, 6, 8)
    assert [s.concurrency for s in shares] == [3, 2]
    assert all(s.offsets_ns is None for s in shares)


def test_prefix_eviction_phase_splits_evenly_and_alternates_anchors() -> None:
    # The main job: 48 requests at concurrency 4 over 2 workers: slots 0, 2 → worker 0 takes
    # the even requests, slots 1, 3 → worker 1 the odd ones, 24 each, 2 in flight each.
    shares = partition_phase(ClosedLoop(concurrency=4), 48, 2)
    assert shares[0].indices == tuple(range(0, 48, 2))
    assert shares[1].indices == tuple(range(1, 48, 2))
    assert [s.concurrency for s in shares] == [2, 2]


def test_all_at_once_gives_each_worker_all_of_its_requests_at_once() -> None:
    # 7 requests over 3 workers: i mod 3 → 3, 2, 2 requests, each all in flight.
    shares = partition_phase(AllAtOnce(), 7, 3)
    assert [s.indices for s in shares] == [(0, 3, 6), (1, 4), (2, 5)]
    assert [s.concurrency for s in shares] == [3, 2, 2]


def test_more_workers_than_slots_leaves_the_extra_ones_idle() -> None:
    shares = partition_phase(ClosedLoop(concurrency=2), 6, 3)
    assert [s.indices for s in shares] == [(0, 2, 4), (1, 3, 5), ()]
    assert [s.concurrency for s in shares] == [1, 1, 0]


def test_one_worker_sends_the_single_process_schedule_unchanged() -> None:
    arrival = OpenLoop(rate_rps=50.0, seed=3)
    (share,) = partition_phase(arrival, 100, 1)
    assert share.indices == tuple(range(100))
    assert share.offsets_ns == tuple(open_loop_offsets_ns(arrival, 100))
    (closed,) = partition_phase(ClosedLoop(concurrency=4), 10, 1)
    assert closed.indices == tuple(range(10)) and closed.concurrency == 4


def test_worker_seeds_are_distinct_and_deterministic() -> None:
    seeds = [worker_seed_sequence(7, k).generate_state(2).tolist() for k in range(4)]
    assert len({tuple(s) for s in seeds}) == 4  # one stream per worker
    assert seeds == [worker_seed_sequence(7, k).generate_state(2).tolist() for k in range(4)]
    arrival = OpenLoop(rate_rps=10.0, seed=7)
    a = worker_arrivals_s(arrival, 0, 2, 50)
    b = worker_arrivals_s(arrival, 1, 2, 50)
    assert not np.array_equal(a, b)
    assert np.array_equal(a, worker_arrivals_s(arrival, 0, 2, 50))
    # Another run seed gives other streams.
    assert not np.array_equal(a, worker_arrivals_s(OpenLoop(rate_rps=10.0, seed=8), 0, 2, 50))


def test_open_loop_split_covers_every_request_once_in_time_order() -> None:
    arrival = OpenLoop(rate_rps=200.0, seed=1)
    shares = partition_phase(arrival, 1000, 2)
    indices = sorted(i for s in shares for i in s.indices)
    assert indices == list(range(1000))
    offsets, _ = merged_open_loop(arrival, 1000, 2)
    for share in shares:
        assert share.offsets_ns is not None
        # Request i is the i-th merged arrival: its offset is offsets[i].
        assert list(share.offsets_ns) == [int(offsets[i]) for i in share.indices]
        assert list(share.offsets_ns) == sorted(share.offsets_ns)
    assert offsets[0] == 0 and all(np.diff(offsets) >= 0)
    assert partition_phase(arrival, 1000, 2) == shares  # deterministic


def test_merged_open_loop_schedule_has_the_requested_rate_and_independent_gaps() -> None:
    # Two Poisson streams at r/2 = 50/s superpose to one at r = 100/s: the n − 1 merged gaps
    # are independent exponentials of mean 1/r = 10 ms. Their sum (the last offset) has mean
    # (n − 1)/r = 199.99 s for n = 20,000 and standard deviation √(n − 1)/r = 1.41 s: within
    # 4σ = 5.7 s (2.8 %).
    n, rate = 20_000, 100.0
    offsets, source = merged_open_loop(OpenLoop(rate_rps=rate, seed=0), n, 2)
    gaps_s = np.diff(offsets) / 1e9
    assert offsets[-1] / 1e9 == pytest.approx((n - 1) / rate, abs=4 * np.sqrt(n - 1) / rate)
    # Each worker holds about half: Binomial(n, 1/2), σ = √n / 2 ≈ 71: within 4σ of 10,000.
    assert abs(int((source == 0).sum()) - n // 2) < 4 * np.sqrt(n) / 2
    # Independent exponential gaps: P(gap < 0.01/r) = 1 − e^(−0.01) ≈ 1.0 %, so ≈ 200 of the
    # 19,999 (binomial σ ≈ 14; accept 100–300). Streams seeded alike would put every second
    # arrival on top of the one before (a gap of 0): about 10,000 such gaps.
    short = int((gaps_s < 0.01 / rate).sum())
    assert 100 < short < 300
    # Exponential gaps have a coefficient of variation of 1 (σ of the estimate ≈ 1 %).
    assert gaps_s.std() / gaps_s.mean() == pytest.approx(1.0, abs=0.05)


def test_open_loop_cap_is_split_like_concurrency() -> None:
    # A cap of 3 over 2 workers: 2 + 1; both draw a stream.
    shares = partition_phase(OpenLoop(rate_rps=20.0, max_concurrency=3), 40, 2)
    assert [s.concurrency for s in shares] == [2, 1]
    assert all(s.indices for s in shares)
    # A cap of 1 over 2 workers: only worker 0 may send (1 + 0), so it draws the only stream.
    only = partition_phase(OpenLoop(rate_rps=20.0, max_concurrency=1), 40, 2)
    assert [len(s.indices) for s in only] == [40, 0]
    assert [s.concurrency for s in only] == [1, 0]


def test_zero_workers_is_an_error() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        partition_phase(ClosedLoop(concurrency=1), 3, 0)


def test_a_constant_schedule_is_dealt_round_robin_with_its_exact_gaps() -> None:
    # 10 req/s, constant: arrivals at 0, 100, 200, 300 ms. Two workers: worker 0 sends
    # arrivals 0 and 2 (0 and 200 ms), worker 1 arrivals 1 and 3 (100 and 300 ms).
    arrival = OpenLoop(rate_rps=10.0, pattern="constant")
    shares = partition_phase(arrival, 4, 2)
    ms = 1_000_000
    assert (shares[0].indices, shares[0].offsets_ns) == ((0, 2), (0, 200 * ms))
    assert (shares[1].indices, shares[1].offsets_ns) == ((1, 3), (100 * ms, 300 * ms))
