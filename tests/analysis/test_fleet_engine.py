"""The engine-step simulation (analysis.fleet_engine), worked out step by step by hand.

Unless a test says otherwise a step costs c0 = 10 ms + c_p = 1 ms per prompt token computed +
c_d = 2 ms per decode sequence, the budget is 100 tokens a step and a request reaches its
engine as it is sent (a = 0).
"""

from __future__ import annotations

import math

import pytest

from analysis.fleet_engine import (
    EngineRequest,
    attainment,
    highest_meeting,
    least_busy_s,
    least_utilisation,
    replay,
    sustainable_speedup,
    traffic_window_s,
)
from analysis.fleet_engine_fit import StepCost
from analysis.goodput import SLOLimits

COST = StepCost(overhead_s=0.0, step_s=0.010, prefill_s_per_token=0.001,
                decode_s_per_seq=0.002, budget_tokens=100, max_seqs=2)  # fmt: skip


def req(at: float | None, uncached: int, output: int, replica: int = 0) -> EngineRequest:
    return EngineRequest(replica=replica, offset_s=at, follows=None, delay_s=0.0,
                         uncached=uncached, output=output)  # fmt: skip


def test_one_request_prefills_in_one_step_then_decodes_one_token_a_step() -> None:
    # a = 5 ms: the engine sees it at 0.005. Step 1 computes its 50 tokens: 10 + 50 = 60 ms
    # → first token at 0.065. Steps 2 and 3 decode one sequence each: 10 + 2 = 12 ms → 0.077,
    # 0.089. TTFT 0.065, E2EL 0.089, TPOT (0.089 − 0.065) ÷ 2 = 0.012.
    cost = COST.model_copy(update={"overhead_s": 0.005})
    out = replay([req(0.0, 50, 3)], 1.0, cost)
    (s,) = out.served
    assert (s.ttft_s, s.e2el_s, s.tpot_s) == (pytest.approx(0.065), pytest.approx(0.089),
                                              pytest.approx(0.012))  # fmt: skip
    assert out.busy_s == [pytest.approx(0.084)]


def test_decodes_and_a_new_prompt_share_a_step_up_to_the_sequence_cap() -> None:
    # R0 (80 tokens, 3 out) at 0, R1 (60, 2 out) at 0.01, R2 (30, 1 out) at 0.02; max 2 seqs.
    # Step 1 [0, 0.090]: R0's 80 tokens (only R0 is there) = 10 + 80 ms; R0's first token.
    # Step 2 [0.090, 0.162]: R0 decodes (1 token of the budget), R1 joins with its 60:
    #   10 + 60 + 2 = 72 ms; R1's first token, R0's second. R2 waits: 2 sequences run.
    # Step 3 [0.162, 0.176]: R0 and R1 decode: 10 + 2 × 2 = 14 ms; both finish.
    # Step 4 [0.176, 0.216]: R2's 30 tokens: 10 + 30 = 40 ms; its only token.
    out = replay([req(0.0, 80, 3), req(0.01, 60, 2), req(0.02, 30, 1)], 1.0, COST)
    r0, r1, r2 = out.served
    assert (r0.ttft_s, r0.e2el_s) == (pytest.approx(0.090), pytest.approx(0.176))
    assert r0.tpot_s == pytest.approx((0.176 - 0.090) / 2)
    assert (r1.ttft_s, r1.e2el_s, r1.tpot_s) == (pytest.approx(0.152), pytest.approx(0.166),
                                                 pytest.approx(0.014))  # fmt: skip
    assert (r2.ttft_s, r2.e2el_s, r2.tpot_s) == (pytest.approx(0.196), pytest.approx(0.196),
                                                 None)  # fmt: skip
    assert out.busy_s == [pytest.approx(0.216)]


def test_a_prompt_longer_than_the_budget_is_chunked_and_goes_on_first() -> None:
    # R0 (150 tokens, 2 out) and R1 (20, 1 out) both at 0, up to 4 sequences.
    # Step 1 [0, 0.110]: R0's first 100 tokens use the whole budget; R1 waits.
    # Step 2 [0.110, 0.190]: R0 (running) goes first with its last 50, R1 joins with 20:
    #   10 + 70 = 80 ms; both first tokens (R1's only one).
    # Step 3 [0.190, 0.202]: R0 decodes: 12 ms.
    cost = COST.model_copy(update={"max_seqs": 4})
    r0, r1 = replay([req(0.0, 150, 2), req(0.0, 20, 1)], 1.0, cost).served
    assert (r0.ttft_s, r0.e2el_s) == (pytest.approx(0.190), pytest.approx(0.202))
    assert r1.ttft_s == pytest.approx(0.190)


SHARING = COST.model_copy(update={"contention": 1.0, "contention_decode": 0.5})


def test_replicas_sharing_cores_slow_each_other_while_both_step() -> None:
    # Two replicas, a 50-token prompt each (60 ms of work alone), κ_p = 1: while both compute
    # prompts each runs at half speed. Same start: both end at 0.120. R1 sent at 0.03: R0 does
    # 30 ms alone, its last 30 ms at half speed until 0.090; R1 did 30 ms of its 60 by then,
    # and its last 30 alone: ends 0.120.
    both = [req(0.0, 50, 1, replica=0), req(0.0, 50, 1, replica=1)]
    assert [s.ttft_s for s in replay(both, 1.0, SHARING, shared=True).served] == [
        pytest.approx(0.120), pytest.approx(0.120)]  # fmt: skip
    assert [s.ttft_s for s in replay(both, 1.0, SHARING).served] == [pytest.approx(0.060)] * 2
    staggered = [req(0.0, 50, 1, replica=0), req(0.03, 50, 1, replica=1)]
    r0, r1 = replay(staggered, 1.0, SHARING, shared=True).served
    assert (r0.ttft_s, r1.ttft_s) == (pytest.approx(0.090), pytest.approx(0.090))


def test_a_decode_step_beside_a_neighbours_prompt_slows_by_its_own_factor() -> None:
    # R0 on replica 0: 10 tokens at 0 (20 ms alone), then one decode (12 ms alone). R1 on
    # replica 1 at 0: 100 tokens (110 ms alone). [0, 0.040]: both compute prompts at half
    # speed; R0's first token at 0.040, R1 has 20 ms done. [0.040, ...]: R0 decodes at
    # 1 ÷ (1 + κ_d) = 2/3 speed, 12 ms of work take 18 ms: ends 0.058; R1 at half speed did
    # 9 ms more (29 of 110). Then R1 alone: 81 ms more, first token at 0.139.
    r0, r1 = replay([req(0.0, 10, 2, replica=0), req(0.0, 100, 1, replica=1)], 1.0, SHARING,
                    shared=True).served  # fmt: skip
    assert (r0.ttft_s, r0.e2el_s) == (pytest.approx(0.040), pytest.approx(0.058))
    assert r1.ttft_s == pytest.approx(0.139)


def test_speedup_divides_send_times_and_a_session_turn_follows_its_turn_end() -> None:
    # At 2×, R0 is sent at 0, R1 at 0.1 ÷ 2 = 0.05, when R0 (60 ms) still runs: R1 starts at
    # 0.060, first token at 0.120: TTFT 0.070. The turn R2 follows R1 by 0.2 s ÷ 2 = 0.1:
    # sent at 0.220, TTFT 0.060.
    turn = EngineRequest(replica=0, offset_s=None, follows=1, delay_s=0.2, uncached=50,
                         output=1)  # fmt: skip
    _, r1, r2 = replay([req(0.0, 50, 1), req(0.1, 50, 1), turn], 2.0, COST).served
    assert (r1.ttft_s, r2.ttft_s) == (pytest.approx(0.070), pytest.approx(0.060))


def test_attainment_judges_every_given_slo() -> None:
    # R0 at 0 (TTFT 0.06); R1 sent at 0.05 waits for R0 (ends 0.06): TTFT 0.07.
    out = replay([req(0.0, 50, 1), req(0.05, 50, 1)], 1.0, COST)
    assert attainment(out, SLOLimits(ttft_ms=65)) == 0.5
    assert attainment(out, SLOLimits(ttft_ms=70)) == 1.0
    assert attainment(out, SLOLimits(tpot_ms=1)) == 1.0  # 1-token outputs have no TPOT


def test_the_sustainable_speedup_is_where_the_slo_or_full_utilisation_binds() -> None:
    # R0 at 0, R1 at 0.05 s, R2 at 10 s (span 10 s), 50 tokens each (60 ms). R1 waits for R0
    # once 0.05/X < 0.06: TTFT 0.12 − 0.05/X ≤ 0.1 holds up to X = 2.5. Three sends over
    # 10 s stand for 15 s of traffic; the least time in steps is 10 ms × max(150 ÷ 100, 3 ÷ 2)
    # + 150 × 1 ms = 0.165 s, full at 15 ÷ 0.165 = 90.9×, so without an SLO that binds.
    three = [req(0.0, 50, 1), req(0.05, 50, 1), req(10.0, 50, 1)]
    slo = (SLOLimits(ttft_ms=100), 1.0)
    assert traffic_window_s(three, 10.0) == pytest.approx(15.0)
    assert sustainable_speedup(three, COST, slo, 10.0) == pytest.approx(2.5, rel=2e-3)
    assert sustainable_speedup(three, COST, (SLOLimits(), 1.0), 10.0) == pytest.approx(
        15 / 0.165, rel=2e-3)  # fmt: skip
    # A request whose own step breaks the SLO: never met.
    assert sustainable_speedup(three, COST, (SLOLimits(ttft_ms=50), 1.0), 10.0) == 0.0
    with pytest.raises(ValueError, match="attainment target"):
        sustainable_speedup(three, COST, (SLOLimits(), 0.0), 10.0)


def test_the_least_step_time_shares_c0_over_the_budget_or_the_sequence_cap() -> None:
    # (50 tokens, 3 out) and (30, 1) with 2 sequences a step: 80 + 2 tokens fill 0.82 of a
    # step, the 4 tokens out need 4 ÷ 2 = 2 steps: 2 × 10 ms + 80 × 1 ms + 2 × 2 ms = 0.104.
    assert least_busy_s([50, 30], [3, 1], COST) == pytest.approx(0.104)
    # (150, 2) and (20, 1) with 4 a step: 171 tokens are 1.71 steps of the budget of 100,
    # more than 3 ÷ 4: 17.1 ms + 170 ms + 2 ms.
    wide = COST.model_copy(update={"max_seqs": 4})
    assert least_busy_s([150, 20], [2, 1], wide) == pytest.approx(0.1891)
    assert least_busy_s([], [], COST) == 0.0


def test_decode_steps_that_ride_in_the_next_prompt_do_not_fill_the_replica() -> None:
    # R0, R1, R2 sent 0.07 s apart, 50 tokens and 3 out each, up to 4 sequences a step.
    # [0, 0.060] R0's prompt; [0.060, 0.072] R0 decodes (R1 arrives at 0.070 and waits);
    # [0.072, 0.134] R0 decodes beside R1's prompt: 10 + 50 + 2 = 62 ms, R1's TTFT 0.064;
    # [0.134, 0.146] R1 decodes (R2 arrives at 0.140); [0.146, 0.208] R1 decodes beside R2's
    # prompt, R2's TTFT 0.068; [0.208, 0.232] R2's two decodes. In steps 0.232 s, more than
    # the 0.21 s the three sends stand for (0.14 × 3 ÷ 2): no backlog builds, because a decode
    # that would take a step of its own (12 ms) rides in the next prompt's step (2 ms). The
    # least time: 10 ms × max(156 ÷ 100, 9 ÷ 4) + 150 ms + 6 × 2 ms = 0.1845 s.
    wide = COST.model_copy(update={"max_seqs": 4})
    stream = [req(0.0, 50, 3), req(0.07, 50, 3), req(0.14, 50, 3)]
    out = replay(stream, 1.0, wide)
    assert [s.ttft_s for s in out.served] == [pytest.approx(0.060), pytest.approx(0.064),
                                              pytest.approx(0.068)]  # fmt: skip
    assert out.busy_s == [pytest.approx(0.232)]
    assert out.least_s == [pytest.approx(0.1845)]
    assert least_utilisation(out, 1.0, 0.21, wide) == pytest.approx(0.1845 / 0.21)
    # Without an SLO the replica sustains until that least time fills the traffic's time.
    assert sustainable_speedup(stream, wide, (SLOLimits(), 1.0), 0.14) == pytest.approx(
        0.21 / 0.1845, rel=2e-3)  # fmt: skip


def test_replicas_sharing_cores_are_full_sooner_by_the_others_least_load() -> None:
    # Replica 0: 90 tokens, least 10 ms × 0.9 + 90 ms = 0.099 s; replica 1: 40 tokens,
    # 10 ms × 1 ÷ 2 (one sequence of 2 a step) + 40 ms = 0.045 s. Over a window of 0.2 s:
    # own 0.495 and 0.225. Sharing with κ_p = 1, replica 0 runs at 1 ÷ (1 + 0.225):
    # 0.495 × 1.225 = 0.606375 (replica 1: 0.225 × 1.495). At 4×: own 1.98 and 0.9, the
    # others counted at most 1: 1.98 × 1.9 = 3.762 against 0.9 × 2.
    two = [req(0.0, 90, 1, replica=0), req(0.0, 40, 1, replica=1)]
    out = replay(two, 1.0, SHARING)
    assert out.least_s == [pytest.approx(0.099), pytest.approx(0.045)]
    assert least_utilisation(out, 1.0, 0.2, SHARING) == pytest.approx(0.495)
    assert least_utilisation(out, 1.0, 0.2, SHARING, shared=True) == pytest.approx(0.606375)
    assert least_utilisation(out, 4.0, 0.2, SHARING, shared=True) == pytest.approx(3.762)


def test_highest_meeting_doubles_then_bisects() -> None:
    assert highest_meeting(lambda x: x <= 3.0) == pytest.approx(3.0, rel=1e-3)
    assert highest_meeting(lambda x: x <= 0.3) == pytest.approx(0.3, rel=1e-3)
    assert highest_meeting(lambda x: True) == math.inf
    assert highest_meeting(lambda x: False) == 0.0


def test_bad_requests_are_refused() -> None:
    with pytest.raises(ValueError, match="speedup must be positive"):
        replay([req(0.0, 50, 1)], 0.0, COST)
    with pytest.raises(ValueError, match="uncached prompt token"):
        replay([req(0.0, 0, 1)], 1.0, COST)
    ahead = EngineRequest(replica=0, offset_s=None, follows=1, delay_s=0.0, uncached=5,
                          output=1)  # fmt: skip
    with pytest.raises(ValueError, match="must follow an earlier request"):
        replay([ahead, req(0.0, 5, 1)], 1.0, COST)
