"""metrics.ticks: counts, gaps and stale-delta detection over a scrape index."""

from __future__ import annotations

from typing import Any

from metrics.rows import ScrapeTick
from metrics.ticks import (
    TickCounts,
    count_ticks,
    deltas_are_stale,
    first_ok_start_at_or_after,
    tick_problems,
)


def run(tick: int, outcome: str, start: int, end: int, late: bool = False, **kw: Any) -> ScrapeTick:
    return ScrapeTick(tick=tick, deadline_ns=tick * 10, outcome=outcome, scrape=tick,  # type: ignore[arg-type]
                      start_ns=start, end_ns=end, late=late, **kw)  # fmt: skip


def skipped(tick: int) -> ScrapeTick:
    return ScrapeTick(tick=tick, deadline_ns=tick * 10, outcome="skipped",
                      reason="previous scrape still running")  # fmt: skip


# Interval 10 ns: tick 1's scrape takes 32 ns (ends at 42), so ticks 2–3 are skipped and
# tick 4 (deadline 40) runs at once; tick 5 fails and starts late; tick 6 is ok with 2 NaNs.
INDEX = [
    run(0, "ok", 0, 2, nan_dropped=0),
    run(1, "ok", 10, 42, nan_dropped=1),
    skipped(2),
    skipped(3),
    run(4, "ok", 42, 44, nan_dropped=0),
    run(5, "failed", 57, 58, late=True, error="HTTPStatusError: 503"),
    run(6, "ok", 60, 62, nan_dropped=2),
]


def test_every_outcome_is_counted() -> None:
    assert count_ticks(INDEX) == TickCounts(
        ticks=7, ok=4, failed=1, skipped=2, late=1, nan_dropped=3
    )
    assert tick_problems(INDEX) == []


def test_gaps_and_repeats_are_problems() -> None:
    gap = [INDEX[0], INDEX[1], INDEX[4]]
    assert tick_problems(gap) == ["scrape ticks are not 0…2 in order (missing [2, 3], repeated [])"]
    repeat = [INDEX[0], INDEX[0]]
    assert tick_problems(repeat) == [
        "scrape ticks are not 0…1 in order (missing [1], repeated [0])"
    ]
    # (An unknown outcome is no scrape tick at all: the reader skips and reports its line.)


def test_first_ok_scrape_started_after_a_time() -> None:
    assert first_ok_start_at_or_after(INDEX, 11) == 42  # tick 1 began at 10, too early
    assert first_ok_start_at_or_after(INDEX, 43) == 60  # tick 5 failed
    assert first_ok_start_at_or_after(INDEX, 61) is None


def test_deltas_are_stale_unless_a_scrape_started_after_the_last_request_ended_in_time() -> None:
    # Last request ended at 11: tick 4's scrape (42–44) saw it all if the phase ends by 44.
    assert not deltas_are_stale(INDEX, last_end_ns=11, end_ns=44)
    # Phase ended at 43: the only scrape that started after 11 had not ended yet.
    assert deltas_are_stale(INDEX, last_end_ns=11, end_ns=43)
    # Last request ended at 61: no ok scrape started after it.
    assert deltas_are_stale(INDEX, last_end_ns=61, end_ns=100)
