"""analysis.latency: TTFT/TPOT/E2EL per request, ITL per token and per chunk, token timing,
summary stats."""

from __future__ import annotations

import math

import numpy as np
import pytest

from analysis.latency import (
    chunk_gaps,
    describe,
    itl_per_token_ms,
    request_frame,
    token_timing,
    tokens_per_chunk,
)
from loadgen.runformat import ReadRecord
from tests.support.row_builders import record

MS = 1_000_000


def rec(sent: int | None, chunks_ms: list[int], tokens: list[int], **kw: object) -> ReadRecord:
    return record(
        **{
            "request_id": "r",
            "sent_ns": sent,
            "chunk_ns": [c * MS for c in chunks_ms],
            "chunk_tokens": tokens,
            **kw,
        }
    )


def test_a_case_with_no_records_has_every_column_of_one_that_has_some() -> None:
    # A case that failed before sending (its replicas did not start) has no records; every
    # report selects on the record's columns (a trace-replay report of such a run failed
    # with KeyError: 'index'), so the empty frame has them all and selections find no row.
    empty = request_frame([])
    full = request_frame([record()])
    assert list(empty.columns) == list(full.columns)
    assert empty[empty["index"].isin([0]) & empty["sent_ns"].notna()].empty


def test_ttft_e2el_tpot_from_token_chunks() -> None:
    # Sent at 0; chunks at 100, 130, 170 ms carrying 1, 1, 2 tokens → 4 tokens.
    # TTFT = 100 ms, E2EL = 170 ms, TPOT = (170 − 100) / (4 − 1) = 23.333 ms.
    row = request_frame([rec(0, [100, 130, 170], [1, 1, 2])]).iloc[0]
    assert row["output_tokens"] == 4
    assert row["ttft_ms"] == 100.0
    assert row["e2el_ms"] == 170.0
    assert row["tpot_ms"] == pytest.approx(70 / 3)


def test_stamps_are_relative_to_the_send_time() -> None:
    # Sent at 5 s; first chunk 5 s + 40 ms, last 5 s + 90 ms, 6 tokens → TPOT 50/5 = 10 ms.
    sent = 5_000 * MS
    row = request_frame([rec(sent, [5_040, 5_060, 5_090], [1, 2, 3])]).iloc[0]
    assert (row["ttft_ms"], row["e2el_ms"], row["tpot_ms"]) == (40.0, 90.0, 10.0)


def test_single_token_output_has_no_tpot() -> None:
    row = request_frame([rec(0, [80], [1])]).iloc[0]
    assert row["ttft_ms"] == row["e2el_ms"] == 80.0
    assert math.isnan(row["tpot_ms"])


def test_one_chunk_with_several_tokens_has_zero_tpot() -> None:
    # All 3 tokens in one chunk: E2EL = TTFT, TPOT = 0 / 2 = 0.
    row = request_frame([rec(0, [50], [3])]).iloc[0]
    assert row["tpot_ms"] == 0.0


def test_no_token_or_never_sent_gives_nan_latencies() -> None:
    frame = request_frame([rec(0, [], [], status="error"), rec(None, [], [], status="not_sent")])
    assert frame["output_tokens"].tolist() == [0, 0]
    for col in ("ttft_ms", "e2el_ms", "tpot_ms"):
        assert frame[col].isna().all()
    assert frame["status"].tolist() == ["error", "not_sent"]  # record fields are kept


def test_chunk_gaps_keep_tokens_of_the_later_chunk() -> None:
    records = [rec(0, [100, 130, 170], [1, 1, 2]), rec(0, [10, 25], [1, 3]), rec(0, [7], [1])]
    gaps, tokens = chunk_gaps(records)
    assert gaps.tolist() == [30.0, 40.0, 15.0]
    assert tokens.tolist() == [1, 2, 3]


def test_a_chunk_of_four_tokens_60_ms_after_the_last_gives_four_itl_values_of_15_ms() -> None:
    # Chunks at 100 ms (1 token) and 160 ms (4 tokens: a step that accepted 3 drafts):
    # ITL per token = 60 / 4 = 15 ms, four times; the chunk gap (per step) stays 60 ms.
    records = [rec(0, [100, 160], [1, 4])]
    assert itl_per_token_ms(records).tolist() == [15.0, 15.0, 15.0, 15.0]
    assert chunk_gaps(records)[0].tolist() == [60.0]
    assert tokens_per_chunk(records).tolist() == [1.0, 4.0]


def test_itl_per_token_over_several_records() -> None:
    # Gaps 30 (1 token), 40 (2 tokens) → 30, 20, 20; gap 15 (3 tokens) → 5, 5, 5.
    records = [rec(0, [100, 130, 170], [1, 1, 2]), rec(0, [10, 25], [1, 3])]
    assert itl_per_token_ms(records).tolist() == [30.0, 20.0, 20.0, 5.0, 5.0, 5.0]


def test_token_timing_flags_a_record_whose_tokens_all_came_in_one_chunk() -> None:
    assert token_timing(rec(0, [50], [16])) == "final_only"  # TTFT would equal E2EL
    assert token_timing(rec(0, [50], [1])) == "usage"  # a 1-token answer is fine
    assert token_timing(rec(0, [50, 60], [1, 1], token_timing="text")) == "text"
    assert token_timing(rec(0, [], [])) is None


def test_describe_matches_numpy_linear_percentiles() -> None:
    values = [1.0, 2.0, 3.0, 4.0, 10.0]
    # Linear interpolation at rank p/100 × (n − 1) over the sorted values:
    # p50: rank 2 → 3; p90: rank 3.6 → 4 + 0.6 × 6 = 7.6; p95: rank 3.8 → 8.8;
    # p99: rank 3.96 → 9.76. Mean 4; population std sqrt((9+4+1+0+36)/5) = sqrt(10).
    stats = describe(values)
    assert stats["count"] == 5
    assert stats["mean"] == 4.0
    assert stats["std"] == pytest.approx(math.sqrt(10))
    assert stats["p50"] == 3.0
    assert stats["p90"] == pytest.approx(7.6)
    assert stats["p95"] == pytest.approx(8.8)
    assert stats["p99"] == pytest.approx(9.76)
    expected = np.percentile(values, [50, 90, 95, 99])
    assert [stats[k] for k in ("p50", "p90", "p95", "p99")] == pytest.approx(expected.tolist())


def test_describe_drops_nan_and_none() -> None:
    stats = describe([float("nan"), 2.0, None, 4.0])  # type: ignore[list-item]
    assert stats["count"] == 2
    assert stats["mean"] == 3.0
    assert stats["p50"] == 3.0


def test_describe_of_nothing_is_all_none() -> None:
    assert describe([float("nan")]) == {
        "count": 0,
        "mean": None,
        "std": None,
        "p50": None,
        "p90": None,
        "p95": None,
        "p99": None,
    }
