"""How many more alternated baseline/candidate pairs an undecided metric needs: pure functions
over a metric's interval as ``analysis.compare_stats`` built it.

**Per-request metrics** (a bootstrap interval [lo, hi] of the ratio c = m(C)/m(B), two-level
when a side has several runs: runs, then requests within them). Assumption: adding pairs at the
same requests per phase adds whole runs, so both sources of spread the two-level bootstrap sees
(run-to-run shifts and request-level spread within a run) fall with the number of runs k per
side: each half-width of the interval (c − lo and hi − c, kept apart because a bootstrap
interval is not symmetric) shrinks as √(k / k′) at the observed spread, the observed point c
taken as the true effect, at the same confidence. The runs k′ a decision needs are the fewest
whose interval clears the tolerance band [1 − t, 1 + t]:

- c inside the band: *no change* once both ends fit inside it,
  k′ = k · max((c − lo) / (c − (1 − t)), (hi − c) / ((1 + t) − c))²;
- c beyond the band: *regression* (or *improvement*) once the near end leaves it,
  k′ = k · ((c − lo) / (c − (1 + t)))² (mirrored below);
- c on an edge: no number of pairs decides it (the effect equals the tolerance).

Extra pairs = ⌈k′⌉ − k. The same shrink comes from more requests per phase at the same repeats
(× k′/k) only when run-to-run shifts are small beside the request spread; the estimate says
so rather than promising it. It is an expectation at the observed spread and effect: the next
runs' spread and point move, so a gate sometimes needs fewer or more pairs (validated on
synthetic runs with known effects: tests/analysis/test_gate_sequential.py).

**Too few values** for the statistic (``compare_stats.too_few``): the runs per side that bring
the pooled count to what the statistic needs, at the observed values per run.

**Per-run figures** (``compare_stats.per_run_difference``). From 3 runs a side their interval
is Welch's t-interval (Welch 1947; Satterthwaite 1946), point ± t_{(1+c)/2, ν} · SE with
SE = √(v_B/k + v_C/k) at k runs per side (v the per-run variances in the interval's space: s²
for a difference, the delta method's R² s_B²/mean(B)² and s_C²/mean(B)² for a ratio), so it
narrows as t_ν/√k. Assumption: each side's per-run SD stays as observed (the estimate needs
2+ runs a side to know it), the observed point taken as the true effect, at the same
confidence. The runs k′ a decision needs are the fewest (at least 3, where Welch's interval
starts, and at least one more pair) whose interval point ± t_{ν′} · √((v_B + v_C)/k′), with
ν′ = (k′ − 1)(v_B + v_C)² / (v_B² + v_C²) (Welch–Satterthwaite at k′ a side), clears the
tolerance band in the direction the point lies: *no change* inside it, *regression* or
*improvement* beyond it; found by trying k′ = k + 1, k + 2, … up to ``MAX_RUNS_ESTIMATED``
(t depends on k′, so there is no closed form). A point on a tolerance edge is not decided by
any k′. With one run per side no spread is known yet: a second pair shows it. (Below 3 runs a
side the interval is the point or d ± the larger run-to-run range; that range is expected to
grow with the runs, as d_k · σ, which is why more runs switch to Welch's interval.)

**Planning** (:func:`runs_for_power`, before any run): for log-normal latencies with a
request-level log-s.d. σ_req and a run shift of log-s.d. σ_run, the log-ratio of two sides of k
runs of m requests has s.e. √(2 (σ_run² + κ² σ_req² / m) / k), κ = √(π/2) for a median (the
s.e. of a normal median, 1.2533 σ/√n) and √(e^(σ²) − 1)/σ for a mean (the delta method on
the log-normal's coefficient of variation). A decision at distance D on the log scale from the
nearer tolerance edge (D = ln(1 + t) for a true ratio of 1) with probability P needs
(z_c + z_P) · s.e. ≤ D, z_c the normal quantile of the (per-look) confidence.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from statistics import NormalDist
from typing import Literal

from pydantic import BaseModel, ConfigDict

from analysis.compare_stats import WELCH_MIN_RUNS, Better, Statistic, classify, welch_terms
from analysis.welch import welch_interval

Toward = Literal["no change", "regression", "improvement"]

#: Beyond this many runs per side an estimate is reported as "more than" (an effect within a
#: hair of the tolerance edge would otherwise ask for millions of runs).
MAX_RUNS_ESTIMATED = 1000


class PairsEstimate(BaseModel):
    """What would decide an undecided metric.

    Attributes:
        runs_needed: runs per side the decision needs (``None``: more pairs do not decide it).
        extra_pairs: pairs beyond the ``runs`` observed (``runs_needed − runs``), or ``None``.
        toward: the class the observed effect points to, when one does.
        requests_factor: the same shrink from this many times the requests per phase at the
            same repeats (holds only when run-to-run shifts are small), or ``None``.
        capped: the estimate exceeds ``MAX_RUNS_ESTIMATED`` runs per side.
        why: one line saying how it was estimated, or why pairs cannot decide it.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")
    runs_needed: int | None
    extra_pairs: int | None
    toward: Toward | None = None
    requests_factor: float | None = None
    capped: bool = False
    why: str


def _runs_from_factor(runs: int, factor: float) -> int:
    """⌈runs · factor⌉, at least runs + 1 (one more pair is the least a look can add)."""
    need = math.ceil(runs * factor - 1e-9)
    return max(need, runs + 1)


def _capped(runs: int, factor: float, toward: Toward, why: str) -> PairsEstimate:
    if not math.isfinite(factor) or runs * factor > MAX_RUNS_ESTIMATED:
        return PairsEstimate(
            runs_needed=None, extra_pairs=None, toward=toward, capped=True,
            why=f"more than {MAX_RUNS_ESTIMATED} runs per side: {why}",
        )  # fmt: skip
    need = _runs_from_factor(runs, factor)
    return PairsEstimate(runs_needed=need, extra_pairs=need - runs, toward=toward,
                         requests_factor=need / runs, why=why)  # fmt: skip


def ratio_pairs_needed(
    point: float, low: float, high: float, *, tolerance: float, better: Better, runs: int
) -> PairsEstimate:
    """Runs per side that would decide a ratio interval (module docstring).

    Args:
        point, low, high: the observed ratio c and its interval (neutral 1).
        tolerance: the relative tolerance t (> 0 for a decision to exist).
        better: which direction of the ratio is an improvement.
        runs: runs per side the interval was built from (the fewer side's, ≥ 1).

    A percentile bootstrap interval can miss its own point estimate (a median among tied
    values); a half-width that would be negative is taken as 0.

    Raises:
        ValueError: ``runs`` < 1 or ``low`` > ``high``.
    """
    if runs < 1:
        raise ValueError(f"runs must be ≥ 1 (got {runs})")
    if low > high:
        raise ValueError(f"interval low {low} above high {high}")
    upper, lower = 1 + tolerance, 1 - tolerance
    below, above = max(point - low, 0.0), max(high - point, 0.0)
    worse_up = better == "lower"
    if lower < point < upper:
        need = max(below / (point - lower), above / (upper - point)) ** 2
        how = (f"both ends inside ±{tolerance:.0%} once the interval (now [{low:.3f}, "
               f"{high:.3f}]) narrows as √(runs) around {point:.3f}")  # fmt: skip
        return _capped(runs, need, "no change", how)
    if point > upper:
        toward: Toward = "regression" if worse_up else "improvement"
        need = (below / (point - upper)) ** 2 if point - upper > 0 else math.inf
        how = (f"its low end {low:.3f} above {upper:.3f} once the interval narrows as "
               f"√(runs) around {point:.3f}")  # fmt: skip
        return _capped(runs, need, toward, how)
    if point < lower:
        toward = "improvement" if worse_up else "regression"
        need = (above / (lower - point)) ** 2 if lower - point > 0 else math.inf
        how = (f"its high end {high:.3f} below {lower:.3f} once the interval narrows as "
               f"√(runs) around {point:.3f}")  # fmt: skip
        return _capped(runs, need, toward, how)
    return PairsEstimate(
        runs_needed=None, extra_pairs=None,
        why=f"the observed ratio {point:.3f} sits on the tolerance edge: no number of pairs "
        "decides an effect equal to the tolerance",
    )  # fmt: skip


def values_needed(stat: Statistic, min_samples: int, min_tail: int) -> int:
    """Fewest pooled values per side ``stat`` is computed from (``compare_stats.too_few``)."""
    if stat == "mean":
        return min_samples
    q = int(stat[1:]) / 100
    return max(min_samples, math.ceil(min_tail / (1 - q) - 1e-9))


def too_few_pairs_needed(
    stat: Statistic, values: int, runs: int, *, min_samples: int, min_tail: int
) -> PairsEstimate:
    """Runs per side that bring a side's pooled ``values`` (from ``runs`` runs) to what
    ``stat`` needs; the interval itself is estimated at the next look.

    Raises:
        ValueError: ``runs`` < 1.
    """
    if runs < 1:
        raise ValueError(f"runs must be ≥ 1 (got {runs})")
    need = values_needed(stat, min_samples, min_tail)
    if values <= 0:
        return PairsEstimate(runs_needed=None, extra_pairs=None,
                             why=f"no values: {stat} needs {need} per side")  # fmt: skip
    per_run = values / runs
    runs_needed = max(math.ceil(need / per_run - 1e-9), runs + 1)
    return PairsEstimate(
        runs_needed=runs_needed, extra_pairs=runs_needed - runs, requests_factor=need / values,
        why=f"{stat} needs {need} values per side, {per_run:.0f} per run observed; its interval "
        "is estimated once it has them",
    )  # fmt: skip


def per_run_pairs_needed(
    baseline: Sequence[float],
    candidate: Sequence[float],
    *,
    ratio: bool,
    tolerance: float,
    better: Better,
    confidence: float,
) -> PairsEstimate:
    """Runs per side that would decide an undecided per-run figure under Welch's interval, at
    each side's per-run SD as observed (module docstring).

    Args:
        baseline, candidate: the figure's per-run values of each side.
        ratio: the figure is compared as R = mean(C)/mean(B) (else as the difference).
        tolerance: the tolerance t around the neutral value (1 for a ratio, 0 for a difference).
        better: which direction of the figure is an improvement.
        confidence: the (per-look) confidence of the interval.

    Raises:
        ValueError: a side has no run, or ``ratio`` with a baseline mean of 0.
    """
    runs = min(len(baseline), len(candidate))
    if runs < 1:
        raise ValueError("each side needs at least one run")
    if runs < 2:
        return PairsEstimate(
            runs_needed=2, extra_pairs=2 - runs,
            why="no run-to-run spread known yet: a second pair shows it",
        )  # fmt: skip
    point, var_b, var_c = welch_terms(baseline, candidate, ratio=ratio)
    neutral = 1.0 if ratio else 0.0
    upper, lower = neutral + tolerance, neutral - tolerance
    worse_up = better == "lower"
    if lower < point < upper:
        toward: Toward = "no change"
    elif point > upper:
        toward = "regression" if worse_up else "improvement"
    elif point < lower:
        toward = "improvement" if worse_up else "regression"
    else:
        return PairsEstimate(
            runs_needed=None, extra_pairs=None,
            why=f"the observed {'ratio' if ratio else 'difference'} {point:.4g} sits on the "
            "tolerance edge: no number of pairs decides an effect equal to the tolerance",
        )  # fmt: skip
    how = (f"Welch's interval around {point:.4g} narrowing as t/√(runs) at the per-run SDs "
           f"observed over {runs} runs clears ±{tolerance:g}")  # fmt: skip
    for k in range(max(runs + 1, WELCH_MIN_RUNS), MAX_RUNS_ESTIMATED + 1):
        w = welch_interval(point, var_b, k, var_c, k, confidence)
        klass = classify(w.low, w.high, neutral=neutral, tolerance=tolerance, better=better)
        if klass == toward:
            return PairsEstimate(runs_needed=k, extra_pairs=k - runs, toward=toward, why=how)
    return PairsEstimate(runs_needed=None, extra_pairs=None, toward=toward, capped=True,
                         why=f"more than {MAX_RUNS_ESTIMATED} runs per side: {how}")  # fmt: skip


def runs_for_power(
    sigma_request: float,
    sigma_run: float,
    requests: int,
    stat: Statistic,
    *,
    distance: float,
    confidence: float,
    power: float = 0.8,
) -> int:
    """Runs per side that decide, with probability ``power``, a metric whose true log-ratio
    lies ``distance`` (log scale, > 0) from the nearer tolerance edge, at the per-look
    ``confidence`` (module docstring, *Planning*).

    Raises:
        ValueError: a non-positive ``distance`` or ``requests``, or a level outside (0, 1).
    """
    if distance <= 0 or requests <= 0 or not (0 < confidence < 1 and 0 < power < 1):
        raise ValueError("distance and requests > 0, confidence and power in (0, 1) needed")
    if stat == "mean":
        kappa = math.sqrt(math.expm1(sigma_request**2)) / sigma_request if sigma_request else 1.0
    elif stat == "p50":
        kappa = math.sqrt(math.pi / 2)
    else:
        raise ValueError(f"planning covers the mean and p50 (got {stat})")
    z = NormalDist().inv_cdf(1 - (1 - confidence) / 2) + NormalDist().inv_cdf(power)
    per_run = 2 * (sigma_run**2 + (kappa * sigma_request) ** 2 / requests)
    return max(1, math.ceil(per_run * (z / distance) ** 2 - 1e-9))
