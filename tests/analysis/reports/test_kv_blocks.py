"""The blocks a request holds from its own token stamps, the peak window, and the scrapes
that looked inside it (``analysis.reports.kv_preemption.kv_blocks``); every figure worked out
by hand below."""

from __future__ import annotations

from typing import Any

import pytest

from analysis.reports.kv_preemption.kv_blocks import blocks_after_token, peak_window, scrapes_inside
from loadgen.runformat import ReadRecord
from tests.support.row_builders import record, scrape


def test_blocks_grow_one_step_after_the_token_that_needs_them() -> None:
    # P = 256, O = 129, B = 128. Before any token: 0 (maybe queued). After token 1 the
    # prefill wrote 256 tokens: 2 blocks. After token 2, 257 tokens written: 3 blocks.
    # After token 128, 383 written: still 3. After token 129 (the last): finished, 0.
    assert blocks_after_token(256, 0, 129, 128) == 0
    assert blocks_after_token(256, 1, 129, 128) == 2
    assert blocks_after_token(256, 2, 129, 128) == 3
    assert blocks_after_token(256, 128, 129, 128) == 3
    assert blocks_after_token(256, 129, 129, 128) == 0
    # P = 255: token 2 brings the written tokens to exactly 256, still 2 blocks.
    assert blocks_after_token(255, 2, 129, 128) == 2
    assert blocks_after_token(255, 3, 129, 128) == 3


def test_blocks_reject_a_token_outside_the_output_and_a_zero_block() -> None:
    with pytest.raises(ValueError, match="token 5 is outside 0…4"):
        blocks_after_token(256, 5, 4, 128)
    with pytest.raises(ValueError, match="block size 0"):
        blocks_after_token(256, 1, 4, 0)


def _request(stamps: list[int], counts: list[int] | None = None, **extra: Any) -> ReadRecord:
    counts = counts or [1] * len(stamps)
    return record(**{"status": "ok", "prompt_tokens_sent": 256, "usage_prompt_tokens": 256,
                     "usage_completion_tokens": sum(counts), "chunk_ns": stamps,
                     "chunk_tokens": counts, **extra})  # fmt: skip


def test_peak_window_is_where_every_request_holds_its_final_blocks() -> None:
    # P = 256, O = 4, B = 128: 2 blocks after token 1, 3 after tokens 2 and 3, 0 after 4.
    # A's tokens at 10, 20, 30, 40; B's at 15, 25, 35, 45. Held together:
    # t=10: 2, t=15: 4, t=20: 5, t=25: 6, t=40: 3 (A done), t=45: 0.
    a, b = _request([10, 20, 30, 40]), _request([15, 25, 35, 45])
    assert peak_window([a, b], 128, 6) == [(25, 40)]
    assert peak_window([a, b], 128, 5) == [(20, 40)]
    assert peak_window([a, b], 128, 7) == []


def test_peak_window_counts_tokens_per_chunk_and_ignores_failed_requests() -> None:
    # C: 1 token at 10 (2 blocks), then 3 at 20: its 4th and last, so 0 from 20 on.
    # D: tokens at 12, 14, 16, 30 (2, 3, 3, 0). Together: 10: 2, 12: 4, 14: 5, 20: 3, 30: 0.
    # E failed: whatever it received is not counted.
    c = _request([10, 20], [1, 3])
    d = _request([12, 14, 16, 30])
    e = _request([11, 13], status="error")
    assert peak_window([c, d, e], 128, 5) == [(14, 20)]


def test_peak_window_splits_where_the_demand_dips_and_comes_back() -> None:
    # F: tokens at 10, 20, 30, 40 (2, 3, 3, 0); G starts later: 50, 60, 70, 80.
    # Level 3 holds over [20, 40) and again over [60, 80).
    f, g = _request([10, 20, 30, 40]), _request([50, 60, 70, 80])
    assert peak_window([f, g], 128, 3) == [(20, 40), (60, 80)]


def test_scrapes_inside_must_be_sent_and_answered_within_one_interval() -> None:
    window = [(25, 40), (60, 80)]
    scrapes = [
        scrape(**{"scrape": 0, "outcome": "ok", "start_ns": 26, "end_ns": 30}),  # inside
        scrape(**{"scrape": 1, "outcome": "ok", "start_ns": 24, "end_ns": 30}),  # sent before
        scrape(**{"scrape": 2, "outcome": "ok", "start_ns": 38, "end_ns": 41}),  # answered after
        scrape(**{"scrape": 3, "outcome": "failed", "start_ns": 30, "end_ns": 32}),  # no sample
        scrape(**{"scrape": 4, "outcome": "ok", "start_ns": 35, "end_ns": 65}),  # spans the dip
        scrape(
            **{"scrape": 5, "outcome": "ok", "start_ns": 60, "end_ns": 80}
        ),  # exactly the interval
        scrape(tick=9, outcome="skipped", deadline_ns=70),
    ]
    assert scrapes_inside(scrapes, window) == [0, 5]
