"""The replicas' queue (analysis.fleet_queue), derived by hand with Lindley's recursion.

Three requests arrive at 0, 1 and 2 s (speedup 1), each 0.5 s to its first token and 1.5 s
of its replica's time. On one replica, sped up X times, each waits what the one before left:
W₀ = 0, W₁ = 1.5 − 1/X, W₂ = 2 × (1.5 − 1/X) (while 1.5 > 1/X); TTFT = W + 0.5.
"""

from __future__ import annotations

import math

import pytest

from analysis.fleet_queue import QueuedRequest, arrivals, predicted_attainment, sustainable_speedup
from analysis.goodput import SLOLimits


def three(replicas: tuple[int, int, int] = (0, 0, 0)) -> list[QueuedRequest]:
    return [
        QueuedRequest(replica=r, offset_s=float(i), follows=None, delay_s=0.0, prefill_s=0.5,
                      service_s=1.5, decode_s_per_token=0.1)
        for i, r in enumerate(replicas)
    ]  # fmt: skip


def test_waits_follow_lindleys_recursion() -> None:
    # Speedup 1: waits 0, 0.5, 1.0; TTFTs 0.5, 1.0, 1.5. A 1.2 s TTFT limit: 2 of 3 good.
    assert predicted_attainment(three(), 1.0, SLOLimits(ttft_ms=1200)) == pytest.approx(2 / 3)
    # E2EL = W + 1.5: 1.5, 2.0, 2.5; a 2 s limit keeps the first two.
    assert predicted_attainment(three(), 1.0, SLOLimits(e2el_ms=2000)) == pytest.approx(2 / 3)
    # TPOT is the request's own decode time (0.1 s): a 100 ms limit holds (≤), 99 ms does not.
    assert predicted_attainment(three(), 1.0, SLOLimits(tpot_ms=100)) == 1.0
    assert predicted_attainment(three(), 1.0, SLOLimits(tpot_ms=99)) == 0.0


def test_the_sustainable_speedup_is_where_the_last_request_reaches_the_limit() -> None:
    # Every request good needs W₂ + 0.5 ≤ 1.2: 2 × (1.5 − 1/X) ≤ 0.7, X ≤ 1 ÷ 1.15.
    found = sustainable_speedup(three(), SLOLimits(ttft_ms=1200), 1.0)
    assert found == pytest.approx(1 / 1.15, rel=1e-3)
    # Two of three good: W₁ + 0.5 ≤ 1.2, 1.5 − 1/X ≤ 0.7, X ≤ 1.25.
    assert sustainable_speedup(three(), SLOLimits(ttft_ms=1200), 0.6) == pytest.approx(
        1.25, rel=1e-3
    )


def test_a_second_replica_takes_the_middle_request() -> None:
    # Replica 0 serves the requests at 0 and 2/X s: W = 1.5 − 2/X; ≤ 0.7 for X ≤ 2.5.
    found = sustainable_speedup(three((0, 1, 0)), SLOLimits(ttft_ms=1200), 1.0)
    assert found == pytest.approx(2.5, rel=1e-3)


def test_a_request_that_misses_unqueued_sustains_nothing_and_no_queue_sustains_all() -> None:
    assert sustainable_speedup(three(), SLOLimits(ttft_ms=400), 1.0) == 0.0
    alone = [three()[0]]
    assert sustainable_speedup(alone, SLOLimits(ttft_ms=1200), 1.0) == math.inf


def test_a_session_turn_arrives_its_delay_after_the_turn_before_would_end() -> None:
    turn = QueuedRequest(replica=0, offset_s=None, follows=0, delay_s=2.0, prefill_s=0.5,
                         service_s=1.0, decode_s_per_token=None)  # fmt: skip
    # Request 0 arrives at 0 and takes 1.5 s; the turn 2 s later (÷ 2 when compressed).
    assert arrivals([three()[0], turn], 2.0, compress=True) == [0.0, 2.5]
    assert arrivals([three()[0], turn], 2.0, compress=False) == [0.0, 3.5]
    with pytest.raises(ValueError, match="must follow an earlier request"):
        arrivals([turn], 1.0, compress=True)
    with pytest.raises(ValueError, match="target"):
        sustainable_speedup(three(), SLOLimits(ttft_ms=1200), 0.0)
