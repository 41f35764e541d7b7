"""The fleet capacity answer (analysis.fleet_capacity), derived by hand.

Requests here are test_fleet_model's: 9-token prompts of 2 full 4-token blocks (a repeat
that finds its group hits 8), 1 output token, 3 usable blocks per replica (one request's
worth). The order A, B, B, A:

- round-robin on 2 replicas: A→0, B→1, B→0, A→1: every request misses;
- prefix-hash (A's key on replica 0, B's on 1): the second A and the second B hit 8 each;
- one replica: A, B (evicts A), B hits 8, A misses.

A step costs 0.1 s + 0.01 s per prompt token computed and a request's one token comes from one
step: a miss keeps its replica 0.19 s (0.1 + 9 × 0.01), a hit 0.11 s (one token computed). One
sequence runs at a time, so no batching shortens a replica's steps: the least time its
requests take (``analysis.fleet_engine.least_busy_s``) is the sum of theirs. Four timed
arrivals over a span of 3 s stand for 4 s of traffic (``traffic_window_s``), so a replica with
T s of steps is full at 4 ÷ T.
"""

from __future__ import annotations

import math

import pandas as pd
import pytest

from analysis.fleet_capacity import (
    Arrivals,
    MeasuredCapacity,
    compare_measured,
    fleet_capacity,
    policy_point,
)
from analysis.fleet_engine_fit import StepCost, unqueued
from analysis.goodput import SLOLimits
from tests.scenarios.test_fleet_model import KEY_ON_0, KEY_ON_1, group

Row = tuple[str, str | None, int, int, int, int, float, float, int]


def frame(rows: list[Row]) -> pd.DataFrame:
    """(case, upstream, sent ms, end ms, prompt, cached, TTFT ms, E2EL ms, output tokens)."""
    return pd.DataFrame(
        [{"case": c, "upstream": u, "sent_ns": s * 10**6, "end_ns": e * 10**6, "status": "ok",
          "prompt_tokens_sent": p, "cached_tokens": h, "ttft_ms": t, "e2el_ms": e2,
          "output_tokens": o} for c, u, s, e, p, h, t, e2, o in rows]
    )  # fmt: skip


#: Replica A: r1 alone, r2 sent while r1 runs (queued: its TTFT of 5 s is mostly waiting),
#: r3 sent as r2 ends (an end at the send frees the replica); replica B: r4 alone, although
#: r2 is in flight on A. Uncached 100, 300, 500 at TTFT 150, 350, 550 ms: 0.05 s + 1 ms each.
IDLE_AND_QUEUED: list[Row] = [
    ("c", "A", 0, 1000, 100, 0, 150, 170, 3),
    ("c", "A", 500, 6000, 704, 0, 5000, 5100, 3),
    ("c", "A", 6000, 7000, 400, 100, 350, 390, 3),
    ("c", "B", 600, 700, 500, 0, 550, 550, 1),
]


def test_only_requests_that_found_their_replica_idle_are_unqueued() -> None:
    idle = unqueued(frame(IDLE_AND_QUEUED))
    assert list(idle["sent_ns"] // 10**6) == [0, 6000, 600]
    # Without a replica name (one server), every request of the case shares one replica:
    # B's r4 was sent while r2 ran.
    shared = frame([(c, None, *rest) for c, _, *rest in IDLE_AND_QUEUED])  # type: ignore[misc]
    assert list(unqueued(shared)["sent_ns"] // 10**6) == [0, 6000]
    # Another case's requests never queue a request.
    other = frame([("c", "A", 0, 1000, *IDLE_AND_QUEUED[0][4:]),
                   ("d", "A", 500, 600, *IDLE_AND_QUEUED[0][4:])])  # fmt: skip
    assert len(unqueued(other)) == 2


def abba() -> list:  # type: ignore[type-arg]
    return [group(n, KEY_ON_0 if n[0] == "A" else KEY_ON_1) for n in ("A-1", "B-1", "B-2", "A-2")]


COST = StepCost(overhead_s=0.0, step_s=0.1, prefill_s_per_token=0.01, decode_s_per_seq=0.0,
                max_seqs=1)  # fmt: skip
#: Arrivals 0, 1, 2, 3 s: span 3 s.
EVERY_SECOND = Arrivals(offsets_s=(0.0, 1.0, 2.0, 3.0), follows=(None,) * 4, delays_s=(0.0,) * 4)


def test_without_slos_a_replica_sustains_until_its_least_step_time_fills_the_traffic() -> None:
    answer = fleet_capacity(abba(), ["round-robin", "prefix-hash"], (3, 4), COST, EVERY_SECOND,
                            (SLOLimits(), 0.9), 12.0)  # fmt: skip
    rr, ph = answer.policies
    # N = 1: three misses and a hit, 0.68 s.
    assert rr.points[0].sustainable_speedup == pytest.approx(4 / 0.68, rel=2e-3)
    # prefix-hash is placed in the simulation, whose cache sees requests overlap: above
    # 1 ÷ 0.19 = 5.26× B-1 is sent while A-1 runs and, A's blocks being in use, takes blocks
    # lent beyond the pool rather than evicting them, so A-2 hits as well: 0.60 s.
    assert ph.points[0].sustainable_speedup == pytest.approx(4 / 0.60, rel=2e-3)
    assert ph.points[0].hit_rate == pytest.approx(16 / 36)
    # N = 2: round-robin 2 misses a replica (0.38 s); prefix-hash a miss and a hit (0.30 s).
    assert rr.points[1].sustainable_speedup == pytest.approx(4 / 0.38, rel=2e-3)
    assert ph.points[1].sustainable_speedup == pytest.approx(4 / 0.30, rel=2e-3)
    assert ph.points[1].hit_rate == pytest.approx(16 / 36)
    assert ph.points[1].utilisation == pytest.approx(1.0, rel=2e-3)
    # κ = 0: sharing cores changes nothing.
    assert ph.points[1].sustainable_speedup_shared == ph.points[1].sustainable_speedup
    # N = 3: round-robin A→0, B→1, B→2, A→0: the second A hits on replica 0 (0.30 s).
    assert rr.points[2].sustainable_speedup == pytest.approx(4 / 0.30, rel=2e-3)
    # 12× needs ≤ 0.333 s of steps per replica: round-robin 3 replicas, prefix-hash 2.
    assert (rr.replicas_needed, rr.replicas_needed_shared) == (3, 3)
    assert (ph.replicas_needed, ph.replicas_needed_shared) == (2, 2)
    assert "needs the fewest replicas under prefix-hash (2, each on cores of its own)" in (
        answer.text
    )
    assert "round-robin 3 (3)" in answer.text
    # 5.5× (≤ 0.727 s): one replica under both, so both are named.
    tied = fleet_capacity(abba(), ["round-robin", "prefix-hash"], (3, 4), COST, EVERY_SECOND,
                          (SLOLimits(), 0.9), 5.5)  # fmt: skip
    assert "under round-robin and prefix-hash (1, each on cores of its own)" in tied.text


def test_the_slo_can_bind_before_the_replica_is_full() -> None:
    # Arrivals 0, 0.2, 0.4 and 3 s, a TTFT limit of 0.25 s, every request good, one replica:
    # A-1's step (a miss) ends at 0.19, so B-1, sent at 0.2/X, has its step 0.19 → 0.38:
    # TTFT 0.38 − 0.2/X ≤ 0.25 needs 0.2/X ≥ 0.13, X ≤ 1.538. There B-2 (a hit), sent at 0.26,
    # has its step 0.38 → 0.49: TTFT 0.23; A-2 at 1.95 waits for nothing. The replica would
    # be full only at 4 ÷ 0.68 = 5.88×: its utilisation at 1.538× is 0.68 × 1.538 ÷ 4.
    bursty = Arrivals(offsets_s=(0.0, 0.2, 0.4, 3.0), follows=(None,) * 4, delays_s=(0.0,) * 4)
    answer = fleet_capacity(abba(), ["round-robin"], (3, 4), COST, bursty,
                            (SLOLimits(ttft_ms=250), 1.0), None)  # fmt: skip
    one = answer.policies[0].points[0]
    assert one.sustainable_speedup == pytest.approx(0.2 / 0.13, rel=1e-3)
    assert one.utilisation == pytest.approx(0.68 * 0.2 / 0.13 / 4, rel=1e-3)
    assert answer.text.startswith("no --target-speedup")


def test_the_prediction_is_within_when_it_meets_the_measured_bracket() -> None:
    answer = fleet_capacity(abba(), ["round-robin", "prefix-hash"], (3, 4), COST, EVERY_SECOND,
                            (SLOLimits(), 0.9), None)  # fmt: skip
    # prefix-hash on 2: predicted 4 ÷ 0.30 = 13.3; measured [8, 16): inside.
    meets = MeasuredCapacity(case="ph", policy="prefix-hash", replicas=2, lower_speedup=8.0,
                             upper_speedup=16.0, interpolated=14.0)  # fmt: skip
    # round-robin on 2: 4 ÷ 0.38 = 10.5; measured at least 20 (the highest speedup met it).
    above = MeasuredCapacity(case="rr", policy="round-robin", replicas=2, lower_speedup=20.0,
                             upper_speedup=None, interpolated=None)  # fmt: skip
    # One server (no policy): N = 1's 4 ÷ 0.68 = 5.88; measured below the lowest speedup, 2.
    below = MeasuredCapacity(case="one", policy=None, replicas=1, lower_speedup=None,
                             upper_speedup=2.0, interpolated=None)  # fmt: skip
    unknown = MeasuredCapacity(case="x", policy="least-loaded", replicas=2, lower_speedup=1.0,
                               upper_speedup=2.0, interpolated=1.5)  # fmt: skip
    checks = compare_measured(answer, [meets, above, below, unknown])
    assert [c.measured.case for c in checks] == ["ph", "rr", "one"]
    assert [c.within for c in checks] == [True, False, False]
    assert checks[0].ratio == pytest.approx(4 / 0.30 / 14, rel=2e-3)
    assert checks[1].ratio is None
    assert checks[1].predicted_own == pytest.approx(4 / 0.38, rel=2e-3)
    assert math.isclose(checks[2].predicted, 4 / 0.68, rel_tol=2e-3)


def test_a_case_with_its_own_fit_is_judged_on_its_own_point() -> None:
    answer = fleet_capacity(abba(), ["round-robin"], (3, 4), COST, EVERY_SECOND,
                            (SLOLimits(), 0.9), None)  # fmt: skip
    # The case's own records cost twice as much a step: its point on 2 replicas is 4 ÷ 0.76 = 5.26.
    slower = COST.model_copy(update={"step_s": 0.2, "prefill_s_per_token": 0.02})
    own = policy_point(abba(), "round-robin", 2, (3, 4), slower, EVERY_SECOND,
                     (SLOLimits(), 0.9))  # fmt: skip
    assert own.sustainable_speedup == pytest.approx(4 / 0.76, rel=2e-3)
    rr = MeasuredCapacity(case="rr", policy="round-robin", replicas=2, lower_speedup=5.0,
                          upper_speedup=6.0, interpolated=5.5)  # fmt: skip
    (check,) = compare_measured(answer, [rr], {"rr": own})
    assert check.own_fit and check.within
    assert check.predicted == pytest.approx(4 / 0.76, rel=2e-3)
    assert check.answer_predicted == pytest.approx(4 / 0.38, rel=2e-3)
