"""The statistics of a regression gate, as pure functions: pooled statistics over requests, a
seeded bootstrap interval for a candidate/baseline ratio, the interval of per-run figures
(run-to-run range, or Welch's t-interval from 3 runs a side), and the four-way classification
against a tolerance.

**Pooling.** A side's sample is every request of every repeat (and of every worker): one
percentile over the pooled values, never an average of per-run or per-worker percentiles. Two
workers whose p99s are 10 ms and 500 ms do not have a p99 of 255 ms; the pooled p99 is near
500 ms when the slow worker holds the tail (:func:`pooled_stat`).

**Bootstrap** (Efron & Tibshirani, *An Introduction to the Bootstrap*, 1993, ch. 13, percentile
interval). Each resample draws the baseline's requests with replacement (as many as it has) and
independently the candidate's, and computes m(C*)/m(B*); the interval is the (1−c)/2 and
(1+c)/2 quantiles of those ratios. A request is the unit resampled: for per-token metrics (ITL)
a request contributes all its tokens, because tokens of one request share its batch and are not
independent. Why 2,000 resamples (default) are enough: an interval end is an estimated 2.5 %
quantile of the resampled ratios, and its Monte-Carlo error in probability is
√(0.025 × 0.975 / B) = 0.35 points at B = 2,000 (0.49 at 1,000, the minimum allowed), small
beside the 2.5 % it estimates; Efron & Tibshirani recommend B ≥ 1,000 for percentile intervals.
The generator is seeded, so the same runs always give the same interval.

A request bootstrap alone does not see a shift of a whole run (the machine got slower while
one run ran). So when a
side has several runs, each resample first draws its runs with replacement, then requests
within each drawn run (a two-level bootstrap for clustered data, Davison & Hinkley, *Bootstrap
Methods and their Application*, 1997, §3.8): runs that disagree widen the interval instead of
making a regression. With one run per side nothing can reveal such a shift; repeats
(``loadgen gate``, alternating sides) are the remedy, and the tolerances sit above the
measured run-to-run noise (docs/compare-and-gates.md has the figures).

**Minimum samples.** A percentile q of n values rests on the n(1−q) values beyond it; with
few of them the bootstrap distribution collapses onto one or two order statistics and its
interval is falsely narrow, and one disturbed request decides it. With fewer than ``min_tail``
such values the statistic is inconclusive (a p99 needs n ≥ 100 × min_tail; with the default 4,
400 requests per side, a p95 80). A mean needs ``min_samples``.

**Per-run figures** (throughput, hit rates, preemptions, KV peak: one number per run and phase)
are compared as the difference of the side means, d = mean(C) − mean(B), by one of three rules
chosen by the runs per side (:func:`per_run_difference`):

- *one run per side*: no spread is known; the interval is the point d and the class rests on
  the tolerance alone (the result says so);
- *a side with 2 runs (or one side with 1)*: d ± s, s = the larger run-to-run range (max − min)
  of the sides that have two or more runs. A spread rule, not a confidence interval at a
  stated level: a t-interval from 2 runs has 1 degree of freedom (t₀.₉₉₅,₁ = 63.7) and would
  be far wider than anything a small gate could decide;
- *3 or more runs on both sides*: Welch's t-interval for the difference of means at the
  comparison's confidence (``analysis.welch``: Welch 1947, Welch–Satterthwaite degrees of
  freedom, Satterthwaite 1946), d ± t_{(1+c)/2, ν} · √(s_B²/n_B + s_C²/n_C). Three is the
  threshold because ν ≥ min(n_B, n_C) − 1 = 2 there, where t₀.₉₇₅ = 4.30 and t₀.₉₉₅ = 9.92 are
  finite and fall fast as runs are added (2.78 and 4.60 at ν = 4), so the half-width shrinks
  as t_ν/√n at a steady run-to-run SD where the range grew. A sequential gate's per-look
  (Bonferroni) confidence is the c used, as for the bootstrap.

For *ratio-scale* figures (throughput, goodput) the class is of R = mean(C)/mean(B). The point
and range rules divide the difference interval by mean(B), 1 + (d ± s)/mean(B), as before.
The Welch rule uses the delta method on R (first order in the two means' errors): the
variances in the interval are s_C²/mean(B)² and R² · s_B²/mean(B)², so its SE is
√(s_C²/n_C + R² s_B²/n_B)/mean(B) with Welch–Satterthwaite's ν from those two terms.

**Classification** of an interval [lo, hi] of a change (a ratio, neutral 1, or a difference,
neutral 0) against tolerance t, when a higher value is worse: *regression* if lo > neutral + t,
*improvement* if hi < neutral − t, *no change* if the interval lies inside
[neutral − t, neutral + t], else *inconclusive* (mirrored when a higher value is better).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

from analysis.welch import welch_interval

Statistic = Literal["mean", "p50", "p90", "p95", "p99"]
Better = Literal["lower", "higher"]
Classification = Literal["regression", "improvement", "no change", "inconclusive", "missing"]
PerRunMethod = Literal["point", "range", "welch"]

#: Runs on each side from which per-run figures get Welch's t-interval (module docstring).
WELCH_MIN_RUNS = 3

#: Per-request values: one float per request, or one array per request (per-token metrics).
Samples = Sequence[float] | Sequence[np.ndarray]

_BATCH = 250  # resamples per vectorised batch (bounds memory for per-token metrics)


def _quantile(stat: Statistic) -> float | None:
    return None if stat == "mean" else int(stat[1:]) / 100


def pooled_stat(values: np.ndarray, stat: Statistic) -> float:
    """``stat`` of all ``values`` pooled (mean, or percentile with linear interpolation, as
    numpy and ``analysis.latency.describe``).

    Raises:
        ValueError: ``values`` is empty.
    """
    arr = np.asarray(values, dtype=float)
    if arr.size == 0:
        raise ValueError("no values")
    q = _quantile(stat)
    return float(arr.mean()) if q is None else float(np.percentile(arr, q * 100))


def _as_clusters(samples: Samples) -> list[np.ndarray]:
    return [np.atleast_1d(np.asarray(s, dtype=float)) for s in samples]


def flat(samples: Samples) -> np.ndarray:
    """All values of ``samples`` in one array (requests' arrays concatenated)."""
    clusters = _as_clusters(samples)
    return np.concatenate(clusters) if clusters else np.empty(0)


def too_few(samples: Samples, stat: Statistic, min_samples: int, min_tail: int) -> str | None:
    """Why ``stat`` of ``samples`` is not meaningful (see the module docstring), or ``None``."""
    n = flat(samples).size
    if n < min_samples:
        return f"{n} values, fewer than the {min_samples} needed"
    q = _quantile(stat)
    if q is not None and n * (1 - q) < min_tail:
        need = int(np.ceil(min_tail / (1 - q) - 1e-9))
        return f"{n} values leave {n * (1 - q):.1f} beyond the {stat}; it needs {need}"
    return None


def _stat_rows(picked: np.ndarray, q: float | None) -> np.ndarray:
    return picked.mean(axis=1) if q is None else np.percentile(picked, q * 100, axis=1)


def _resampled_stats(
    runs: list[list[np.ndarray]], stat: Statistic, resamples: int, rng: np.random.Generator
) -> np.ndarray:
    """``stat`` of ``resamples`` bootstrap resamples: runs drawn with replacement (when there
    are several), then whole requests with replacement within each drawn run."""
    q = _quantile(stat)
    k = len(runs)
    out = np.empty(resamples)
    shapes = {(len(r), c.size) for r in runs for c in r}
    if len(shapes) == 1:  # equal runs of equal-length requests: one tensor, batched
        tensor = np.stack([np.stack(r) for r in runs])  # (runs, requests, values)
        n = tensor.shape[1]
        for start in range(0, resamples, _BATCH):
            b = min(_BATCH, resamples - start)
            chosen = rng.integers(0, k, size=(b, k, 1)) if k > 1 else np.zeros((b, 1, 1), int)
            picked = tensor[chosen, rng.integers(0, n, size=(b, k, n))].reshape(b, -1)
            out[start : start + b] = _stat_rows(picked, q)
        return out
    for i in range(resamples):
        drawn = rng.integers(0, k, size=k) if k > 1 else np.zeros(1, int)
        parts = [
            runs[j][m] for j in drawn for m in rng.integers(0, len(runs[j]), size=len(runs[j]))
        ]
        values = np.concatenate(parts)
        out[i] = values.mean() if q is None else np.percentile(values, q * 100)
    return out


@dataclass(frozen=True)
class Interval:
    """A point estimate with its interval: ``low`` ≤ ``high``; ``None`` ends when undefined."""

    point: float | None
    low: float | None
    high: float | None


def bootstrap_ratio(
    baseline: Samples,
    candidate: Samples,
    stat: Statistic,
    *,
    resamples: int = 2000,
    confidence: float = 0.95,
    seed: int = 0,
) -> Interval:
    """:func:`bootstrap_ratio_runs` for one run per side."""
    return bootstrap_ratio_runs(
        [baseline], [candidate], stat, resamples=resamples, confidence=confidence, seed=seed
    )


def bootstrap_ratio_runs(
    baseline_runs: Sequence[Samples],
    candidate_runs: Sequence[Samples],
    stat: Statistic,
    *,
    resamples: int = 2000,
    confidence: float = 0.95,
    seed: int = 0,
) -> Interval:
    """Ratio m(candidate)/m(baseline) of pooled statistic ``stat`` (every request of every run
    of a side) and its percentile bootstrap interval (module docstring). Each side is a list of
    runs; runs without a value are left out. Undefined ratios (a baseline statistic of 0) give
    ``None``.

    Raises:
        ValueError: a side has no values, fewer than 1,000 resamples, or a confidence outside
            (0, 1).
    """
    if resamples < 1000:
        raise ValueError(f"resamples must be at least 1000 (got {resamples})")
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be in (0, 1) (got {confidence})")
    b = [r for r in (_as_clusters(x) for x in baseline_runs) if r]
    c = [r for r in (_as_clusters(x) for x in candidate_runs) if r]
    b_stat = pooled_stat(np.concatenate([flat(r) for r in b]) if b else np.empty(0), stat)
    c_stat = pooled_stat(np.concatenate([flat(r) for r in c]) if c else np.empty(0), stat)
    if b_stat == 0:
        return Interval(None, None, None)
    rng = np.random.default_rng(seed)
    b_star = _resampled_stats(b, stat, resamples, rng)
    c_star = _resampled_stats(c, stat, resamples, rng)
    ok = b_star != 0
    ratios = c_star[ok] / b_star[ok]
    alpha = (1 - confidence) / 2
    low, high = np.quantile(ratios, [alpha, 1 - alpha])
    return Interval(c_stat / b_stat, float(low), float(high))


@dataclass(frozen=True)
class RunSpread:
    """Per-run figures of both sides and the interval of their mean difference.

    Attributes:
        baseline_mean, candidate_mean: the side means, in the figure's unit.
        difference: d = mean(C) − mean(B) and its interval, in the figure's unit.
        ratio: R = mean(C)/mean(B) and its interval (``None`` when mean(B) is 0).
        spread: the half-width of ``difference`` (the range, or t · SE), ``None`` with one
            run per side (no spread known).
        method: ``point``, ``range`` or ``welch`` (module docstring).
        df: Welch–Satterthwaite's ν (``welch`` with a nonzero spread only), else ``None``.
    """

    baseline_mean: float
    candidate_mean: float
    difference: Interval
    ratio: Interval | None
    spread: float | None
    method: PerRunMethod
    df: float | None = None


def welch_terms(
    baseline: Sequence[float], candidate: Sequence[float], *, ratio: bool
) -> tuple[float, float, float]:
    """(point, per-run variance of the baseline's term, of the candidate's) in the space of
    Welch's interval: d with s_B², s_C²; or R with R² s_B²/mean(B)², s_C²/mean(B)² (the delta
    method, module docstring). Variances have n − 1 denominators.

    Raises:
        ValueError: a side with fewer than 2 runs, or ``ratio`` with mean(B) = 0.
    """
    b, c = np.asarray(baseline, dtype=float), np.asarray(candidate, dtype=float)
    if b.size < 2 or c.size < 2:
        raise ValueError("each side needs 2+ runs for a variance")
    mb, mc = float(b.mean()), float(c.mean())
    vb, vc = float(b.var(ddof=1)), float(c.var(ddof=1))
    if not ratio:
        return mc - mb, vb, vc
    if mb == 0:
        raise ValueError("baseline mean is 0: no ratio")
    r = mc / mb
    return r, r * r * vb / mb**2, vc / mb**2


def per_run_difference(
    baseline: Sequence[float], candidate: Sequence[float], *, confidence: float = 0.95
) -> RunSpread:
    """d = mean(candidate) − mean(baseline) and R = mean(candidate)/mean(baseline) with their
    intervals: the point with one run per side, d ± the larger run-to-run range when a side
    has 2 runs (or 1), Welch's t-interval at ``confidence`` when both have
    ``WELCH_MIN_RUNS`` or more (module docstring).

    Raises:
        ValueError: a side has no value, or ``confidence`` outside (0, 1).
    """
    if not baseline or not candidate:
        raise ValueError("each side needs at least one run")
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be in (0, 1) (got {confidence})")
    b, c = np.asarray(baseline, dtype=float), np.asarray(candidate, dtype=float)
    mb, mc = float(b.mean()), float(c.mean())
    d = mc - mb

    def as_ratio(low: float, high: float) -> Interval | None:
        return None if mb == 0 else Interval(mc / mb, 1 + low / mb, 1 + high / mb)

    if min(b.size, c.size) >= WELCH_MIN_RUNS:
        _, vb, vc = welch_terms(baseline, candidate, ratio=False)
        diff = welch_interval(d, vb, b.size, vc, c.size, confidence)
        ratio = None
        if mb != 0:
            r, rvb, rvc = welch_terms(baseline, candidate, ratio=True)
            rw = welch_interval(r, rvb, b.size, rvc, c.size, confidence)
            ratio = Interval(r, rw.low, rw.high)
        return RunSpread(mb, mc, Interval(d, diff.low, diff.high), ratio, diff.half_width,
                         "welch", diff.df)  # fmt: skip
    ranges = [float(np.ptp(x)) for x in (b, c) if x.size >= 2]
    if not ranges:
        return RunSpread(mb, mc, Interval(d, d, d), as_ratio(0.0, 0.0), None, "point")
    spread = max(ranges)
    return RunSpread(mb, mc, Interval(d, d - spread, d + spread),
                     as_ratio(d - spread, d + spread), spread, "range")  # fmt: skip


def classify(
    low: float, high: float, *, neutral: float, tolerance: float, better: Better
) -> Classification:
    """Class of a change interval [low, high] against ``neutral ± tolerance`` (module docstring).

    Raises:
        ValueError: ``low > high`` or a negative tolerance.
    """
    if low > high:
        raise ValueError(f"interval low {low} above high {high}")
    if tolerance < 0:
        raise ValueError(f"tolerance must be ≥ 0 (got {tolerance})")
    upper, lower = neutral + tolerance, neutral - tolerance
    worse_up = better == "lower"
    if low > upper:
        return "regression" if worse_up else "improvement"
    if high < lower:
        return "improvement" if worse_up else "regression"
    if low >= lower and high <= upper:
        return "no change"
    return "inconclusive"
