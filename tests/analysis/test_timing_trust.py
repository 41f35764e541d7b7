"""``analysis.timing_trust``: the report warns when the load generator's own loop lag or its
stamp coalescing says its timings are not to be trusted (thresholds: loop lag p99 > 1 ms,
more than 1 % of token stamps carrying more than one token from a one-token-per-event
server). Synthetic phase rows and records, expected outcomes derived by hand."""

from __future__ import annotations

from typing import Any

import msgspec

from analysis import timing_trust
from analysis.load import CaseData
from analysis.summaries import case_summary
from loadgen.runformat import CaseInfo, ReadRecord, WorkerPhaseRow
from tests.support.row_builders import phase_row, record

S = 1_000_000_000


def _row(phase: str = "p", **fields: Any) -> Any:
    return phase_row(phase=phase, start_ns=0, last_end_ns=S, end_ns=S, **fields)


def _stream(i: int, phase: str, tokens: list[int], timing: str = "usage") -> ReadRecord:
    """Request ``i`` of ``phase`` whose stamps carried ``tokens`` tokens each, 10 ms apart."""
    stamps = [i * S + 10_000_000 * (k + 1) for k in range(len(tokens))]
    return record(**{
        "request_id": f"{phase}-{i}", "phase": phase, "index": i, "status": "ok",
        "max_tokens": sum(tokens), "sent_ns": i * S, "chunk_ns": stamps,
        "chunk_tokens": tokens, "token_timing": timing, "end_ns": stamps[-1],
        "usage_completion_tokens": sum(tokens),
    })  # fmt: skip


def _phase_of_100_stamps(phase: str, coalesced: int) -> list[ReadRecord]:
    """10 requests × 10 stamps = 100 stamps, the first ``coalesced`` requests with one stamp
    of 2 tokens (two events read at once)."""
    return [_stream(i, phase, [2] + [1] * 9 if i < coalesced else [1] * 10) for i in range(10)]


def test_loop_lag_above_one_ms_warns_at_one_ms_does_not() -> None:
    lagged = timing_trust.warnings([_row("a", loop_lag_p99_ms=1.5)], [])
    assert len(lagged) == 1
    assert lagged[0].startswith("phase a: client timings not to be trusted")
    assert "lagged p99 1.50 ms (above 1 ms)" in lagged[0]
    # Exactly at the threshold, or no lag recorded (a cut phase): nothing.
    assert timing_trust.warnings([_row("a", loop_lag_p99_ms=1.0), _row("b")], []) == []


def test_with_workers_the_worst_workers_lag_counts() -> None:
    worker = {"node": "h", "requests": 1, "statuses": {"ok": 1}, "loop_lag_max_ms": 9.0,
              "late_sends": 0, "warmup_connections": 0, "warmup_opened": 0,
              "warmup_failed": 0, "warmup_ms": 0.0}  # fmt: skip
    workers = [
        msgspec.convert({"worker": 0, "loop_lag_p99_ms": 0.4, **worker}, WorkerPhaseRow),
        msgspec.convert({"worker": 1, "loop_lag_p99_ms": 2.0, **worker}, WorkerPhaseRow),
    ]
    row = _row("p", loop_lag_p99_ms=0.4, workers=[msgspec.to_builtins(w) for w in workers])
    assert timing_trust.phase_loop_lag_p99_ms(row) == 2.0
    [line] = timing_trust.warnings([row], [])
    assert "lagged p99 2.00 ms" in line


def test_coalesced_stamps_above_one_percent_warn() -> None:
    # Phase p: 2 of its 100 stamps carried 2 tokens: 2 % > 1 % → warned. Phase q: 1 of 100:
    # exactly 1 %, not above → no warning.
    records = _phase_of_100_stamps("p", 2) + _phase_of_100_stamps("q", 1)
    assert timing_trust.coalesced_stamps(records) == {"p": (100, 2), "q": (100, 1)}
    [line] = timing_trust.warnings([_row("p"), _row("q")], records)
    assert line.startswith("phase p: client timings not to be trusted: 2.0% of token stamps "
                           "(2 of 100) carried more than one token")  # fmt: skip


def test_speculative_decoding_and_final_only_records_are_not_coalescing() -> None:
    records = _phase_of_100_stamps("p", 5)
    # A server that decodes speculatively sends several tokens per event: no warning, but
    # its loop lag still counts.
    assert timing_trust.multi_token_events(["kv_cache_usage", "spec_decode_num_drafts_total"])
    assert not timing_trust.multi_token_events(["kv_cache_usage"])
    [line] = timing_trust.warnings([_row("p", loop_lag_p99_ms=3.0)], records, multi_token=True)
    assert "lagged p99 3.00 ms" in line
    # A buffered response (all 8 tokens in one chunk, final_only) has its own warning; it
    # does not count here: 0 of the phase's stamps are counted.
    buffered = [_stream(0, "p", [8], timing="final_only")]
    assert timing_trust.coalesced_stamps(buffered) == {}


def test_the_case_summary_lists_the_warnings_under_data_quality() -> None:
    # Phase p: 3 of 100 stamps coalesced (3 %) and loop lag p99 1.2 ms: both warned, in
    # that order, after the generic findings (none here).
    records = _phase_of_100_stamps("p", 3)
    rows = [phase_row(phase="p", start_ns=0, last_end_ns=10 * S, end_ns=10 * S,
                      loop_lag_p99_ms=1.2, loop_lag_max_ms=4.0)]  # fmt: skip
    summary = case_summary(CaseData("c", CaseInfo(), records, rows, [], []))
    trust = [x for x in summary.data_quality if "not to be trusted" in x]
    assert len(trust) == 2
    assert "lagged p99 1.20 ms" in trust[0]
    assert "3.0% of token stamps (3 of 100)" in trust[1]
