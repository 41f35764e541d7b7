"""slo-goodput's verdicts and capacity answer, on hand-made sweep points."""

from __future__ import annotations

from typing import Any

import pytest

from analysis.checks import evaluate
from analysis.reports.slo_goodput import REPORT
from analysis.reports.slo_goodput.details import capacity_answer
from analysis.reports.slo_goodput.models import (
    CapacityAnswer,
    LateFigure,
    SaturationFigures,
    SLOGoodputDetails,
    SweepPoint,
)
from scenarios.slo_goodput import (
    ClientKeptUp,
    LateFiguresAgree,
    LowestRateAttains,
    MaxRateBracketed,
    OverloadCollapse,
    RatesOrdered,
)
from tests.support.summary_builders import case, phase

Q = {"p50": 1.0, "p90": 2.0, "p99": 3.0}


def point(phase: str, offered: float, completed: float, goodput: float, attainment: float,
          **extra: Any) -> SweepPoint:  # fmt: skip
    """A rate over a 35 s window; figures not given are harmless placeholders."""
    fields: dict[str, Any] = {
        "phase": phase, "rate_rps": offered, "rate_source": "given", "window_s": 35.0,
        "carried_in": 0, "counted": round(offered * 35), "sent": round(offered * 35),
        "ok": round(offered * 35), "failed": 0, "good": round(attainment * offered * 35),
        "offered_rps": offered, "achieved_rps": offered, "completed_rps": completed,
        "completed_prorata_rps": completed,
        "goodput_rps": goodput, "attainment": attainment, "attainment_by_slo": {},
        "lateness_ms": Q, "lateness_max_ms": 3.5, "slot_wait_ms": None, "ttft_ms": Q,
        "tpot_ms": Q, "itl_ms": Q, "e2el_ms": Q, "ttft_adjusted_ms": Q, "e2el_adjusted_ms": Q,
        "waiting_mean": 0.0, "waiting_peak": 0.0, "running_peak": 1.0, "kv_peak": 0.1,
        "preemptions": 0.0, "server_ttft_ms": None, "server_queue_ms": None,
        "client_ttft_first_token_in_window_ms": Q,
    }  # fmt: skip
    return SweepPoint(**(fields | extra))


SWEEP = [
    point("r1", 2.25, 2.24, 2.24, 1.0),
    point("r2", 4.5, 4.5, 4.45, 0.99),
    point("r3", 8.1, 8.0, 7.6, 0.95),
    point("r4", 9.0, 8.9, 3.6, 0.4),
    point("r5", 18.0, 8.8, 0.4, 0.02, waiting_peak=310.0),
]
SATURATION = SaturationFigures(
    concurrency=20, window_s=25.0, requests=200, mean_in_flight_s=2.22, closed_loop_rps=9.0,
    window_completed_rps=9.1, ttft_p50_ms=600.0, tpot_p50_ms=50.0, running_peak=16.0,
    waiting_peak=4.0,
)  # fmt: skip


def details(points: list[SweepPoint], target_rps: float | None = None) -> SLOGoodputDetails:
    return SLOGoodputDetails(
        case="c", slo=[], warmup_s=5.0, duration_s=40.0, unloaded=None, saturation=SATURATION,
        points=points, answer=capacity_answer(points, 0.9, target_rps), late_figures=[],
        top_rate_text="",
    )  # fmt: skip


#: The generic summary of the case (verdicts need a case that ran a phase).
CASE = {"c": case("c", phase("r1"))}


def verdict(check: Any, d: SLOGoodputDetails) -> Any:
    return evaluate([check], CASE, REPORT, d)[0]


def test_capacity_answer_brackets_interpolates_and_counts_replicas() -> None:
    # (8.1, 95 %) and (9.0, 40 %): 8.1 + (0.95 − 0.9) / (0.95 − 0.4) × 0.9 = 8.1818 req/s;
    # 30 req/s ÷ 8.1818 = 3.67 → 4 replicas.
    answer: CapacityAnswer = capacity_answer(SWEEP, 0.9, 30.0)
    assert answer.max_rate_rps == pytest.approx(8.1 + 0.05 / 0.55 * 0.9)
    assert (answer.lower.phase, answer.upper.phase) == ("r3", "r4")  # type: ignore[union-attr]
    assert answer.replicas == 4
    assert "linearly" in answer.assumption
    assert "between 8.10 req/s (95.0 %, r3) and 9.00 req/s (40.0 %, r4)" in answer.statement


def test_every_verdict_passes_on_a_textbook_sweep() -> None:
    d = details(SWEEP)
    checks = [RatesOrdered(case="c"), ClientKeptUp(case="c"),
              LowestRateAttains(case="c", target=0.9), OverloadCollapse(case="c"),
              MaxRateBracketed(case="c", target=0.9)]  # fmt: skip
    verdicts = evaluate(checks, CASE, REPORT, d)
    assert [v.passed for v in verdicts] == [True] * 5, verdicts


def test_collapse_needs_the_server_busy_as_well_as_the_goodput_gone() -> None:
    # Goodput 0.4 of 8.8 req/s (4.5 % ≤ 25 %) and 8.8 / 9.0 = 97.8 % of saturation: a collapse.
    assert verdict(OverloadCollapse(case="c"), details(SWEEP)).passed
    # Completed 5.0 req/s = 55.6 % of saturation: the server was not busy, no collapse shown.
    idle = [*SWEEP[:-1], point("r5", 18.0, 5.0, 0.4, 0.02)]
    v = verdict(OverloadCollapse(case="c"), details(idle))
    assert v.passed is False and "55.6 % of saturation" in v.detail
    # Goodput 3.0 of 8.8 req/s = 34 % > 25 %: still too useful to call it a collapse.
    useful = [*SWEEP[:-1], point("r5", 18.0, 8.8, 3.0, 0.3)]
    assert verdict(OverloadCollapse(case="c"), details(useful)).passed is False


def test_collapse_compares_completions_pro_rata_not_whole_batches() -> None:
    # The CI run of 2026-12-01 (max-num-seqs 8, 8 s window): batches of 8 finished together
    # every ~1.35 s, five of them inside the window → 40 whole completions = 5.00 req/s, 55.6 %
    # of saturation 9.0 here; their tokens in the window made 5.66 requests' worth = 62.9 %.
    # Judged on whole completions it would fail (< 60 %); pro rata it passes. The whole count
    # stays in the detail beside it.
    check = OverloadCollapse(case="c", min_completed_share=0.6)
    burst = [*SWEEP[:-1], point("r5", 18.0, 5.0, 0.0, 0.0, completed_prorata_rps=5.66)]
    v = verdict(check, details(burst))
    assert v.passed is True
    assert "completed 5.00 req/s (0.0 %); completed pro rata 5.66 req/s = 62.9 % of " in v.detail
    # Pro rata 5.3 req/s = 58.9 % < 60 %: the server was not busy enough, whatever the count.
    short = [*SWEEP[:-1], point("r5", 18.0, 5.6, 0.0, 0.0, completed_prorata_rps=5.3)]
    assert verdict(check, details(short)).passed is False


def test_a_collapse_missed_because_the_client_stalled_is_undecided_not_failed() -> None:
    # The CI run of 2026-11-30: the client froze for 7 s, sent 9.13 of 16.38 req/s, and the
    # server, idle between bursts, completed 6.50 req/s (77.8 % of saturation). Here: 10.0 of
    # 18.0 req/s sent (44 % short, > 5 %), completed 5.0 = 55.6 % of 9.0.
    stalled = [*SWEEP[:-1], point("r5", 18.0, 5.0, 0.4, 0.02, achieved_rps=10.0)]
    v = verdict(OverloadCollapse(case="c"), details(stalled))
    assert v.passed is None
    assert v.detail.startswith(
        "undecided: the client sent 10.00 of the offered 18.00 req/s at r5 (more than 5.0 % "
        "off), so the server was not offered this load as scheduled; r5: goodput 0.40 of "
        "completed 5.00"
    )
    # 17.2 of 18.0 req/s is 4.4 % short (≤ 5 %): delivered, and 55.6 % of saturation fails.
    delivered = [*SWEEP[:-1], point("r5", 18.0, 5.0, 0.4, 0.02, achieved_rps=17.2)]
    assert verdict(OverloadCollapse(case="c"), details(delivered)).passed is False
    # A collapse shown despite a short client still passes: the premise only excuses misses.
    shown = [*SWEEP[:-1], point("r5", 18.0, 8.8, 0.4, 0.02, achieved_rps=10.0)]
    assert verdict(OverloadCollapse(case="c"), details(shown)).passed is True


def test_a_lowest_rate_miss_with_late_sends_is_undecided_not_failed() -> None:
    # 50 % attainment at r1. Lateness p99 7.5 ms ≥ 5 ms: the client shaped the load.
    late = [point("r1", 2.25, 2.24, 1.12, 0.5,
                  lateness_ms={"p50": 1.0, "p90": 4.0, "p99": 7.5}), *SWEEP[1:]]  # fmt: skip
    v = verdict(LowestRateAttains(case="c", target=0.9), details(late))
    assert v.passed is None
    assert v.detail == (
        "undecided: the client sent late at r1 (lateness p99 7.50 ms ≥ 5 ms: burstier arrivals "
        "than scheduled, tokens stamped late), so the server was not offered this load as "
        "scheduled; "
        "r1: 50.0 % (39/79 good)"
    )
    # Sent on time (p99 3.0 ms): the miss is the server's.
    on_time = [point("r1", 2.25, 2.24, 1.12, 0.5), *SWEEP[1:]]
    assert verdict(LowestRateAttains(case="c", target=0.9), details(on_time)).passed is False


def test_a_late_client_fails_its_check_and_says_how() -> None:
    late = [*SWEEP[:-1], point("r5", 18.0, 8.8, 0.4, 0.02,
                               lateness_ms={"p50": 1.0, "p90": 4.0, "p99": 7.5})]  # fmt: skip
    v = verdict(ClientKeptUp(case="c"), details(late))
    assert v.passed is False
    # Every rate reached (the point's achieved rate is its offered 18.0), sends late: p99 7.5 ms.
    assert v.detail.startswith("the client sent late (rates reached")
    assert "r5: achieved 18.00 of 18.00 req/s, lateness p99 7.50 ms" in v.detail
    # 16.0 of 18.0 req/s is 11 % short of the rate (> 5 %): the client limited the load.
    short = [*SWEEP[:-1], point("r5", 18.0, 8.8, 0.4, 0.02, achieved_rps=16.0)]
    v = verdict(ClientKeptUp(case="c"), details(short))
    assert v.passed is False
    assert v.detail.startswith("the client, not the server, limited the load: r5:")
    # A --max-concurrency cap that held arrivals back is named as the cause.
    capped = [*SWEEP[:-1], point("r5", 18.0, 8.8, 0.4, 0.02, achieved_rps=12.0,
                                 slot_wait_ms={"p50": 900.0, "p90": 2e3, "p99": 3e3})]  # fmt: skip
    v = verdict(ClientKeptUp(case="c"), details(capped))
    assert "max-concurrency cap held requests" in v.detail


def test_completions_may_exceed_arrivals_only_by_tolerance_and_carried_in() -> None:
    # Offered 2.25 req/s over 35 s; 5 % allows 2.3625; 2 requests carried in from the warm-up
    # allow 2 / 35 = 0.0571 more: bound 2.4196 req/s.
    ok = [point("r1", 2.25, 2.41, 2.41, 1.0, carried_in=2), *SWEEP[1:]]
    assert verdict(RatesOrdered(case="c"), details(ok)).passed
    over = [point("r1", 2.25, 2.43, 2.43, 1.0, carried_in=2), *SWEEP[1:]]
    v = verdict(RatesOrdered(case="c"), details(over))
    assert v.passed is False and "bound 2.42" in v.detail
    wrong = [point("r1", 2.25, 2.0, 2.1, 1.0), *SWEEP[1:]]  # goodput above completed
    assert verdict(RatesOrdered(case="c"), details(wrong)).passed is False


def test_an_unbracketed_maximum_fails_and_says_which_side() -> None:
    v = verdict(MaxRateBracketed(case="c", target=0.9), details(SWEEP[:3]))
    assert v.passed is False and "above the sweep" in v.detail
    low = [point("r1", 2.25, 2.2, 1.0, 0.5), *SWEEP[3:]]
    v = verdict(MaxRateBracketed(case="c", target=0.9), details(low))
    assert v.passed is False and "below the sweep" in v.detail
    assert verdict(LowestRateAttains(case="c", target=0.9), details(low)).passed is False


def test_the_markdown_states_the_answer_first_and_the_definitions() -> None:
    text = "\n".join(REPORT.markdown(details(SWEEP, target_rps=30.0)))
    assert text.startswith("## The capacity-planning answer")
    assert "**4 replica(s)** = ⌈30.00 ÷ 8.18⌉" in text
    assert "a value exactly on the limit is good" in text
    assert "a 1-token output is judged on its other SLOs" in text


def test_sending_more_than_offered_into_a_window_also_fails_the_client_check() -> None:
    # Late sends from the warm-up spill into the window: achieved 9.5 of 9.0 req/s (+5.6 %).
    spill = [*SWEEP[:3], point("r4", 9.0, 8.9, 3.6, 0.4, achieved_rps=9.5), SWEEP[4]]
    v = verdict(ClientKeptUp(case="c"), details(spill))
    assert v.passed is False and "r4: achieved 9.50 of 9.00 req/s" in v.detail


def test_a_late_figure_that_cannot_be_recomputed_leaves_the_check_undecided() -> None:
    def late(used: float | None, again: float | None, agrees: bool | None) -> LateFigure:
        return LateFigure(name="r1 rate (req/s)", used=used, recomputed=again, inputs="x",
                          agrees=agrees)  # fmt: skip

    def judge(*figures: LateFigure) -> Any:
        d = details(SWEEP).model_copy(update={"late_figures": list(figures)})
        return verdict(LateFiguresAgree(case="c"), d)

    agree = late(2.25, 2.25, True)
    # The run recorded 2.25 req/s, the raw files give nothing to recompute it from: unknown.
    unknown = judge(agree, late(2.25, None, None))
    assert (unknown.passed, unknown.detail) == (
        None, "cannot decide: 1 figure(s) without both values: r1 rate (req/s): used 2.2500, "
        "recomputed –",
    )  # fmt: skip
    # 2.25 against 2.70 is a disagreement: evidence, so FAIL whatever else is unknown.
    assert judge(late(2.25, 2.70, False), late(2.25, None, None)).passed is False
    assert judge(agree).passed is True


def test_a_late_client_at_normal_priority_says_so_and_why() -> None:
    late = [*SWEEP[:-1], point("r5", 18.0, 8.8, 0.4, 0.02,
                               lateness_ms={"p50": 1.0, "p90": 4.0, "p99": 7.5})]  # fmt: skip
    why = "SCHED_FIFO refused (Operation not permitted): it needs root"
    normal = {"c": case("c", phase("r1"), client=[
        {"policy": "SCHED_OTHER", "cpus": [1], "reason": "real-time on core(s) 1", "problem": why}
    ])}  # fmt: skip
    v = evaluate([ClientKeptUp(case="c")], normal, REPORT, details(late))[0]
    assert v.passed is False
    assert v.detail.endswith(f"; the load generator's sending thread ran at SCHED_OTHER ({why})")
    # A real-time client that was late anyway: nothing to add (the default case above: none).
    realtime = {"c": case("c", phase("r1"), client=[
        {"policy": "SCHED_FIFO 1", "cpus": [1], "reason": "real-time on core(s) 1"}
    ])}  # fmt: skip
    v = evaluate([ClientKeptUp(case="c")], realtime, REPORT, details(late))[0]
    assert "sending thread" not in v.detail
