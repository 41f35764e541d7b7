"""analysis.goodput: the definitions pinned with small cases computed by hand."""

from __future__ import annotations

from typing import Any

import pytest

from analysis.goodput import (
    RatePoint,
    SLOLimits,
    error_adjusted_quantiles,
    judge,
    max_sustainable_rate,
    replicas_needed,
    window_rates,
)
from analysis.latency import request_frame
from loadgen.measure import Window
from loadgen.runformat import ReadRecord
from tests.support.row_builders import record as build

MS = 1_000_000
S = 1_000_000_000


def record(
    i: int,
    scheduled_s: float,
    ttft_ms: float,
    tokens: int = 4,
    itl_ms: float = 10,
    status: str = "ok",
) -> ReadRecord:
    """A request sent at its scheduled time; first token after ``ttft_ms``, then one token
    every ``itl_ms``; ends 1 ms after its last token. A failed one has no token."""
    sent = int(scheduled_s * S)
    chunks = [sent + int(ttft_ms * MS) + k * int(itl_ms * MS) for k in range(tokens)]
    if status != "ok":
        chunks = []
    return build(**{
        "request_id": f"r{i}", "phase": "p", "index": i, "status": status,
        "scheduled_ns": sent, "admitted_ns": sent, "sent_ns": sent,
        "chunk_ns": chunks, "chunk_tokens": [1] * len(chunks),
        "end_ns": (chunks[-1] if chunks else sent + 50 * MS) + MS,
    })  # fmt: skip


def judged(*records: ReadRecord, slo: SLOLimits) -> Any:
    return judge(request_frame(records), slo)


def test_a_one_token_reply_is_judged_on_its_other_slos() -> None:
    # One token: no TPOT. It meets TTFT 150 ≤ 200, so it is good, and it does not count
    # against the TPOT SLO either.
    rows = judged(record(0, 1.0, ttft_ms=150, tokens=1), slo=SLOLimits(ttft_ms=200, tpot_ms=5))
    assert bool(rows["good"].iloc[0]) and bool(rows["tpot_met"].iloc[0])
    # The same reply over its TTFT limit is bad, whatever TPOT does.
    rows = judged(record(0, 1.0, ttft_ms=250, tokens=1), slo=SLOLimits(ttft_ms=200, tpot_ms=5))
    assert not rows["good"].iloc[0]


def test_a_value_exactly_on_the_limit_is_good() -> None:
    # TTFT exactly 200 ms (integer ns stamps), TPOT exactly 10 ms ((3 × 10 ms) / (4 − 1)).
    rows = judged(record(0, 1.0, ttft_ms=200, itl_ms=10), slo=SLOLimits(ttft_ms=200, tpot_ms=10))
    assert rows["ttft_ms"].iloc[0] == 200.0 and rows["tpot_ms"].iloc[0] == 10.0
    assert bool(rows["good"].iloc[0])
    # One nanosecond more TTFT is over the limit.
    late = record(0, 1.0, ttft_ms=200, itl_ms=10)
    late.chunk_ns = [t + 1 for t in late.chunk_ns]
    assert not judged(late, slo=SLOLimits(ttft_ms=200, tpot_ms=10))["good"].iloc[0]


def test_a_failed_request_stays_in_the_denominator() -> None:
    # Three counted requests in a 10 s window: two meet TTFT ≤ 200 ms, one failed (no token).
    # Attainment 2/3, not 2/2; per-SLO attainment likewise; percentiles see only successes.
    slo = SLOLimits(ttft_ms=200)
    rows = judged(
        record(0, 1.0, ttft_ms=100), record(1, 2.0, ttft_ms=120),
        record(2, 3.0, ttft_ms=0, status="error"), slo=slo,
    )  # fmt: skip
    rates = window_rates(rows, Window(0, 10 * S), slo)
    assert (rates.counted, rates.ok, rates.good) == (3, 2, 2)
    assert rates.attainment == pytest.approx(2 / 3)
    assert rates.attainment_by_slo == {"ttft": pytest.approx(2 / 3)}


def test_ten_seconds_with_two_good_of_three_sent_is_0_2_req_s_of_goodput() -> None:
    # Window [0, 10 s]: 3 scheduled, sent and ended inside it; 2 good (TTFT 100, 150 ms ≤ 200),
    # 1 successful but bad (TTFT 300 ms). Offered = achieved = completed = 3 / 10 s = 0.3 req/s;
    # goodput = 2 / 10 s = 0.2 req/s; attainment 2/3.
    slo = SLOLimits(ttft_ms=200)
    rows = judged(
        record(0, 1.0, ttft_ms=100), record(1, 4.0, ttft_ms=150), record(2, 7.0, ttft_ms=300),
        slo=slo,
    )  # fmt: skip
    rates = window_rates(rows, Window(0, 10 * S), slo)
    assert rates.window_s == 10.0
    assert (rates.offered_rps, rates.achieved_rps) == (0.3, 0.3)
    assert rates.completed_rps == pytest.approx(0.3)
    assert rates.goodput_rps == pytest.approx(0.2)
    assert rates.attainment == pytest.approx(2 / 3)


def test_requests_outside_the_window_are_not_counted_but_completions_inside_are() -> None:
    # Window [2 s, 10 s] (8 s). A warm-up request scheduled at 1 s and ending inside the window
    # is a completion of the window but not a counted request; one scheduled at 9.99 s that
    # ends after 10 s is counted (its attainment is judged) but is no completion of it.
    slo = SLOLimits(ttft_ms=200)
    rows = judged(
        record(0, 1.0, ttft_ms=1500), record(1, 5.0, ttft_ms=100),
        record(2, 9.99, ttft_ms=100), slo=slo,
    )  # fmt: skip
    rates = window_rates(rows, Window(2 * S, 10 * S), slo)
    assert (rates.counted, rates.good) == (2, 2)
    assert rates.offered_rps == 2 / 8
    assert rates.completed_rps == 2 / 8  # requests 0 and 1 ended in the window
    assert rates.goodput_rps == 1 / 8  # request 0 was bad (TTFT 1.5 s)


def test_completions_pro_rata_credit_the_share_of_tokens_inside_the_window() -> None:
    # Window [2 s, 10 s] (8 s), 4 tokens 100 ms apart after a 400 ms TTFT:
    # r0 sent at 1.5 s: tokens at 1.9, 2.0, 2.1, 2.2 s → 3 of 4 inside (edges count) = 0.75;
    # r1 sent at 5.0 s: all 4 inside = 1; r2 sent at 9.5 s: tokens at 9.9, 10.0, 10.1, 10.2 s →
    # 2 of 4 = 0.5; r3 failed (no token) = 0. Pro rata (0.75 + 1 + 0.5) / 8 s = 0.28125 req/s;
    # whole completions (r0 ends 2.201 s, r1 5.701 s; r2 ends after the window) 2 / 8 = 0.25.
    slo = SLOLimits(ttft_ms=500)
    rows = judged(
        record(0, 1.5, ttft_ms=400, itl_ms=100), record(1, 5.0, ttft_ms=400, itl_ms=100),
        record(2, 9.5, ttft_ms=400, itl_ms=100), record(3, 6.0, ttft_ms=0, status="error"),
        slo=slo,
    )  # fmt: skip
    rates = window_rates(rows, Window(2 * S, 10 * S), slo)
    assert rates.completed_prorata_rps == pytest.approx(2.25 / 8)
    assert rates.completed_rps == pytest.approx(2 / 8)


def test_a_batch_finishing_at_the_window_edge_moves_pro_rata_by_a_fraction() -> None:
    # Eight requests sent together at 1.0 s, 10 tokens each at 1.1, 1.2, …, 2.0 s, each ending
    # 1 ms after its last token (2.001 s). Window [0, 2.0 s]: no whole completion (0 req/s),
    # while all 80 tokens arrived: 8 requests' worth ÷ 2 s = 4 req/s. Window [0, 1.95 s]: 9 of
    # 10 tokens each → 7.2 ÷ 1.95 s = 3.6923 req/s.
    slo = SLOLimits(ttft_ms=500)
    batch = [record(i, 1.0, ttft_ms=100, tokens=10, itl_ms=100) for i in range(8)]
    rows = judged(*batch, slo=slo)
    at_edge = window_rates(rows, Window(0, 2 * S), slo)
    assert (at_edge.completed_rps, at_edge.completed_prorata_rps) == (0.0, pytest.approx(4.0))
    before = window_rates(rows, Window(0, int(1.95 * S)), slo)
    assert before.completed_prorata_rps == pytest.approx(7.2 / 1.95)


def test_error_adjusted_quantiles_rank_failures_above_every_success() -> None:
    # Successes 10, 20, 30 ms and one failure: 4 requests. Nearest rank: p50 = 2nd = 20 ms;
    # p90 and p99 = 4th = the failure.
    assert error_adjusted_quantiles([30.0, 10.0, 20.0], failed=1) == {
        "p50": 20.0, "p90": None, "p99": None,
    }  # fmt: skip
    assert error_adjusted_quantiles([], failed=0) == {"p50": None, "p90": None, "p99": None}


def test_the_maximum_rate_is_interpolated_between_its_bracketing_rates() -> None:
    # (4 req/s, 95 %) reaches 90 %, (6 req/s, 50 %) does not:
    # 4 + (0.95 − 0.90) / (0.95 − 0.50) × (6 − 4) = 4 + 0.2222 = 4.2222 req/s.
    points = [RatePoint("a", 2, 1.0), RatePoint("b", 4, 0.95), RatePoint("c", 6, 0.5),
              RatePoint("d", 8, 0.1)]  # fmt: skip
    found = max_sustainable_rate(points, 0.9)
    assert found.rate_rps == pytest.approx(4 + 0.05 / 0.45 * 2)
    assert (found.lower, found.upper) == (points[1], points[2])
    assert found.bracketed


def test_a_dip_below_the_target_is_not_the_crossing() -> None:
    # 4 req/s dips to 85 % but 6 req/s reaches 92 %: the highest rate reaching 90 % is 6;
    # 6 + (0.92 − 0.90) / (0.92 − 0.20) × 2 = 6.0556 req/s.
    points = [RatePoint("a", 2, 0.95), RatePoint("b", 4, 0.85), RatePoint("c", 6, 0.92),
              RatePoint("d", 8, 0.2)]  # fmt: skip
    assert max_sustainable_rate(points, 0.9).rate_rps == pytest.approx(6 + 0.02 / 0.72 * 2)


def test_an_unbracketed_maximum_says_which_side_it_is_on() -> None:
    below = max_sustainable_rate([RatePoint("a", 2, 0.5), RatePoint("b", 4, 0.1)], 0.9)
    assert (below.rate_rps, below.lower, below.bracketed) == (None, None, False)
    above = max_sustainable_rate([RatePoint("a", 2, 1.0), RatePoint("b", 4, 0.95)], 0.9)
    assert (above.rate_rps, above.upper, above.bracketed) == (4, None, False)


def test_replicas_round_up_the_planned_load_over_the_sustainable_rate() -> None:
    assert replicas_needed(10, 2.5) == 4  # exactly 4, no spurious fifth
    assert replicas_needed(10, 3.0) == 4  # 3.33 → 4
    assert replicas_needed(1, 4.22) == 1
    with pytest.raises(ValueError, match="must be positive"):
        replicas_needed(10, 0)
