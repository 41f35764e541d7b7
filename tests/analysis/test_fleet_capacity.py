"""The fleet capacity answer (analysis.fleet_capacity), derived by hand.

The cost of a request on its replica is fitted on the run's requests: TTFT = a + t_p ×
uncached tokens, and t_d = the median TPOT. The busiest replica's busy time for one pass then
gives the sustainable speedup span ÷ busy, per N and policy, from the fleet model's placement
and hits. Requests here are test_fleet_model's: 9-token prompts of 2 full 4-token blocks (a
repeat that finds its group hits 8), 1 output token, 3 usable blocks per replica (one
request's worth). The order A, B, B, A:

- round-robin on 2 replicas: A→0, B→1, B→0, A→1: every request misses;
- prefix-hash (A's key on replica 0, B's on 1): the second A and the second B hit 8 each;
- one replica: A, B (evicts A), B hits 8, A misses.
"""

from __future__ import annotations

import pandas as pd
import pytest

from analysis.fleet_capacity import ServiceCost, fit_service_cost, fleet_capacity
from tests.scenarios.test_fleet_model import KEY_ON_0, KEY_ON_1, group


def frame(rows: list[tuple[int, int, float, float]]) -> pd.DataFrame:
    """(prompt tokens, cached tokens, TTFT ms, TPOT ms) of successful requests."""
    return pd.DataFrame(
        [{"status": "ok", "prompt_tokens_sent": p, "cached_tokens": c, "ttft_ms": t,
          "tpot_ms": d} for p, c, t, d in rows]
    )  # fmt: skip


def test_the_cost_is_fitted_on_uncached_tokens_and_the_median_tpot() -> None:
    # Uncached 100, 300, 500 at TTFT 150, 350, 550 ms: 0.05 s + 1 ms per token exactly.
    fitted = fit_service_cost(frame([(100, 0, 150, 20), (400, 100, 350, 40), (500, 0, 550, 30)]))
    assert fitted is not None
    assert fitted.overhead_s == pytest.approx(0.05)
    assert fitted.prefill_s_per_token == pytest.approx(0.001)
    assert fitted.decode_s_per_token == pytest.approx(0.030)
    assert fitted.of(prompt=704, hit=640, output=16) == pytest.approx(0.05 + 0.064 + 0.45)


def test_one_uncached_length_gives_a_cost_per_token_without_overhead() -> None:
    # Every request computed 704 tokens; TTFTs 704 and 1408 ms: median 1.5 ms per token.
    fitted = fit_service_cost(frame([(704, 0, 704, 10), (704, 0, 1408, 10)]))
    assert fitted is not None
    assert (fitted.overhead_s, fitted.prefill_s_per_token) == (0.0, pytest.approx(0.0015))
    assert fit_service_cost(frame([])) is None


def test_replicas_per_policy_for_a_target_speedup() -> None:
    requests = [group(n, KEY_ON_0 if n[0] == "A" else KEY_ON_1)
                for n in ("A-1", "B-1", "B-2", "A-2")]  # fmt: skip
    cost = ServiceCost(overhead_s=0.1, prefill_s_per_token=0.01, decode_s_per_token=0.5,
                       requests=4)  # fmt: skip
    # A miss costs 0.1 + 0.09 = 0.19 s, a hit 0.1 + 0.01 = 0.11 s (1 output token: no decode).
    answer = fleet_capacity(requests, ["round-robin", "prefix-hash"], 3, 4, cost, 1.0, 3.0)
    rr, ph = answer.policies
    # N = 1: three misses and a hit on one replica: 0.68 s; speedup 1 ÷ 0.68.
    assert rr.points[0].busiest_s == pytest.approx(0.68) == ph.points[0].busiest_s
    # N = 2: round-robin 2 misses per replica (0.38 s); prefix-hash a miss and a hit (0.30 s).
    assert rr.points[1].busiest_s == pytest.approx(0.38)
    assert ph.points[1].busiest_s == pytest.approx(0.30)
    assert ph.points[1].hit_rate == pytest.approx(16 / 36)
    assert ph.points[1].sustainable_speedup == pytest.approx(1 / 0.30)
    # N = 3: round-robin A→0, B→1, B→2, A→0: the second A hits on replica 0 (0.30 s).
    assert rr.points[2].busiest_s == pytest.approx(0.30)
    # 3× needs 1 ÷ busy ≥ 3, busy ≤ 0.333 s: round-robin 3 replicas, prefix-hash 2.
    assert (rr.replicas_needed, ph.replicas_needed) == (3, 2)
    assert "fewest replicas under prefix-hash (2)" in answer.text
    assert "round-robin 3" in answer.text
