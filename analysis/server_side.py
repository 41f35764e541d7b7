"""What the server says about a phase: counter deltas, resets, gauge peaks, histogram quantiles.

- **Counter delta** over a phase window = last sample at or before the end − last sample at or
  before the start, summed over every label set (engines, finish reasons); a decrease is a
  reset (server restart) whose increments on both sides are kept (``metrics.samples``).
- **Gauge peak** = the largest sampled value in the window, per engine (``engine`` label);
  the phase's peak is the largest of any engine, never a sum (two engines at 0.6 and 0.7 KV
  usage peak at 0.7). Sampled every scrape, so a lower bound of the true peak.
- **Server histograms**: vLLM's TTFT, inter-token latency, queue, prefill, decode and E2E
  histograms, turned into per-phase quantiles from bucket deltas with Prometheus'
  ``histogram_quantile`` interpolation (``metrics.histograms``).
- **In flight at the server** = ``num_requests_running + num_requests_waiting`` at one scrape,
  summed over engines (every request the server holds); its peak over the phase sits in the
  report beside the concurrency the client asked for, so a cap anywhere between them (a
  connection pool, a proxy) shows as a peak below the request. Sampled: a lower bound.
- **In flight at steady scrapes** = the same sum, only at scrapes that were sent and answered
  inside a window where the client had exactly C requests streaming (``streaming_windows``):
  a short phase's scrapes may all fall in its ramp or drain, where fewer than C exist to see.
- **Deltas flag**: a phase's deltas rest on the last scrape inside its window and start from
  the last one before it; the phase is flagged when no scrape ended inside the window (deltas
  unknown), when none *started* after the last request finished (the tail may be missing), or
  when the starting scrape predates an earlier phase's last request (its tail counted here).
"""

from __future__ import annotations

import math
from collections.abc import Collection, Sequence
from typing import Any

from analysis.load import CaseData
from analysis.models import QuantileBucket, ServerHistogram
from loadgen.runformat import PhaseRow
from metrics.histograms import (
    HistogramDelta,
    MalformedHistogramError,
    histogram_delta,
    histogram_problem,
    histogram_quantile,
    mean_s,
    quantile_bucket,
    quantile_in_overflow,
)
from metrics.names import FAMILIES, MissingFamilyError
from metrics.rows import ScrapeTick
from metrics.samples import (
    Point,
    Sample,
    counter_delta,
    counter_resets,
    gauge_peak,
    series,
    series_by,
)
from metrics.ticks import base_scrape_start_ns, deltas_are_stale, ok_scrape_ended_in

COUNTERS: tuple[str, ...] = tuple(n for n, f in FAMILIES.items() if f.type == "counter")
GAUGES: tuple[str, ...] = tuple(n for n, f in FAMILIES.items() if f.type == "gauge")
#: Histogram families shown beside the client's figures, with the client metric they mirror.
HISTOGRAMS: tuple[tuple[str, str | None], ...] = (
    ("ttft_seconds", "ttft_ms"),
    ("itl_seconds", "itl_ms"),
    ("tpot_seconds", "tpot_ms"),
    ("e2e_latency_seconds", "e2el_ms"),
    ("queue_time_seconds", None),
    ("prefill_time_seconds", None),
    ("decode_time_seconds", None),
)
#: The server histogram quantiles a report shows.
QUANTILES = ("p50", "p90", "p99")


def counter_figures(
    samples: Sequence[Sample], start_ns: int, end_ns: int
) -> tuple[dict[str, float | None], dict[str, int]]:
    """(deltas, resets) of every recorded counter over [start_ns, end_ns]; ``None`` deltas
    where the counter was never sampled; resets only for counters that had one."""
    deltas: dict[str, float | None] = {}
    reset_counts: dict[str, int] = {}
    for name in COUNTERS:
        points = series(samples, name)
        deltas[name] = counter_delta(points, start_ns, end_ns)
        n = len(counter_resets(points, start_ns, end_ns))
        if n:
            reset_counts[name] = n
    return deltas, reset_counts


def gauge_figures(
    samples: Sequence[Sample], start_ns: int, end_ns: int
) -> tuple[dict[str, float | None], dict[str, dict[str, float]], dict[str, int]]:
    """(peak over engines, peak per engine, in-window points of the best-sampled engine) of
    every recorded gauge in [start_ns, end_ns]. The point count says how coarse a sampled peak
    (a lower bound) is: a 1 s phase scraped every 250 ms has about 4."""
    peaks: dict[str, float | None] = {}
    per_engine: dict[str, dict[str, float]] = {}
    counts: dict[str, int] = {}
    for name in GAUGES:
        series = series_by(samples, name)
        engines = {
            engine: peak
            for engine, points in series.items()
            if (peak := gauge_peak(points, start_ns, end_ns)) is not None
        }
        peaks[name] = max(engines.values()) if engines else None
        per_engine[name] = engines
        counts[name] = max(
            (sum(start_ns <= t <= end_ns for t, _ in points) for points in series.values()),
            default=0,
        )
    return peaks, per_engine, counts


def in_flight_peak(samples: Sequence[Sample], start_ns: int, end_ns: int) -> float | None:
    """Largest running + waiting requests at one scrape in [start_ns, end_ns], summed over
    engines; ``None`` when neither gauge was sampled in the window."""
    total: dict[int, float] = {}
    for name in ("num_requests_running", "num_requests_waiting"):
        for t, v in series(samples, name):
            total[t] = total.get(t, 0.0) + v
    return gauge_peak(sorted(total.items()), start_ns, end_ns)


def in_flight_at_scrapes(
    samples: Sequence[Sample], scrapes: Sequence[ScrapeTick], windows: Sequence[tuple[int, int]]
) -> list[float]:
    """Running + waiting requests (summed over engines) at each ok scrape whose request was
    sent and answered inside one of ``windows`` ([start_ns, end_ns] pairs, monotonic ns), in
    time order; empty when no scrape lies wholly inside a window. A sample's ``t_ns`` is its
    scrape's ``end_ns`` (``metrics.scraper``), which is how the two are joined."""
    inside = {
        t.end_ns
        for t in scrapes
        if t.outcome == "ok" and t.start_ns is not None and t.end_ns is not None
        and any(lo <= t.start_ns and t.end_ns <= hi for lo, hi in windows)
    }  # fmt: skip
    totals: dict[int, float] = {}
    for s in samples:
        if s.t_ns in inside and s.name in ("num_requests_running", "num_requests_waiting"):
            totals[s.t_ns] = totals.get(s.t_ns, 0.0) + s.value
    return [totals[t] for t in sorted(totals)]


def unusable_histograms(samples: Sequence[Sample]) -> dict[str, str]:
    """Server histogram families that break the histogram rules anywhere in the case
    (``metrics.histograms.histogram_problem``): family → why. Their quantiles are left out
    of every phase; the rest of the report is built as usual."""
    family_of = {
        family + suffix: family
        for family, _ in HISTOGRAMS
        for suffix in ("_bucket", "_sum", "_count")
    }
    by_family: dict[str, list[Sample]] = {}
    for s in samples:  # one pass: a long run holds hundreds of thousands of samples
        family = family_of.get(s.name)
        if family is not None:
            by_family.setdefault(family, []).append(s)
    out: dict[str, str] = {}
    for family, _ in HISTOGRAMS:
        problem = histogram_problem(by_family.get(family, []), family)
        if problem is not None:
            out[family] = problem
    return out


def histogram_figures(
    samples: Sequence[Sample],
    start_ns: int,
    end_ns: int,
    unusable: Collection[str] | None = None,
) -> dict[str, ServerHistogram]:
    """Per-phase quantiles (ms) of every server histogram recorded in the window; a family the
    server does not expose is left out (the case's metric aliases list what was missing), and
    so is a malformed one: those in ``unusable`` (``unusable_histograms`` of the case, found
    here when not given; the case's data quality says why)."""
    if unusable is None:
        unusable = unusable_histograms(samples)
    out: dict[str, ServerHistogram] = {}
    for family, _ in HISTOGRAMS:
        if family in unusable:
            continue
        try:
            delta = histogram_delta(samples, family, start_ns, end_ns)
        except (MissingFamilyError, MalformedHistogramError):
            continue
        if delta is None or not delta.count:
            continue

        def ms(q: float, d: Any = delta) -> float | None:
            value = histogram_quantile(q, d)
            return None if value is None else value * 1e3

        def overflow(q: str, d: Any = delta) -> bool:
            return quantile_in_overflow(int(q[1:]) / 100, d)

        mean = mean_s(delta)
        out[family] = ServerHistogram(
            family=family,
            count=delta.count,
            mean_ms=None if mean is None else mean * 1e3,
            p50_ms=ms(0.5),
            p90_ms=ms(0.9),
            p99_ms=ms(0.99),
            floors=[q for q in QUANTILES if overflow(q)],
            buckets=quantile_buckets(delta),
        )
    return out


def quantile_buckets(delta: HistogramDelta) -> dict[str, QuantileBucket]:
    """Per quantile of ``QUANTILES``, the bucket of ``delta`` that holds it, in ms
    (``metrics.histograms.quantile_bucket``; infinite bounds as ``None``)."""

    def ms(bound: float) -> float | None:
        return bound * 1e3 if math.isfinite(bound) else None

    out = {}
    for q in QUANTILES:
        bucket = quantile_bucket(int(q[1:]) / 100, delta)
        if bucket is not None:
            out[q] = QuantileBucket(low_ms=ms(bucket[0]), high_ms=ms(bucket[1]))
    return out


def deltas_flag(case: CaseData, phase: PhaseRow) -> str | None:
    """Why a phase's counter deltas are unknown or may be wrong, or ``None`` when they rest on
    readings that bracket exactly its work:

    - **no reading in the window** (said alone): no successful scrape ended inside
      [start, end], so every delta is ``None`` (never a made-up 0) and checks that need one
      are undecided;

    otherwise either or both of these, joined with "; ":

    - **tail**: no successful scrape started after the last request finished and ended in the
      window, so tokens counted at the very end may be missing;
    - **head**: the scrape the deltas start from (the last successful one ending at or before
      the start) began before an earlier phase's last request ended (scrapes failed in
      between), so that phase's late increments are counted in this one; or there is no such
      scrape and the deltas start from the first one inside the window (an undercount). A base
      that is merely old harms nothing when no earlier work falls after it.
    """
    start, last_end, end = phase.start_ns, phase.last_end_ns, phase.end_ns
    if not ok_scrape_ended_in(case.scrapes, start, end):
        return (  # nothing measured: where a delta would have started no longer matters
            "no successful scrape ended inside the phase window: its counter deltas are "
            "unknown (–) and checks that need them are undecided"
        )
    reasons = []
    if deltas_are_stale(case.scrapes, last_end, end):
        reasons.append(
            "no successful scrape started after the last request finished: counter deltas "
            "may miss the phase's tail"
        )
    base = base_scrape_start_ns(case.scrapes, start)
    earlier = [p.last_end_ns for p in case.phases if p.start_ns < start]
    if base is None:
        reasons.append(
            "no successful scrape ended before the phase started: counter deltas start from "
            "its first scrape and may miss the phase's head"
        )
    elif earlier and base < max(earlier):
        age_s = (start - base) / 1e9
        reasons.append(
            f"the last successful scrape before the phase started began {age_s:.1f} s before "
            "it, before an earlier phase's last request ended: counter deltas may include "
            "that phase's late increments"
        )
    return "; ".join(reasons) or None


def max_over_engines(samples: Sequence[Sample], name: str) -> list[Point]:
    """Per scrape time, the largest value of gauge ``name`` over engines (for fractions such as
    KV usage, which must not be summed across engines)."""
    merged: dict[int, float] = {}
    for points in series_by(samples, name).values():
        for t, v in points:
            merged[t] = max(v, merged.get(t, v))
    return sorted(merged.items())
