"""The hand calculation of kv-preemption and its verdicts, on given capacities."""

from __future__ import annotations

import pytest

from analysis.checks import evaluate
from analysis.models import CaseSummary
from analysis.reports.kv_preemption.report import (
    REPORT,
    HandCalculation,
    KVPreemptionDetails,
    PeakCoverage,
    PreemptionRow,
    hand_calculation,
    tradeoffs,
)
from scenarios.kv_preemption import KVPeakMatchesWorkingSet, PreemptionAsPredicted
from tests.support.summary_builders import case, phase

CPU_1GIB = {"tokens": 18_688, "block_size": 128, "num_blocks": 146}
CPU_4GIB = {"tokens": 74_880, "block_size": 128, "num_blocks": 585}


def test_sixteen_long_requests_overflow_1gib() -> None:
    calc = hand_calculation(CPU_1GIB, 16, 1024, 512)
    assert calc.initial_working_set_tokens == 16_384  # 16 × 1024
    assert calc.headroom_tokens == 2_304  # 18,688 − 16,384
    assert calc.growth_per_request_tokens == 144.0  # 2,304 / 16, far below 512
    assert calc.final_working_set_tokens == 24_576  # 16 × 1536
    assert calc.final_working_set_blocks == 192  # 16 × ceil(1536 / 128)
    assert calc.usable_blocks == 145  # one null block reserved
    assert calc.predicted_preemption is True  # 192 > 145 blocks
    assert calc.predicted_kv_peak == 1.0


def test_eight_long_requests_fit_in_1gib() -> None:
    calc = hand_calculation(CPU_1GIB, 8, 1024, 512)
    assert calc.final_working_set_blocks == 96  # 8 × 12
    assert calc.predicted_preemption is False
    assert calc.predicted_kv_peak == pytest.approx(96 / 145)


def test_sixteen_long_requests_fit_in_4gib() -> None:
    calc = hand_calculation(CPU_4GIB, 16, 1024, 512)
    assert calc.predicted_preemption is False  # 192 ≤ 584 usable blocks
    assert calc.predicted_kv_peak == pytest.approx(192 / 584)


def test_block_rounding_counts_a_partial_last_block_in_full() -> None:
    # 1,025 + 1 tokens: the cache holds the 1,025 prompt tokens (the one output token is
    # sampled, never written), 9 blocks of 128: 2 × 9 = 18 > 17 usable blocks, although
    # 2,050 tokens are fewer than the 18 × 128 = 2,304 the cache holds.
    calc = hand_calculation({"tokens": 18 * 128, "block_size": 128, "num_blocks": 18}, 2, 1025, 1)
    assert calc.final_working_set_tokens == 2_052
    assert calc.cached_tokens_per_request_at_end == 1_025
    assert calc.final_working_set_blocks == 18
    assert calc.predicted_preemption is True


def test_the_last_output_token_is_never_cached_so_it_adds_no_block() -> None:
    # 256 + 129 = 385 tokens, one more than 3 blocks of 128; the cache holds 384 of them
    # (vLLM writes a token's KV in the step after it is sampled, and the last one has none).
    # 6 × 3 = 18 ≤ 21 usable blocks: fits, peak 18/21. Counting the last token would give
    # 6 × 4 = 24 > 21 and predict preemption; vLLM 0.32 CPU ran this case with none and a
    # sampled peak of exactly 18/21.
    calc = hand_calculation({"tokens": 22 * 128, "block_size": 128, "num_blocks": 22}, 6, 256, 129)
    assert calc.cached_tokens_per_request_at_end == 384
    assert calc.final_working_set_blocks == 18
    assert calc.predicted_preemption is False
    assert calc.predicted_kv_peak == pytest.approx(18 / 21)
    one_more = hand_calculation(
        {"tokens": 22 * 128, "block_size": 128, "num_blocks": 22}, 6, 256, 130
    )  # 385 cached tokens: a 4th block each
    assert one_more.final_working_set_blocks == 24
    assert one_more.predicted_preemption is True


def _case(
    preemptions: float, kv_peak: float, capacity: dict[str, int], ok: int = 16
) -> CaseSummary:
    c16 = phase(
        "c16",
        requests=16,
        ok=ok,
        failed=16 - ok,
        counter_deltas={"num_preemptions": preemptions},
        gauge_peaks={"kv_cache_usage_perc": kv_peak},
    )
    return case("x", c16, server={"capacity": capacity})


def _checks(case: str) -> tuple:
    shape = {"case": case, "phase": "c16", "concurrency": 16, "prompt_tokens": 1024,
             "output_tokens": 512}  # fmt: skip
    return (PreemptionAsPredicted(**shape), KVPeakMatchesWorkingSet(**shape, tolerance=0.05))


def test_verdicts_pass_when_preemption_happens_where_predicted() -> None:
    verdicts = evaluate(_checks("small"), {"small": _case(37, 0.99, CPU_1GIB)}, REPORT, None)
    assert [v.passed for v in verdicts] == [True, True]


def test_verdict_fails_when_a_predicted_preemption_does_not_happen() -> None:
    verdicts = evaluate(_checks("small"), {"small": _case(0, 0.99, CPU_1GIB)}, REPORT, None)
    assert verdicts[0].passed is False
    assert "192 blocks vs 145 usable" in verdicts[0].detail


def test_verdicts_for_a_case_that_fits() -> None:
    good = evaluate(
        _checks("big"), {"big": _case(0, 0.33, CPU_4GIB)}, REPORT, None
    )  # expected 192/584=0.329
    assert [v.passed for v in good] == [True, True]
    low_peak = evaluate(_checks("big"), {"big": _case(0, 0.20, CPU_4GIB)}, REPORT, None)
    assert low_peak[1].passed is False
    surprise = evaluate(_checks("big"), {"big": _case(3, 0.33, CPU_4GIB)}, REPORT, None)
    assert surprise[0].passed is False


def test_checks_on_a_phase_where_requests_failed_are_undecided_and_say_why() -> None:
    # 13 of the 16 requests succeeded. Each needs ceil(1536 / 128) = 12 blocks; the 3 that
    # failed held KV for an unknown part of their decode, so the working set lay somewhere
    # between 13 × 12 = 156 and 16 × 12 = 192 blocks, not the predicted 192: 0 preemptions
    # and a 0.7 peak cannot be judged against it.
    verdicts = evaluate(_checks("small"), {"small": _case(0, 0.7, CPU_1GIB, ok=13)}, REPORT, None)
    assert [v.passed for v in verdicts] == [None, None]
    assert verdicts[0].detail == (
        "cannot decide: 13 of the 16 requests the prediction assumes succeeded (3 failed, "
        "0 aborted, 0 not sent), so the load was not the one predicted"
    )


def _covered(case: str, scrapes: int) -> KVPreemptionDetails:
    coverage = PeakCoverage(level_blocks=96, window_ms=900.0, scrapes=scrapes, peak_inside=None)
    row = _row(case, hand_calculation(CPU_4GIB, 16, 1024, 512), preemptions=0.0,
               ttft_mean_ms=1.0, tpot_mean_ms=1.0, output_throughput_tok_s=1.0)  # fmt: skip
    return KVPreemptionDetails(rows=[row.model_copy(update={"peak_coverage": coverage})],
                               tradeoffs=[])  # fmt: skip


def test_kv_peak_is_undecided_when_no_scrape_fell_inside_the_peak_window() -> None:
    # A peak of 0.095 where 0.329 is expected would fail, but no scrape looked while the
    # requests held their final blocks: the sampled peak (a lower bound) says nothing of it.
    blind = evaluate(_checks("big"), {"big": _case(0, 0.095, CPU_4GIB)}, REPORT,
                     _covered("big", 0))  # fmt: skip
    assert [v.passed for v in blind] == [True, None]
    assert blind[1].detail.startswith("cannot decide: sampled peak 0.095 (a lower bound)")
    assert (
        "0 scrape(s) inside the 900 ms in which the requests' tokens put the demand at 96 "
        "blocks, so no sample could see the peak" in blind[1].detail
    )
    seen = evaluate(_checks("big"), {"big": _case(0, 0.095, CPU_4GIB)}, REPORT,
                    _covered("big", 3))  # fmt: skip
    assert seen[1].passed is False
    assert seen[1].detail.endswith("; 3 scrape(s) inside the 900 ms in which the requests' "
                                   "tokens put the demand at 96 blocks")  # fmt: skip


def _row(name: str, calc: HandCalculation, **figures: float) -> PreemptionRow:
    empty = dict.fromkeys(
        ("kv_peak", "running_peak", "waiting_peak", "ttft_p95_ms", "itl_p95_ms", "e2el_p95_ms",
         "wall_s"),
    )  # fmt: skip
    return PreemptionRow(case=name, hand_calculation=calc, failed=0, **(empty | figures))


def test_tradeoffs_state_every_metric_not_a_winner() -> None:
    calc = hand_calculation(CPU_1GIB, 16, 1024, 512)
    rows = [
        _row("1GiB-c16", calc, preemptions=40.0, ttft_mean_ms=900.0, tpot_mean_ms=160.0,
             output_throughput_tok_s=90.0),
        _row("4GiB-c16", calc, preemptions=0.0, ttft_mean_ms=1200.0, tpot_mean_ms=120.0,
             output_throughput_tok_s=120.0),
    ]  # fmt: skip
    (sentence,) = tradeoffs(rows)
    assert "TTFT mean 900.0 vs 1200.0 ms (better)" in sentence
    assert "TPOT mean 160.0 vs 120.0 ms (worse)" in sentence
    assert "output throughput 90.0 vs 120.0 tok/s (worse)" in sentence
