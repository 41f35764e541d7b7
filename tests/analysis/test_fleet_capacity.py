"""The fleet capacity answer (analysis.fleet_capacity), derived by hand.

The cost of a request on its replica is fitted on the run's requests that found their replica
idle: TTFT = a + t_p × uncached tokens, and t_d = Σ decode time ÷ Σ output tokens after the
first. Requests here are test_fleet_model's: 9-token prompts of 2 full 4-token blocks (a
repeat that finds its group hits 8), 1 output token, 3 usable blocks per replica (one
request's worth). The order A, B, B, A:

- round-robin on 2 replicas: A→0, B→1, B→0, A→1: every request misses;
- prefix-hash (A's key on replica 0, B's on 1): the second A and the second B hit 8 each;
- one replica: A, B (evicts A), B hits 8, A misses.

With a = 0.1 s, t_p = 0.01 s and one output token a miss keeps its replica busy 0.19 s serial
(0.1 + 9 × 0.01) and 0.09 s batched (9 × 0.01), a hit 0.11 s and 0.01 s.
"""

from __future__ import annotations

import math

import pandas as pd
import pytest

from analysis.fleet_capacity import (
    Arrivals,
    MeasuredCapacity,
    ServiceCost,
    compare_measured,
    fit_service_cost,
    fleet_capacity,
    unqueued,
)
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


def test_the_cost_is_fitted_on_unqueued_requests_only() -> None:
    fitted = fit_service_cost(frame(IDLE_AND_QUEUED))
    assert fitted is not None and fitted.requests == 3
    assert fitted.overhead_s == pytest.approx(0.05)
    assert fitted.prefill_s_per_token == pytest.approx(0.001)
    # Decode: (170 − 150) + (390 − 350) ms over 2 + 2 tokens after the first (r4 has one).
    assert fitted.decode_s_per_token == pytest.approx(0.015)
    assert fitted.of(prompt=704, hit=640, output=16) == pytest.approx(0.05 + 0.064 + 0.225)
    assert fitted.of(prompt=704, hit=640, output=16, batched=True) == pytest.approx(0.079)


def test_one_uncached_length_gives_a_cost_per_token_without_overhead() -> None:
    # Both computed 704 tokens, 704 and 1408 ms: Σ TTFT ÷ Σ uncached = 1.5 ms per token.
    fitted = fit_service_cost(frame([("c", "A", 0, 2000, 704, 0, 704, 704, 1),
                                     ("c", "A", 3000, 5000, 704, 0, 1408, 1408, 1)]))  # fmt: skip
    assert fitted is not None
    assert (fitted.overhead_s, fitted.prefill_s_per_token) == (0.0, pytest.approx(0.0015))
    assert fitted.decode_s_per_token == 0.0
    assert fit_service_cost(frame([])) is None


def abba() -> list:  # type: ignore[type-arg]
    return [group(n, KEY_ON_0 if n[0] == "A" else KEY_ON_1) for n in ("A-1", "B-1", "B-2", "A-2")]


COST = ServiceCost(overhead_s=0.1, prefill_s_per_token=0.01, decode_s_per_token=0.5, requests=4)
#: Arrivals 0, 1, 2, 3 s: span 3 s.
EVERY_SECOND = Arrivals(offsets_s=(0.0, 1.0, 2.0, 3.0), follows=(None,) * 4, delays_s=(0.0,) * 4)


def test_without_slos_a_replica_sustains_until_it_is_never_idle() -> None:
    answer = fleet_capacity(abba(), ["round-robin", "prefix-hash"], (3, 4), COST, EVERY_SECOND,
                            (SLOLimits(), 0.9), 9.0)  # fmt: skip
    rr, ph = answer.policies
    # N = 1: three misses and a hit on one replica: 0.68 s serial, 0.28 s batched.
    assert rr.points[0].busiest_s == pytest.approx(0.68) == ph.points[0].busiest_s
    assert rr.points[0].sustainable_speedup == pytest.approx(3 / 0.68)
    assert rr.points[0].sustainable_speedup_batched == pytest.approx(3 / 0.28)
    # N = 2: round-robin 2 misses a replica (0.38 s, 0.18 s); prefix-hash a miss and a hit
    # (0.30 s, 0.10 s).
    assert rr.points[1].sustainable_speedup == pytest.approx(3 / 0.38)
    assert ph.points[1].sustainable_speedup == pytest.approx(3 / 0.30)
    assert ph.points[1].sustainable_speedup_batched == pytest.approx(3 / 0.10)
    assert ph.points[1].hit_rate == pytest.approx(16 / 36)
    assert ph.points[1].utilisation == pytest.approx(1.0)
    # N = 3: round-robin A→0, B→1, B→2, A→0: the second A hits on replica 0 (0.30 s).
    assert rr.points[2].sustainable_speedup == pytest.approx(3 / 0.30)
    # 9× needs busy ≤ 0.333 s: round-robin 3 replicas serial, 1 batched (0.28 s); prefix-hash
    # 2 and 1.
    assert (rr.replicas_needed, rr.replicas_needed_batched) == (3, 1)
    assert (ph.replicas_needed, ph.replicas_needed_batched) == (2, 1)
    assert "needs the fewest replicas under prefix-hash (2 served one at a time, 1 batched)" in (
        answer.text
    )
    assert "round-robin 3 (1)" in answer.text
    # 4.4× (busy ≤ 0.68 s): one replica either way under both, so both are named.
    tied = fleet_capacity(abba(), ["round-robin", "prefix-hash"], (3, 4), COST, EVERY_SECOND,
                          (SLOLimits(), 0.9), 4.4)  # fmt: skip
    assert "under round-robin and prefix-hash (1 served one at a time, 1 batched)" in tied.text


def test_the_slo_can_bind_before_the_replica_is_full() -> None:
    # Arrivals 0, 0.2, 0.4 and 3 s, a TTFT limit of 0.25 s, every request good, one replica
    # (serial): A-1 (a miss, TTFT 0.19 s) leaves B-1 a wait of 0.19 − 0.2/X, whose TTFT
    # 0.19 + that ≤ 0.25 needs 0.2/X ≥ 0.13, X ≤ 1.538. There B-2 (a hit: TTFT 0.11 s) waits
    # 0.06 + 0.19 − 0.13 = 0.12 (≤ 0.14) and A-2, 2.6/X later, not at all. The replica would
    # be full only at 3 ÷ 0.68 = 4.41×: its utilisation at 1.538× is 0.68 × 1.538 ÷ 3.
    bursty = Arrivals(offsets_s=(0.0, 0.2, 0.4, 3.0), follows=(None,) * 4, delays_s=(0.0,) * 4)
    answer = fleet_capacity(abba(), ["round-robin"], (3, 4), COST, bursty,
                            (SLOLimits(ttft_ms=250), 1.0), None)  # fmt: skip
    one = answer.policies[0].points[0]
    assert one.sustainable_speedup == pytest.approx(0.2 / 0.13, rel=1e-3)
    assert one.utilisation == pytest.approx(0.68 * 0.2 / 0.13 / 3, rel=1e-3)
    assert answer.text.startswith("no --target-speedup")


def test_the_prediction_is_within_when_it_meets_the_measured_bracket() -> None:
    answer = fleet_capacity(abba(), ["round-robin", "prefix-hash"], (3, 4), COST, EVERY_SECOND,
                            (SLOLimits(), 0.9), None)  # fmt: skip
    # prefix-hash on 2: predicted [10, 30]; measured [12, 16): they meet.
    meets = MeasuredCapacity(case="ph", policy="prefix-hash", replicas=2, lower_speedup=12.0,
                             upper_speedup=16.0, interpolated=14.0)  # fmt: skip
    # round-robin on 2: [7.89, 16.67]; measured at least 20 (the highest speedup met it).
    above = MeasuredCapacity(case="rr", policy="round-robin", replicas=2, lower_speedup=20.0,
                             upper_speedup=None, interpolated=None)  # fmt: skip
    # One server (no policy): N = 1's [4.41, 10.71]; measured below the lowest speedup, 2.
    below = MeasuredCapacity(case="one", policy=None, replicas=1, lower_speedup=None,
                             upper_speedup=2.0, interpolated=None)  # fmt: skip
    unknown = MeasuredCapacity(case="x", policy="least-loaded", replicas=2, lower_speedup=1.0,
                               upper_speedup=2.0, interpolated=1.5)  # fmt: skip
    checks = compare_measured(answer, [meets, above, below, unknown])
    assert [c.measured.case for c in checks] == ["ph", "rr", "one"]
    assert [c.within for c in checks] == [True, False, False]
    assert checks[0].ratio == pytest.approx(10 / 14)
    assert checks[1].ratio is None and checks[1].predicted_batched == pytest.approx(3 / 0.18)
    assert math.isclose(checks[2].predicted, 3 / 0.68)
