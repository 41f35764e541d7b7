"""analysis.server_side and the generic phase summary: engines, resets, flags, token timing."""

from __future__ import annotations

from analysis.latency import request_frame
from analysis.load import CaseData
from analysis.server_side import (
    counter_figures,
    deltas_flag,
    gauge_figures,
    histogram_figures,
    unusable_histograms,
)
from analysis.summaries import case_summary, phase_summary
from loadgen.runformat import CaseInfo, ReadRecord, ScrapeTick
from metrics.samples import Sample
from tests.support.row_builders import phase_row, record, scrape

S = 1_000_000_000
MS = 1_000_000


def _engines(kv: dict[str, list[float]]) -> list[Sample]:
    """KV usage per engine, one scrape per second from t = 0."""
    return [
        Sample(k * S, "kv_cache_usage_perc", (("engine", engine),), v)
        for engine, values in kv.items()
        for k, v in enumerate(values)
    ]


def test_two_engines_at_0_6_and_0_7_peak_at_0_7_not_1_3() -> None:
    samples = _engines({"0": [0.1, 0.6, 0.2], "1": [0.3, 0.7, 0.1]})
    peaks, per_engine, points = gauge_figures(samples, 0, 2 * S)
    assert peaks["kv_cache_usage_perc"] == 0.7
    assert per_engine["kv_cache_usage_perc"] == {"0": 0.6, "1": 0.7}
    assert points["kv_cache_usage_perc"] == 3  # scrapes at 0, 1 and 2 s, inclusive window


def test_counters_are_summed_over_engines() -> None:
    samples = [
        Sample(t * S, "generation_tokens", (("engine", e),), v)
        for t, (a, b) in enumerate([(0, 0), (10, 30), (25, 45)])
        for e, v in (("0", a), ("1", b))
    ]
    deltas, reset_counts = counter_figures(samples, 0, 2 * S)
    assert deltas["generation_tokens"] == 70.0  # (25 − 0) + (45 − 0)
    assert reset_counts == {}


def test_a_counter_reset_is_counted_and_its_increments_kept() -> None:
    # 100 → 140 → (restart) 15 → 35: delta 40 + 15 + 20 = 75, one reset.
    points = [(0, 100.0), (S, 140.0), (2 * S, 15.0), (3 * S, 35.0)]
    samples = [Sample(t, "generation_tokens", (), v) for t, v in points]
    deltas, reset_counts = counter_figures(samples, 0, 3 * S)
    assert deltas["generation_tokens"] == 75.0
    assert reset_counts == {"generation_tokens": 1}
    _, after = counter_figures(samples, 2 * S, 3 * S)
    assert after == {}  # the window after the restart has none


def _scrape(start_s: float, end_s: float, outcome: str = "ok") -> ScrapeTick:
    return scrape(outcome=outcome, start_ns=int(start_s * S), end_ns=int(end_s * S))


PHASE = phase_row(phase="p", start_ns=1 * S, last_end_ns=10 * S, end_ns=11 * S)
#: The scrape a phase starting at 1 s takes its base from.
BASE = _scrape(0.7, 0.8)


def test_deltas_rest_on_a_scrape_that_started_after_the_last_request() -> None:
    ok = CaseData("c", CaseInfo(), [], [PHASE], [], [BASE, _scrape(9.8, 9.9), _scrape(10.1, 10.2)])
    assert deltas_flag(ok, PHASE) is None


def test_a_phase_without_a_later_successful_scrape_is_flagged() -> None:
    # The scrape after the last request failed, the one before it is too early, and the next
    # success ends after the window closed.
    scrapes = [BASE, _scrape(9.8, 9.9), _scrape(10.1, 10.2, "failed"), _scrape(10.9, 11.5)]
    late = CaseData("c", CaseInfo(), [], [PHASE], [], scrapes)
    assert deltas_flag(late, PHASE) == (
        "no successful scrape started after the last request finished: counter deltas may "
        "miss the phase's tail"
    )


def test_a_phase_without_any_successful_scrape_in_its_window_is_flagged_unknown() -> None:
    # Scrapes failed from 0.9 s to after the window closed (the m_html answers): the base at
    # 0.8 s is the last reading, so no delta can be measured.
    scrapes = [BASE, _scrape(5.0, 5.1, "failed"), _scrape(10.1, 10.2, "failed")]
    case = CaseData("c", CaseInfo(), [], [PHASE], [], scrapes)
    assert deltas_flag(case, PHASE) == (
        "no successful scrape ended inside the phase window: its counter deltas are unknown "
        "(–) and checks that need them are undecided"
    )


def test_a_base_scrape_older_than_the_previous_phase_s_last_request_is_flagged() -> None:
    # Phase 1 ran [1 s, 10 s] (window to 11 s); every scrape from 0.9 s to 11.6 s failed, so
    # phase 2 (from 12 s) starts its deltas from the 0.7 s scrape, 11.3 s before its start
    # and before phase 1's last request ended at 10 s: phase 1's increments land in phase 2.
    second = phase_row(phase="q", start_ns=12 * S, last_end_ns=20 * S, end_ns=21 * S)
    failed = [_scrape(t, t + 0.1, "failed") for t in (5.0, 10.1, 11.5)]
    scrapes = [BASE, *failed, _scrape(20.1, 20.2)]
    case = CaseData("c", CaseInfo(), [], [PHASE, second], [], scrapes)
    assert deltas_flag(case, second) == (
        "the last successful scrape before the phase started began 11.3 s before it, before "
        "an earlier phase's last request ended: counter deltas may include that phase's late "
        "increments"
    )
    # With the scrape of 10.1 s (after phase 1's last request) successful, phase 2's base is
    # clean, and so is phase 1's tail.
    scrapes = [BASE, _scrape(10.1, 10.2), _scrape(20.1, 20.2)]
    case = CaseData("c", CaseInfo(), [], [PHASE, second], [], scrapes)
    assert deltas_flag(case, second) is None
    assert deltas_flag(case, PHASE) is None
    # The first phase has no earlier work: an old base is harmless, but none at all is not.
    case = CaseData("c", CaseInfo(), [], [PHASE], [], [_scrape(10.1, 10.2)])
    assert deltas_flag(case, PHASE) == (
        "no successful scrape ended before the phase started: counter deltas start from its "
        "first scrape and may miss the phase's head"
    )


def _record(i: int, chunks_ms: list[int], tokens: list[int], status: str = "ok") -> ReadRecord:
    return record(**{
        "request_id": f"r{i}", "phase": "p", "index": i, "status": status,
        "prompt_tokens_sent": 8, "scheduled_ns": 0, "sent_ns": 0,
        "chunk_ns": [c * MS for c in chunks_ms], "chunk_tokens": tokens,
    })  # fmt: skip


def test_itl_is_over_successful_requests_and_a_buffered_stream_is_flagged() -> None:
    records = [
        _record(0, [100, 110, 120], [1, 1, 1]),  # ITL 10, 10
        _record(1, [100, 400], [1, 1], status="aborted"),  # not in latency figures
        _record(2, [300], [3]),  # all 3 tokens in one chunk: TTFT = E2EL
    ]
    case = CaseData("c", CaseInfo(), records, [PHASE], [], [BASE, _scrape(10.1, 10.2)])
    summary = phase_summary(case, PHASE, request_frame(records))
    assert summary.itl_ms.count == 2 and summary.itl_ms.mean == 10.0
    assert summary.ok == 2 and summary.aborted == 1
    assert summary.token_timing == {"final_only": 1, "usage": 2}
    quality = case_summary(case).data_quality
    assert quality == [
        "phase p: 1 request(s) received all their tokens in one chunk (the server or a proxy "
        "buffered the stream): their TTFT equals their E2EL"
    ]


def test_histogram_figures_leave_out_a_malformed_family_whoever_calls_them() -> None:
    # queue_time at 1 s and 2 s with buckets 0.1/+Inf; its le=+Inf holds 1 < le=0.1's 2 at
    # 2 s: not cumulative. TTFT beside it is fine: 2 observations ≤ 0.1 s in [1 s, 2 s].
    def hist(family: str, t: int, low: float, inf: float) -> list[Sample]:
        return [
            Sample(t, f"{family}_bucket", (("le", "0.1"),), low),
            Sample(t, f"{family}_bucket", (("le", "+Inf"),), inf),
            Sample(t, f"{family}_sum", (), inf * 0.05),
            Sample(t, f"{family}_count", (), inf),
        ]

    samples = [
        *hist("ttft_seconds", S, 0, 0),
        *hist("ttft_seconds", 2 * S, 2, 2),
        *hist("queue_time_seconds", S, 0, 0),
        *hist("queue_time_seconds", 2 * S, 2, 1),
    ]
    figures = histogram_figures(samples, S, 2 * S)  # no list given: found here
    assert set(figures) == {"ttft_seconds"}
    # p50: rank 1 of 2, both in (0, 0.1 s]: 0.1 × 1/2 = 50 ms.
    assert figures["ttft_seconds"].p50_ms == 50.0
    assert unusable_histograms(samples) == {
        "queue_time_seconds": "buckets are not cumulative: le=+Inf holds 1, less than le=0.1 "
        "(2) at one scrape"
    }
