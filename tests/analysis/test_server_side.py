"""analysis.server_side and the generic phase summary: engines, resets, flags, token timing."""

from __future__ import annotations

from analysis.latency import request_frame
from analysis.load import CaseData
from analysis.server_side import counter_figures, deltas_flag, gauge_figures
from analysis.summaries import case_summary, phase_summary
from metrics.samples import Sample

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


def _scrape(start_s: float, end_s: float, outcome: str = "ok") -> dict:
    return {"outcome": outcome, "start_ns": int(start_s * S), "end_ns": int(end_s * S)}


PHASE = {"phase": "p", "start_ns": 0, "last_end_ns": 10 * S, "end_ns": 11 * S}


def test_deltas_rest_on_a_scrape_that_started_after_the_last_request() -> None:
    ok = CaseData("c", {}, [], [PHASE], [], [_scrape(9.8, 9.9), _scrape(10.1, 10.2)])
    assert deltas_flag(ok, PHASE) is None


def test_a_phase_without_a_later_successful_scrape_is_flagged() -> None:
    # The scrape after the last request failed, the one before it is too early, and the next
    # success ends after the window closed.
    scrapes = [_scrape(9.8, 9.9), _scrape(10.1, 10.2, "failed"), _scrape(10.9, 11.5)]
    late = CaseData("c", {}, [], [PHASE], [], scrapes)
    assert deltas_flag(late, PHASE) == (
        "no successful scrape started after the last request finished: counter deltas may "
        "miss the phase's tail"
    )


def _record(i: int, chunks_ms: list[int], tokens: list[int], status: str = "ok") -> dict:
    return {
        "request_id": f"r{i}", "phase": "p", "index": i, "status": status,
        "prompt_tokens_sent": 8, "scheduled_ns": 0, "sent_ns": 0,
        "chunk_ns": [c * MS for c in chunks_ms], "chunk_tokens": tokens,
    }  # fmt: skip


def test_itl_is_over_successful_requests_and_a_buffered_stream_is_flagged() -> None:
    records = [
        _record(0, [100, 110, 120], [1, 1, 1]),  # ITL 10, 10
        _record(1, [100, 400], [1, 1], status="aborted"),  # not in latency figures
        _record(2, [300], [3]),  # all 3 tokens in one chunk: TTFT = E2EL
    ]
    case = CaseData("c", {}, records, [PHASE], [], [_scrape(10.1, 10.2)])
    summary = phase_summary(case, PHASE, request_frame(records))
    assert summary.itl_ms.count == 2 and summary.itl_ms.mean == 10.0
    assert summary.ok == 2 and summary.aborted == 1
    assert summary.token_timing == {"final_only": 1, "usage": 2}
    quality = case_summary(case).data_quality
    assert quality == [
        "phase p: 1 request(s) received all their tokens in one chunk (the server or a proxy "
        "buffered the stream): their TTFT equals their E2EL"
    ]
