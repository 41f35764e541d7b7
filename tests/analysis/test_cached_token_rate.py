"""``analysis.summaries``: the cached-token rate of a phase comes only from the successful
requests that reported cached tokens, numerator and denominator alike."""

from __future__ import annotations

from analysis.latency import request_frame
from analysis.load import CaseData
from analysis.summaries import phase_summary
from loadgen.runformat import CaseInfo, ReadRecord
from tests.support.row_builders import phase_row, record

S = 1_000_000_000


def _rec(i: int, phase: str, status: str, cached: int | None) -> ReadRecord:
    ok = status == "ok"
    return record(**{
        "request_id": f"{phase}-{i}", "phase": phase, "index": i, "status": status,
        "prompt_tokens_sent": 20, "max_tokens": 2, "sent_ns": i * S,
        "chunk_ns": [i * S + 10, i * S + 20] if ok else [], "chunk_tokens": [1, 1] if ok else [],
        "end_ns": i * S + 30, "cached_tokens": cached,
    })  # fmt: skip


ROWS = phase_row(phase="p", start_ns=0, last_end_ns=4 * S, end_ns=5 * S)


def test_only_successful_requests_that_reported_count_on_both_sides() -> None:
    # ok 16/20, ok 8/20, ok without a count, a failed request (429) with its 20 prompt tokens:
    # (16 + 8) / (20 + 20) = 0.6. Counting every request's prompt tokens gave 24 / 80 = 0.3.
    records = [_rec(0, "p", "ok", 16), _rec(1, "p", "ok", 8), _rec(2, "p", "ok", None),
               _rec(3, "p", "error", None)]  # fmt: skip
    case = CaseData("c", CaseInfo(), records, [ROWS], [], [])
    p = phase_summary(case, ROWS, request_frame(records))
    assert (p.cached_tokens, p.cached_reported, p.cached_prompt_tokens) == (24, 2, 40)
    assert p.cached_token_rate == 0.6
    assert p.prompt_tokens == 80  # every request's, sent or not, as before


def test_a_phase_where_no_request_reported_has_no_rate_not_zero() -> None:
    for records in ([_rec(0, "p", "error", None), _rec(1, "p", "error", None)],
                    [_rec(0, "p", "ok", None)]):  # fmt: skip
        case = CaseData("c", CaseInfo(), records, [ROWS], [], [])
        p = phase_summary(case, ROWS, request_frame(records))
        assert (p.cached_tokens, p.cached_reported, p.cached_token_rate) == (None, 0, None)
