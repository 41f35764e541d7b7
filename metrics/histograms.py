"""Server-side histograms over a window: bucket deltas, quantiles, means (pure functions).

vLLM exposes its request latencies (TTFT, ITL, TPOT, E2E, queue, prefill, decode) as
Prometheus histograms: cumulative bucket counters ``NAME_bucket{le=…}`` plus ``NAME_sum`` and
``NAME_count`` (canonical names in ``metrics.names``). A window's histogram is the counter
delta of each of them (``metrics.samples.counter_delta``, so resets are survived), summed over
engines; its quantiles follow Prometheus' ``histogram_quantile`` (promql/quantile.go).

A histogram is usable only as the exposition format defines it (prometheus.io/docs/concepts/
metric_types, "Histogram"): at every scrape and for every series, ``le`` bounds that are
numbers, a ``+Inf`` bucket, cumulative counts that never fall as ``le`` grows, ``_sum`` and
``_count`` beside the buckets, and the same bounds at every scrape and in every series (a
bucket that appears or vanishes mid-run makes its deltas meaningless, and series are summed
over engines bucket by bucket). ``histogram_problem`` says what is wrong with
one that is not; ``histogram_delta`` refuses it with ``MalformedHistogramError``.
"""

from __future__ import annotations

import bisect
import itertools
import math
from collections.abc import Iterable
from dataclasses import dataclass

from metrics.samples import Sample, counter_delta, require_family, series


@dataclass(frozen=True)
class HistogramDelta:
    """Change of one histogram family over a window, summed over engines and other labels.

    Attributes:
        bounds: bucket upper bounds ascending, ``math.inf`` last (seconds for latencies).
        cumulative: observations ≤ each bound during the window (cumulative count deltas),
            one per bound; the last is the window's observation count.
        sum: increase of ``_sum`` (seconds for latencies).
        count: increase of ``_count``.
    """

    bounds: tuple[float, ...]
    cumulative: tuple[float, ...]
    sum: float
    count: float


class MalformedHistogramError(ValueError):
    """A histogram family breaks the exposition format's histogram rules (module docstring);
    ``reason`` says which rule and where. Its figures cannot be computed."""

    def __init__(self, family: str, reason: str) -> None:
        super().__init__(f"histogram {family}: {reason}")
        self.family = family
        self.reason = reason


def _le(value: str) -> float:
    """A bucket's upper bound from its ``le`` text (``+Inf`` → inf).

    Raises:
        ValueError: not a number (NaN included).
    """
    bound = float(value)  # accepts "+Inf", "Inf", "inf"
    if math.isnan(bound):
        raise ValueError(f"le={value!r} is not a number")
    return bound


Labels = tuple[tuple[str, str], ...]


def histogram_problem(samples: Iterable[Sample], family: str) -> str | None:
    """What makes canonical histogram ``family`` unusable (the rules of the module docstring),
    checked at every scrape for every series (label set without ``le``); ``None`` when it is
    well-formed or absent (absence is ``require_family``'s concern)."""
    buckets: dict[tuple[int, Labels], list[tuple[str, float]]] = {}
    sums: set[tuple[int, Labels]] = set()
    counts: set[tuple[int, Labels]] = set()
    for s in samples:
        if s.name == family + "_bucket":
            others = dict(s.labels)
            le = others.pop("le", None)
            if le is None:
                return "a _bucket sample has no le label"
            buckets.setdefault((s.t_ns, tuple(sorted(others.items()))), []).append((le, s.value))
        elif s.name == family + "_sum":
            sums.add((s.t_ns, s.labels))
        elif s.name == family + "_count":
            counts.add((s.t_ns, s.labels))
    if not buckets:
        return "_sum/_count without any _bucket sample" if sums or counts else None
    bounds_of: dict[Labels, list[str]] = {}
    for (t_ns, labels), items in sorted(buckets.items()):
        try:
            ordered = sorted((_le(le), le, value) for le, value in items)
        except ValueError as exc:
            return f"a bucket bound is unparsable ({exc})"
        if ordered[-1][0] != math.inf:
            return 'no +Inf bucket (le="+Inf"), so its observation count is unknown'
        for (b0, le0, v0), (b1, le1, v1) in itertools.pairwise(ordered):
            if b1 == b0:
                return f"two buckets share the bound {b0:g} (le={le0!r}, le={le1!r})"
            if v1 < v0:
                return (
                    f"buckets are not cumulative: le={le1} holds {v1:g}, less than "
                    f"le={le0} ({v0:g}) at one scrape"
                )
        if (t_ns, labels) not in counts or (t_ns, labels) not in sums:
            missing = " and ".join(
                n for n, have in (("_sum", sums), ("_count", counts)) if (t_ns, labels) not in have
            )
            return f"no {missing} beside its buckets"
        les = [le for _, le, _ in ordered]
        first = bounds_of.setdefault(labels, les)
        if les != first:
            return f"its bucket bounds changed between scrapes ({first} → {les})"
    # Windows sum buckets over series (engines): that needs the same bounds in each.
    series_bounds = list(bounds_of.items())
    labels_a, les_a = series_bounds[0]
    for labels_b, les_b in series_bounds[1:]:
        if les_b != les_a:
            return (
                f"its series have different bucket bounds ({dict(labels_a)}: {les_a}; "
                f"{dict(labels_b)}: {les_b}), so they cannot be summed"
            )
    return None


def histogram_delta(
    samples: Iterable[Sample], family: str, start_ns: int, end_ns: int, **labels: str
) -> HistogramDelta | None:
    """Bucket, sum and count deltas of canonical histogram ``family`` over [start_ns, end_ns].

    Each cumulative bucket is a counter: its delta is ``counter_delta`` of its series summed
    over every label set matching ``labels`` (engines included) per scrape. Returns ``None``
    when no scrape lies at or before ``end_ns`` (nothing known about the window).

    The window's samples are not checked against every rule here (that is
    ``histogram_problem``'s job, run once per case); only what the arithmetic needs.

    Raises:
        MissingFamilyError: the family has no sample at all (never a silent 0).
        MalformedHistogramError: no ``+Inf`` bucket or an unparsable ``le`` (not valid
            exposition).
    """
    samples = list(samples)
    require_family(samples, family)
    wanted = set(labels.items())
    # One pass: per bucket bound, that bucket's value summed per scrape time.
    by_le: dict[str, dict[int, float]] = {}
    for s in samples:
        if s.name != family + "_bucket":
            continue
        label_set = set(s.labels)
        if not wanted <= label_set:
            continue
        le = dict(s.labels).get("le")
        if le is None or not math.isfinite(s.value):
            continue
        points = by_le.setdefault(le, {})
        points[s.t_ns] = points.get(s.t_ns, 0.0) + s.value
    try:
        ordered = sorted(by_le, key=_le)
    except ValueError as exc:
        raise MalformedHistogramError(family, f"a bucket bound is unparsable ({exc})") from None
    if not ordered or _le(ordered[-1]) != math.inf:
        raise MalformedHistogramError(family, 'no +Inf bucket (le="+Inf")')
    cumulative = []
    for le in ordered:
        delta = counter_delta(sorted(by_le[le].items()), start_ns, end_ns)
        if delta is None:
            return None
        cumulative.append(delta)
    total_sum = counter_delta(series(samples, family + "_sum", **labels), start_ns, end_ns)
    count = counter_delta(series(samples, family + "_count", **labels), start_ns, end_ns)
    if total_sum is None or count is None:
        return None
    return HistogramDelta(tuple(_le(le) for le in ordered), tuple(cumulative), total_sum, count)


def _monotonic(cumulative: tuple[float, ...]) -> list[float]:
    # Prometheus forces cumulative counts to be non-decreasing (buckets are scraped at
    # slightly different instants, or reset at different times); so do we.
    out: list[float] = []
    for c in cumulative:
        out.append(max(c, out[-1]) if out else c)
    return out


def _rank_bucket(q: float, delta: HistogramDelta) -> tuple[int, float, list[float]] | None:
    """(index of the bucket holding the ``q``-quantile's rank, that rank, the monotonic
    cumulative counts), as Prometheus finds it: the first bucket whose cumulative count reaches
    rank = q × observations. ``None`` when the window has no observation or fewer than two
    buckets.

    Raises:
        ValueError: ``q`` outside [0, 1].
    """
    if not 0.0 <= q <= 1.0:
        raise ValueError(f"quantile must be in [0, 1], got {q}")
    bounds = delta.bounds
    cumulative = _monotonic(delta.cumulative)
    if len(bounds) < 2 or bounds[-1] != math.inf or cumulative[-1] <= 0:
        return None
    rank = q * cumulative[-1]
    return bisect.bisect_left(cumulative, rank, 0, len(cumulative) - 1), rank, cumulative


def histogram_quantile(q: float, delta: HistogramDelta) -> float | None:
    """The ``q``-quantile of the window's observations, as Prometheus' ``histogram_quantile``.

    rank = q × (observations in the window, the ``+Inf`` bucket's count); the quantile lies in
    the first bucket whose cumulative count reaches the rank and is interpolated linearly
    inside it, from the previous bound (0 for the first bucket) to its own. A rank in the
    ``+Inf`` bucket returns the largest finite bound (a lower bound of the true value; see
    ``quantile_in_overflow``). ``None`` when the window has no observation or fewer than two
    buckets. The interpolation assumes observations spread evenly inside the bucket: the
    value is only known to lie in the bucket (``quantile_bucket``).

    Raises:
        ValueError: ``q`` outside [0, 1].
    """
    found = _rank_bucket(q, delta)
    if found is None:
        return None
    b, rank, cumulative = found
    bounds = delta.bounds
    if b == len(bounds) - 1:
        return bounds[-2]
    if b == 0 and bounds[0] <= 0:
        return bounds[0]
    start, end, count = 0.0, bounds[b], cumulative[b]
    if b > 0:
        start = bounds[b - 1]
        count -= cumulative[b - 1]
        rank -= cumulative[b - 1]
    if count <= 0:  # only q = 0 over an empty first bucket
        return start
    return start + (end - start) * (rank / count)


def quantile_bucket(q: float, delta: HistogramDelta) -> tuple[float, float] | None:
    """(lower, upper) bound of the bucket holding the ``q``-quantile: all a histogram says
    about it (the true value lies in (lower, upper]). The first bucket's lower bound is 0 (as
    ``histogram_quantile`` interpolates from 0; ``-inf`` when its own bound is ≤ 0); a rank in
    the ``+Inf`` bucket gives (largest finite bound, ``math.inf``). ``None`` as
    ``histogram_quantile``.

    Raises:
        ValueError: ``q`` outside [0, 1].
    """
    found = _rank_bucket(q, delta)
    if found is None:
        return None
    b = found[0]
    bounds = delta.bounds
    if b > 0:
        return bounds[b - 1], bounds[b]
    return (0.0 if bounds[0] > 0 else -math.inf), bounds[0]


def quantile_in_overflow(q: float, delta: HistogramDelta) -> bool:
    """Whether the ``q``-quantile's rank falls in the ``+Inf`` bucket (its value is a floor)."""
    cumulative = _monotonic(delta.cumulative)
    if len(cumulative) < 2 or cumulative[-1] <= 0:
        return False
    return q * cumulative[-1] > cumulative[-2]


def mean_s(delta: HistogramDelta) -> float | None:
    """Mean observation over the window, ``sum / count``; ``None`` when nothing was observed."""
    return delta.sum / delta.count if delta.count > 0 else None
