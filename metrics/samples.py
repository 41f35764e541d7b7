"""Metric samples and pure arithmetic over them: per-window counter deltas and gauge peaks.

A sample is an immutable ``Sample`` tuple. A series is the samples of one canonical name and
one label set, sorted by time. Windows are [start_ns, end_ns] on the monotonic clock.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Sequence
from typing import NamedTuple


class Sample(NamedTuple):
    """One value of one series at one scrape.

    Attributes:
        t_ns: scrape end time (monotonic ns): the value was true at or before this time.
        name: canonical metric name (see ``metrics.names``).
        labels: sorted (key, value) pairs.
        value: the sample value (gauge fraction, counter count).
    """

    t_ns: int
    name: str
    labels: tuple[tuple[str, str], ...]
    value: float


Point = tuple[int, float]  # (t_ns, value)


def series(samples: Iterable[Sample], name: str, **labels: str) -> list[Point]:
    """Points of ``name`` summed over every label set matching ``labels``, by scrape time.

    Summing over unmatched labels gives e.g. total ``request_success`` over finish reasons.
    Counters must be summed per scrape (same ``t_ns``), which this does.
    """
    wanted = set(labels.items())
    by_time: dict[int, float] = {}
    for s in samples:
        if s.name == name and wanted <= set(s.labels):
            by_time[s.t_ns] = by_time.get(s.t_ns, 0.0) + s.value
    return sorted(by_time.items())


def _index_at_or_before(points: Sequence[Point], t_ns: int) -> int:
    """Index of the last point with time ≤ t_ns, or -1."""
    times = [p[0] for p in points]
    return bisect.bisect_right(times, t_ns) - 1


def counter_delta(points: Sequence[Point], start_ns: int, end_ns: int) -> float | None:
    """Increase of a counter over a window, surviving resets.

    delta = sum of increments from the last point at or before ``start_ns`` to the last
    point at or before ``end_ns`` (SCENARIOS.md §3). A decrease means the counter restarted
    from zero (server restart), so the increment across it is the new value itself: the
    increments on both sides of a reset are kept, never dropped.

    Returns ``None`` when no point lies at or before ``end_ns``. When no point precedes
    ``start_ns`` the first point in the window is the base (the earlier part is unknown).
    """
    if not points:
        return None
    last = _index_at_or_before(points, end_ns)
    if last < 0:
        return None
    first = _index_at_or_before(points, start_ns)
    if first < 0:
        first = 0
    total = 0.0
    for i in range(first + 1, last + 1):
        prev, cur = points[i - 1][1], points[i][1]
        total += cur - prev if cur >= prev else cur
    return total


def gauge_peak(points: Sequence[Point], start_ns: int, end_ns: int) -> float | None:
    """Largest sampled value within [start_ns, end_ns]; ``None`` if no point lies there.

    A sampled peak is a lower bound of the true peak (the gauge may spike between scrapes).
    """
    values = [v for t, v in points if start_ns <= t <= end_ns]
    return max(values) if values else None


def value_at(points: Sequence[Point], t_ns: int) -> float | None:
    """The last value at or before ``t_ns`` (lifetime counter value at a time), or ``None``."""
    i = _index_at_or_before(points, t_ns)
    return points[i][1] if i >= 0 else None
