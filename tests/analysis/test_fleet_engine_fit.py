"""The step model's fit (analysis.fleet_engine_fit) on synthetic records whose timestamps were
made from known constants: c0 = 20 ms a step, c_p = 1 ms per prompt token, c_d = 5 ms per
decode sequence, a = 30 ms outside the engine, κ = 0.5 between replicas sharing cores. The
fit must give them back.

Case "one" (replica A only):
- R1 sent at 0 s alone, 100 uncached tokens: TTFT a + c0 + 100 c_p = 0.15 s; then two decode
  steps of one sequence, c0 + c_d = 25 ms each.
- R2 sent at 1 s alone, 400-token prompt with 100 cached: TTFT 0.03 + 0.02 + 0.3 = 0.35 s;
  one decode step of 25 ms.
- R3 and R4 sent together at 2 s (neither found the replica idle, so neither enters the
  TTFT fit): first tokens together at 2.15, then two steps of both decoding,
  c0 + 2 c_d = 30 ms each.
Case "shared" (replicas A and B): R5 on A and R6 on B sent together at 5 s, 100 uncached
tokens each, each other's replica busy throughout (φ = 1): TTFT a + 0.12 × (1 + κ_p) = 0.21
s with κ_p = 0.5; then one decode step each, both decoding: 25 ms × (1 + κ_d) = 30 ms with
κ_d = 0.2. Those gaps had the other replica busy, so they give κ_d, not c0 or c_d.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
import pytest

from analysis.fleet_engine_fit import (
    busy_others,
    fit_prefill,
    fit_step_cost,
    flights_of,
    token_gaps,
)


@dataclass
class Rec:
    chunk_ns: list[int]
    chunk_tokens: list[int]


def row(case: str, upstream: str, sent: float, stamps: list[float], prompt: int,
        cached: int) -> dict[str, object]:  # fmt: skip
    """One ``request_frame`` row; times in s."""
    ns = [round(t * 1e9) for t in stamps]
    return {"case": case, "upstream": upstream, "status": "ok", "sent_ns": round(sent * 1e9),
            "end_ns": ns[-1], "record": Rec(ns, [1] * len(ns)), "prompt_tokens_sent": prompt,
            "cached_tokens": cached, "ttft_ms": (stamps[0] - sent) * 1e3}  # fmt: skip


ONE = [
    row("one", "A", 0.0, [0.15, 0.175, 0.2], 100, 0),
    row("one", "A", 1.0, [1.35, 1.375], 400, 100),
    row("one", "A", 2.0, [2.15, 2.18, 2.21], 100, 0),
    row("one", "A", 2.0, [2.15, 2.18, 2.21], 100, 0),
]
SHARED = [
    row("shared", "A", 5.0, [5.21, 5.24], 100, 0),
    row("shared", "B", 5.0, [5.21, 5.24], 100, 0),
]


def test_the_fit_gives_back_the_constants_the_records_were_made_from() -> None:
    cost = fit_step_cost(pd.DataFrame(ONE + SHARED), budget_tokens=512, max_seqs=8)
    assert cost is not None
    assert cost.step_s == pytest.approx(0.020)
    assert cost.decode_s_per_seq == pytest.approx(0.005)
    assert cost.prefill_s_per_token == pytest.approx(0.001)
    assert cost.overhead_s == pytest.approx(0.030)
    assert cost.contention == pytest.approx(0.5)
    assert cost.contention_decode == pytest.approx(0.2)
    # Gaps with no other replica busy: R1's 2, R2's 1, R3's and R4's 2 each; idle requests
    # R1, R2, R5, R6.
    assert (cost.gaps, cost.requests) == (7, 4)
    assert (cost.budget_tokens, cost.max_seqs) == (512, 8)


def test_gaps_while_another_prompt_is_computed_or_another_replica_is_busy_are_left_out() -> None:
    gaps = token_gaps(pd.DataFrame(ONE + SHARED))
    assert sorted(gaps["sequences"]) == [1, 1, 1, 1, 1, 2, 2, 2, 2]
    assert sorted(gaps["others"])[-2:] == [1.0, 1.0]  # R5's and R6's, the other one busy
    # R7 sent at 1.36 during R2's last gap (1.35 → 1.375) and computing its prompt then.
    late = row("one", "A", 1.36, [1.5], 100, 0)
    assert len(token_gaps(pd.DataFrame([*ONE, late]))) == 6  # of 7


def test_one_decode_width_and_one_prompt_length_fall_back_to_sums() -> None:
    # R1 alone (TTFT 0.15 s, 100 tokens, gaps of 25 ms): c_d = 0, c0 = 25 ms; no second
    # length, so a = 0 and c_p = (0.15 − 0.025) ÷ 100.
    cost = fit_step_cost(pd.DataFrame(ONE[:1]))
    assert cost is not None
    assert (cost.step_s, cost.decode_s_per_seq) == (pytest.approx(0.025), 0.0)
    assert (cost.overhead_s, cost.prefill_s_per_token) == (0.0, pytest.approx(0.00125))
    assert (cost.contention, cost.contention_decode) == (0.0, 0.0)
    assert fit_step_cost(pd.DataFrame([row("one", "A", 0.0, [0.1], 100, 0)])) is None
    assert fit_step_cost(pd.DataFrame()) is None


def test_busy_others_is_the_time_average_of_other_replicas_in_flight() -> None:
    # B is in flight over [5, 5.24] s; a third request on B, [5.1, 5.3], extends its union.
    later = row("shared", "B", 5.1, [5.3], 100, 0)
    frame = pd.DataFrame([*SHARED, later]).assign(_replica=["shared|A", "shared|B", "shared|B"])
    flights = flights_of(frame)
    assert busy_others(flights, "shared|A", 5.0e9, 5.24e9) == pytest.approx(1.0)
    assert busy_others(flights, "shared|A", 5.2e9, 5.4e9) == pytest.approx(0.5)
    assert busy_others(flights, "shared|B", 5.0e9, 5.48e9) == pytest.approx(0.5)
    assert busy_others(flights, "other|A", 5.0e9, 5.24e9) == 0.0


def test_prompt_cost_is_fitted_within_each_case_when_cases_differ_outside_the_engine() -> None:
    # c0 = 20 ms, c_p = 1 ms per token; case X spends a = 30 ms outside the engine, case Y
    # (under more load) 130 ms, and Y's prompts are longer: X (100, 0.15 s), (300, 0.35 s);
    # Y (500, 0.65 s), (700, 0.85 s). Within each case the slope is 0.1 s ÷ 200 = 1 ms; one
    # line through all four takes Y's extra 100 ms for prompt cost:
    # Σ(u − 400)(y − 0.5) ÷ Σ(u − 400)² = 0.24 ÷ 200,000 = 1.2 ms. a is the mean of the two
    # cases' intercepts less c0: ȳ − c_p ū − c0 = 0.5 − 0.4 − 0.02 = 80 ms.
    u = np.array([100.0, 300.0, 500.0, 700.0])
    ttft = np.array([0.15, 0.35, 0.65, 0.85])
    a, c_p = fit_prefill(ttft, u, 0.02, np.array(["X", "X", "Y", "Y"]))
    assert (a, c_p) == (pytest.approx(0.08), pytest.approx(0.001))
    assert fit_prefill(ttft, u, 0.02)[1] == pytest.approx(0.0012)
