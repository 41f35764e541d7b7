"""Metric samples and pure arithmetic over them: series, counter deltas and resets, gauge peaks.

A sample is an immutable ``Sample`` tuple. A series is a list of ``(t_ns, value)`` points of
one canonical name, sorted by time. Windows are [start_ns, end_ns] on the monotonic clock.
Non-finite values never come from the parser; the functions here skip them anyway, so a NaN
can neither poison a delta nor hide a peak.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Iterable, Sequence
from typing import NamedTuple

from metrics.names import HISTOGRAM_SUFFIXES, MissingFamilyError


class Sample(NamedTuple):
    """One value of one series at one scrape.

    Attributes:
        t_ns: scrape end time (monotonic ns): the value was true at or before this time.
        name: canonical sample name (see ``metrics.names``; histograms as ``NAME_bucket``,
            ``NAME_sum``, ``NAME_count``).
        labels: sorted (key, value) pairs, every label of the exposition kept (``engine``,
            ``model_name``, ``finished_reason``, a bucket's ``le``, …).
        value: the sample value (gauge fraction, counter count), finite.
    """

    t_ns: int
    name: str
    labels: tuple[tuple[str, str], ...]
    value: float


Point = tuple[int, float]  # (t_ns, value)


def series(samples: Iterable[Sample], name: str, **labels: str) -> list[Point]:
    """Points of ``name`` summed over every label set matching ``labels``, by scrape time.

    Summing over unmatched labels gives e.g. total ``request_success`` over finish reasons and
    engines: right for counters (one scrape reads every engine at one ``t_ns``), wrong for a
    gauge such as ``kv_cache_usage_perc`` across engines (use ``series_by``).
    """
    wanted = set(labels.items())
    by_time: dict[int, float] = {}
    for s in samples:
        if s.name == name and wanted <= set(s.labels) and math.isfinite(s.value):
            by_time[s.t_ns] = by_time.get(s.t_ns, 0.0) + s.value
    return sorted(by_time.items())


def series_by(
    samples: Iterable[Sample], name: str, label: str = "engine", **labels: str
) -> dict[str, list[Point]]:
    """One series per value of ``label`` (summed over the other labels matching ``labels``).

    Samples without ``label`` (e.g. vLLM's V0 engine has no ``engine`` label) go under ``""``.
    Returns ``{label value: points}`` sorted by label value.
    """
    wanted = set(labels.items())
    by_key: dict[str, dict[int, float]] = {}
    for s in samples:
        if s.name == name and wanted <= set(s.labels) and math.isfinite(s.value):
            key = dict(s.labels).get(label, "")
            points = by_key.setdefault(key, {})
            points[s.t_ns] = points.get(s.t_ns, 0.0) + s.value
    return {key: sorted(by_key[key].items()) for key in sorted(by_key)}


def require_family(samples: Iterable[Sample], canonical: str) -> None:
    """Check that family ``canonical`` has at least one sample.

    Raises:
        MissingFamilyError: no sample of it (the server exposes none of its aliases), so any
            figure from it would be a silent 0.
    """
    names = {canonical, *(canonical + suffix for suffix in HISTOGRAM_SUFFIXES)}
    if not any(s.name in names for s in samples):
        raise MissingFamilyError(canonical)


def _finite(points: Sequence[Point]) -> list[Point]:
    return [p for p in points if math.isfinite(p[1])]


def _index_at_or_before(points: Sequence[Point], t_ns: int) -> int:
    """Index of the last point with time ≤ t_ns, or -1."""
    times = [p[0] for p in points]
    return bisect.bisect_right(times, t_ns) - 1


def _increment_range(points: Sequence[Point], start_ns: int, end_ns: int) -> range | None:
    """Indices i whose step points[i-1] → points[i] lies in the window; ``None`` when no
    point after the base lies at or before ``end_ns`` (nothing was read inside the window).

    The base is the last point at or before ``start_ns``, or the first point when none
    precedes the window.
    """
    last = _index_at_or_before(points, end_ns)
    first = max(_index_at_or_before(points, start_ns), 0)
    if last <= first:
        return None
    return range(first + 1, last + 1)


def counter_delta(points: Sequence[Point], start_ns: int, end_ns: int) -> float | None:
    """Increase of a counter over a window, surviving resets.

    delta = sum of increments from the last point at or before ``start_ns`` to the last
    point at or before ``end_ns`` (a phase's claims use deltas, never lifetime totals). A
    decrease means the counter restarted from zero (server restart), so the increment across
    it is the new value itself: the increments on both sides of a reset are kept, never
    dropped (Prometheus ``increase()`` does the same). ``counter_resets`` lists those decreases.

    Returns ``None`` when the counter was not read inside the window: no point lies in
    (base, ``end_ns``], so the end would be read from the same point as the start and the
    delta would be a made-up 0 (scrapes that failed all through the phase). When no point
    precedes ``start_ns`` the first point in the window is the base (the earlier part is
    unknown), so a single point in the window is ``None`` too. Non-finite points are ignored.
    """
    points = _finite(points)
    steps = _increment_range(points, start_ns, end_ns)
    if steps is None:
        return None
    total = 0.0
    for i in steps:
        prev, cur = points[i - 1][1], points[i][1]
        total += cur - prev if cur >= prev else cur
    return total


def counter_resets(points: Sequence[Point], start_ns: int, end_ns: int) -> list[int]:
    """Times (t_ns) of the decreases that ``counter_delta`` treats as resets in this window."""
    points = _finite(points)
    steps = _increment_range(points, start_ns, end_ns)
    if steps is None:
        return []
    return [points[i][0] for i in steps if points[i][1] < points[i - 1][1]]


def gauge_peak(points: Sequence[Point], start_ns: int, end_ns: int) -> float | None:
    """Largest sampled value within [start_ns, end_ns]; ``None`` if no finite point lies there.

    A sampled peak is a lower bound of the true peak (the gauge may spike between scrapes).
    """
    values = [v for t, v in points if start_ns <= t <= end_ns and math.isfinite(v)]
    return max(values) if values else None


def gauge_peak_by(
    samples: Iterable[Sample],
    name: str,
    start_ns: int,
    end_ns: int,
    label: str = "engine",
    **labels: str,
) -> dict[str, float]:
    """Sampled peak of gauge ``name`` within the window per value of ``label`` (``series_by``).

    Label values with no point in the window are left out; the overall peak is the ``max`` of
    the values (never their sum: two engines at 0.6 and 0.7 KV usage peak at 0.7).
    """
    peaks = {
        key: gauge_peak(points, start_ns, end_ns)
        for key, points in series_by(samples, name, label, **labels).items()
    }
    return {key: peak for key, peak in peaks.items() if peak is not None}


def value_at(points: Sequence[Point], t_ns: int) -> float | None:
    """The last finite value at or before ``t_ns`` (lifetime counter value), or ``None``."""
    points = _finite(points)
    i = _index_at_or_before(points, t_ns)
    return points[i][1] if i >= 0 else None
