"""Pure reading of a scrape index (``scrapes.jsonl`` entries): tick counts, gaps, staleness.

The entries are the rows the scraper writes (``metrics.rows.ScrapeTick``); whoever reads the
file passes them in. Nothing here does I/O.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import NamedTuple, get_args

from metrics.rows import ScrapeTick, TickOutcome

OUTCOMES: tuple[TickOutcome, ...] = get_args(TickOutcome)


class TickCounts(NamedTuple):
    """How every tick of a case went.

    Attributes:
        ticks: ticks accounted for (= ok + failed + skipped).
        ok: scrapes that succeeded.
        failed: scrapes that ran and failed.
        skipped: deadlines that passed while the scraper was busy (not run).
        late: run ticks that started more than half an interval after their deadline.
        nan_dropped: NaN/±Inf sample values dropped over all ok scrapes.
        duplicates_dropped: samples dropped over all ok scrapes because the page repeated
            their series (``metrics.parse``).
        negative_dropped: sample values below 0 dropped over all ok scrapes.
    """

    ticks: int
    ok: int
    failed: int
    skipped: int
    late: int
    nan_dropped: int
    duplicates_dropped: int = 0
    negative_dropped: int = 0


def count_ticks(entries: Iterable[ScrapeTick]) -> TickCounts:
    """Counts over a scrape index (see ``TickCounts``)."""
    by = dict.fromkeys(OUTCOMES, 0)
    late = nan = dup = neg = total = 0
    for e in entries:
        total += 1
        if e.outcome in by:
            by[e.outcome] += 1
        late += bool(e.late)
        nan += e.nan_dropped or 0
        dup += e.duplicates_dropped or 0
        neg += e.negative_dropped or 0
    return TickCounts(total, by["ok"], by["failed"], by["skipped"], late, nan, dup, neg)


def size_drops(entries: Iterable[ScrapeTick]) -> int:
    """Scrapes that failed because the answer passed the scraper's size limit (``too_large``)."""
    return sum(1 for e in entries if e.too_large)


def size_drop_warning(entries: Iterable[ScrapeTick]) -> str | None:
    """The warning a reader of the case needs when scrapes were dropped for size, else
    ``None``: those ticks hold no samples, so gauges and counters there come from the others."""
    n = size_drops(entries)
    if not n:
        return None
    return (
        f"{n} /metrics answer(s) larger than the scraper's size limit dropped (failed "
        "scrapes, pages not kept; raise --metrics-max-bytes if the server's page is that big)"
    )


def tick_problems(entries: Sequence[ScrapeTick]) -> list[str]:
    """What is wrong with a scrape index: ticks not exactly 0…N in order (an unknown outcome
    cannot be read: ``ScrapeTick`` refuses it).

    Empty when every tick is accounted for exactly once.
    """
    problems = []
    ticks = [e.tick for e in entries]
    if ticks != list(range(len(entries))):
        expected = range(max(len(entries), max(ticks, default=-1) + 1))
        missing = sorted(set(expected) - set(ticks))
        duplicated = sorted({t for t in ticks if ticks.count(t) > 1})
        problems.append(
            f"scrape ticks are not 0…{len(entries) - 1} in order "
            f"(missing {missing[:10]}, repeated {duplicated[:10]})"
        )
    return problems


def first_ok_start_at_or_after(entries: Iterable[ScrapeTick], t_ns: int) -> int | None:
    """Start (monotonic ns) of the first successful scrape that started at or after ``t_ns``."""
    starts = [
        e.start_ns
        for e in entries
        if e.outcome == "ok" and e.start_ns is not None and e.start_ns >= t_ns
    ]
    return min(starts) if starts else None


def deltas_are_stale(entries: Iterable[ScrapeTick], last_end_ns: int, end_ns: int) -> bool:
    """Whether a phase's counter deltas miss work: no successful scrape started at or after
    its last request ended (``last_end_ns``) and ended by the phase's end (``end_ns``).

    ``counter_delta`` over [start_ns, end_ns] reads the last scrape ending by ``end_ns``; if
    that scrape began before the last request finished, tokens generated after it are not in
    the delta (a generation-token delta once came out 52 % short that way).
    """
    return not any(
        e.outcome == "ok"
        and (e.start_ns if e.start_ns is not None else -1) >= last_end_ns
        and (e.end_ns or end_ns + 1) <= end_ns
        for e in entries
    )


def ok_scrape_ended_in(entries: Iterable[ScrapeTick], start_ns: int, end_ns: int) -> bool:
    """Whether a successful scrape ended in (``start_ns``, ``end_ns``]: the window has a
    reading of its own (``counter_delta`` is ``None`` without one)."""
    return any(
        e.outcome == "ok" and e.end_ns is not None and start_ns < e.end_ns <= end_ns
        for e in entries
    )


def base_scrape_start_ns(entries: Iterable[ScrapeTick], start_ns: int) -> int | None:
    """Start (monotonic ns) of the scrape a window's counter deltas start from: the last
    successful scrape that ended at or before ``start_ns``; ``None`` when there is none."""
    base = [
        (e.end_ns, e.start_ns if e.start_ns is not None else e.end_ns)
        for e in entries
        if e.outcome == "ok" and e.end_ns is not None and e.end_ns <= start_ns
    ]
    return max(base)[1] if base else None
