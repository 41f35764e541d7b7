"""The paired estimators of a gate whose two sides run in alternating blocks (A B B A …): the
change of a key metric measured *within* each block pair, where a shift of the whole machine is
common to both sides and cancels, then averaged over the pairs.

**Two units of pairing, both kept.** Requests are identical on both sides (same seed, same
order, the same ``request_id`` in every run), so request i of A can be differenced against
request i of B: what a request is (its prompt length, its prefix, its place in the schedule)
is then common to both sides and cancels, as the machine's state does across a block pair.
But a request's latency also depends on what shares its batch and queue, and every request of
a block carries that block's machine state: per-request differences within a block are not
independent. So the requests give each pair's change and its noise floor, and the block pair
stays the unit of the interval (the between-pair term below catches what the floor misses).

**Matched estimator** (the gate's, for the per-request metrics TTFT and TPOT:
:func:`matched_log_ratio`). For pair j and phase p, with I_jp the requests ok and with a
value on both sides (matched by ``request_id``), d_jp = median_{i ∈ I_jp} ln(c_i / b_i): the
median of the paired log-ratios, the paired-difference design's robust location (the
sign-test estimate of a paired shift; Hodges & Lehmann, *Ann. Math. Statist.* 34, 1963, whose
Walsh-average form it approximates with the plain median; Hollander & Wolfe, *Nonparametric
Statistical Methods*, ch. 3). Requests failed or without a value on either side are left out
of the latency change (the ``failed_requests`` key metric counts them). The pair's change
pools the phases, d_j = mean_p d_jp (natural-log units; the ratio is exp). A multiplicative
shift common to both sides (the machine) and a request's own size common to both sides (the
workload) both cancel in ln(c_i / b_i); the median keeps one request queued behind another
session's burst from moving d_jp by more than one rank.

**Per-side medians** (:func:`paired_log_ratio`, the estimator before matching, kept for
comparison on synthetic gates): d_jp = ln m(C_jp) − ln m(B_jp) with m the median of each
side's requests, its within-pair variance by resampling each side's requests separately.
It cancels the machine but not the requests' own spread, which it sees twice (once a side).
**Why a median** rather than the mean of 48: TTFT within a phase is skewed and mixes hits with
misses (log-s.d. 0.45–0.99 measured on the shared 2-core machine); a median's relative
standard error at a log-normal spread σ is 1.2533 σ/√n, below the mean's √(e^{σ²} − 1)/√n
once σ > 0.6.

**Interval: random effects over pairs, with the request noise as a floor.** Each pair's d_j
has a within-pair variance v_j from its requests, estimated by resampling the matched request
pairs of each phase with replacement (per-side medians: each side's requests separately;
Efron & Tibshirani 1993, the bootstrap variance of a median).
If the alternation cancelled the machine, Var(d̄) = Σ v_j / k²; a drift it did not cancel
shows as pairs that disagree more than their requests explain. DerSimonian & Laird's
random-effects variance (*Controlled Clinical Trials* 7, 1986) with equal weights adds the
between-pair part τ² = max(0, s_d² − v̄): Var(d̄) = (v̄ + τ²)/k = max(v̄, s_d²)/k, s_d² the
sample variance of the d_j. The interval is d̄ ± z_{(1+c)/2} · SE, mapped by exp. The floor v̄
comes from hundreds of requests, so two pairs already give a usable interval, where a paired
t from the d_j alone has 1 degree of freedom (t₀.₉₉₅ = 63.7); the s_d² term keeps pairs that
disagree from being averaged away.

**Per-run figures** (output tokens/s and goodput as log-ratios; hit rates, preemptions,
failed requests as differences) have one value per side and pair, so d_j is that pair's
change (pooled over phases as above: a mean for rates and ratios, a sum for counts) and the
interval is the paired t-interval d̄ ± t_{(1+c)/2, k−1} · s_d/√k (Student 1908) from 3 pairs;
with 2 pairs (1 degree of freedom, t₀.₉₉₅ = 63.7) it is d̄ ± |d₁ − d₂|, the range rule that
``analysis.compare_stats`` uses for 2 runs a side.

**Phase units** (a gate whose pairs ran phase by phase: ``loadgen.turns``, ``units="phase"``).
Both sides' phase p of pair j then run seconds apart, so the machine's drift is common to the
*phase pair* (j, p), not only to the run pair, and each phase pair is a unit: d_jp as above
(matched: the median of the request log-ratios; a per-run figure: its per-phase change), its
within-unit variance v_jp by resampling its matched requests. The key metric is still the mean
over the case's P phases of the mean over pairs, d̄ = mean_{j,p} d_jp. Its variance treats the
phases as strata with their own true change (a candidate may change cold TTFT and not warm):
with the residuals r_jp = d_jp − mean_j d_jp, s² = Σ r_jp² / (P(k − 1)) on ν = P(k − 1) degrees of
freedom, Var(d̄) = max(v̄, s²)/(kP) (v̄ the mean v_jp; per-run figures have no v and use s²
alone). The quantile is Student's t at ν when s² sets the variance (an estimate on ν degrees of
freedom; the paired t of Student 1908 within strata) and the normal one when the request floor
v̄ does (it rests on hundreds of requests): 2 pairs of 5 phases give ν = 5 (t₀.₉₉₇₂ = 4.6 at
the default sequential plan's 99.44 %), 3 pairs ν = 10 (3.5), 4 pairs ν = 15 (3.2), against
k − 1 for the run-pair unit. Pairs run as whole runs keep the run-pair unit.

**Minimum detectable effect.** At confidence c (two-sided) and power 1 − β = 0.8, a true change
δ is separated from "no change" when δ ≥ (z_{(1+c)/2} + z_{0.8}) · SE (the usual power relation,
e.g. Cohen 1988, ch. 2, for a normal estimate with known SE): that δ, mapped back to the
metric's scale, is the MDE (relative, for log-ratios: e^δ − 1). SE falls as 1/√k, so the next
pair brings it to MDE · √(k/(k+1)) (in the log space). A tolerance below the MDE is a band the
interval cannot fit into: an A/A pair stays undecided (``tolerance_visible``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from statistics import NormalDist
from typing import Literal

import numpy as np

from analysis.welch import t_quantile

#: Power at which the minimum detectable effect is stated.
POWER = 0.8

PairedScale = Literal["log", "difference"]
#: The unit of the interval: the run pair, or each (run pair, phase) of phase-interleaved pairs.
Units = Literal["pair", "phase"]

#: Per-request values of one side of one pair: one array per phase pooled into the pair.
PairSide = Sequence[np.ndarray]


@dataclass(frozen=True)
class PairedKind:
    """How a paired key metric (``analysis.gate_paired_keys``) pools: ``log`` (relative) or
    ``difference``; ``sum`` or mean over phases; which direction is better."""

    scale: str
    pool: str
    better: str


#: The paired key metrics a gate file's ``[paired]`` may name, and how each pools.
PAIRED_METRICS: dict[str, PairedKind] = {
    "ttft_ms": PairedKind("log", "mean", "lower"),
    "tpot_ms": PairedKind("log", "mean", "lower"),
    "output_throughput_tok_s": PairedKind("log", "mean", "higher"),
    "goodput_req_s": PairedKind("log", "mean", "higher"),
    "prefix_cache_hit_rate": PairedKind("difference", "mean", "higher"),
    "cached_token_rate": PairedKind("difference", "mean", "higher"),
    "num_preemptions": PairedKind("difference", "sum", "lower"),
    "failed_requests": PairedKind("difference", "sum", "lower"),
}


@dataclass(frozen=True)
class PairedEstimate:
    """A key metric's paired change over k pairs.

    Attributes:
        scale: ``log``: ``point``/``low``/``high`` are candidate/baseline ratios (exp of the
            log-ratio); ``difference``: candidate − baseline in the figure's unit.
        point, low, high: the change and its interval.
        se: standard error of the change in the estimator's space (log-ratio or unit).
        pairs: k, the block pairs it rests on.
        per_pair: d_j of each pair, in the estimator's space.
        method: ``random-effects``, ``paired-t``, ``range``, ``point`` or, with phase units,
            ``phase-units`` (module docstring).
        df: the degrees of freedom of the quantile (phase units with s² setting the variance:
            P(k − 1)); ``None``: the normal quantile (or none).
        phases: P, the phase units per pair (1 for the run-pair unit).
        per_phase: with phase units, d_jp per pair and phase; empty otherwise.
    """

    scale: PairedScale
    point: float
    low: float
    high: float
    se: float
    pairs: int
    per_pair: tuple[float, ...]
    method: str
    df: int | None = None
    phases: int = 1
    per_phase: tuple[tuple[float, ...], ...] = ()


def _stat(values: np.ndarray, stat: str) -> np.ndarray:
    """``stat`` along the last axis: ``p50`` (median) or ``mean``."""
    return np.median(values, axis=-1) if stat == "p50" else values.mean(axis=-1)


def _resampled(values: np.ndarray, stat: str, b: int, rng: np.random.Generator) -> np.ndarray:
    """``stat`` of ``b`` request resamples of ``values`` (shape (b,))."""
    return _stat(values[rng.integers(0, values.size, size=(b, values.size))], stat)


def _check_pairs(baseline: Sequence[PairSide], candidate: Sequence[PairSide]) -> int:
    if not baseline or len(baseline) != len(candidate):
        raise ValueError(f"pairs needed on both sides ({len(baseline)} vs {len(candidate)})")
    for b, c in zip(baseline, candidate, strict=True):
        if len(b) != len(c) or not b:
            raise ValueError("each pair needs the same phases on both sides")
        for arr in (*b, *c):
            a = np.asarray(arr, dtype=float)
            if a.size == 0 or not np.all(a > 0):
                raise ValueError("each phase of each side needs positive values")
    return len(baseline)


#: One phase's change in log space and its ``resamples`` resampled values (shape (b,)).
_PhaseChange = tuple[float, np.ndarray]


def _over_pairs(
    baseline: Sequence[PairSide],
    candidate: Sequence[PairSide],
    phase: Callable[[np.ndarray, np.ndarray, np.random.Generator], _PhaseChange],
    confidence: float,
    resamples: int,
    seed: int,
    units: Units = "pair",
) -> PairedEstimate:
    """The random-effects estimate over pairs of ``phase``'s per-phase change: per pair j the
    mean over phases of the change (d_j) and of its resamples (whose variance is the
    within-pair variance); with ``units="phase"`` each (pair, phase) is a unit
    (:func:`phase_units`). Raises ``ValueError`` as :func:`paired_log_ratio`."""
    if not 0 < confidence < 1 or resamples < 1000:
        raise ValueError(f"confidence in (0, 1) and ≥ 1000 resamples needed ({confidence})")
    k = _check_pairs(baseline, candidate)
    if units == "phase" and len({len(b) for b in baseline}) != 1:
        raise ValueError("phase units need the same phases in every pair")
    rng = np.random.default_rng(seed)
    points = np.empty((k, len(baseline[0]))) if units == "phase" else None
    unit_within = np.empty_like(points) if points is not None else None
    observed, within = np.empty(k), np.empty(k)
    for j, (b_pair, c_pair) in enumerate(zip(baseline, candidate, strict=True)):
        logs = np.zeros(resamples)
        point = 0.0
        for p, (b_vals, c_vals) in enumerate(zip(b_pair, c_pair, strict=True)):
            b_arr, c_arr = np.asarray(b_vals, dtype=float), np.asarray(c_vals, dtype=float)
            change, resampled = phase(b_arr, c_arr, rng)
            point += change
            logs += resampled
            if points is not None and unit_within is not None:
                points[j, p], unit_within[j, p] = change, float(resampled.var(ddof=1))
        observed[j] = point / len(b_pair)
        within[j] = float((logs / len(b_pair)).var(ddof=1))
    if points is not None:
        return phase_units(points, unit_within, confidence=confidence)
    return _random_effects(observed, within, confidence)


def paired_log_ratio(
    baseline: Sequence[PairSide],
    candidate: Sequence[PairSide],
    stat: str = "p50",
    *,
    confidence: float = 0.95,
    resamples: int = 2000,
    seed: int = 0,
    units: Units = "pair",
) -> PairedEstimate:
    """The paired change of a per-request metric (module docstring).

    Args:
        baseline, candidate: ``side[j][p]``: the positive per-request values (ms) of pair j,
            phase p; both sides with the same pairs and phases.
        stat: ``p50`` (default) or ``mean`` of each phase's requests.
        confidence: two-sided, in (0, 1); resamples: ≥ 1000; seed: the generator's.
        units: ``pair`` (the run pair) or ``phase`` (each pair's phases, module docstring).

    Raises:
        ValueError: unequal pairs or phases, an empty or non-positive phase, a bad
            confidence, fewer than 1,000 resamples, an unknown ``stat``.
    """
    if stat not in ("p50", "mean"):
        raise ValueError(f"stat must be p50 or mean (got {stat})")

    def phase(b_arr: np.ndarray, c_arr: np.ndarray, rng: np.random.Generator) -> _PhaseChange:
        point = math.log(float(_stat(c_arr, stat))) - math.log(float(_stat(b_arr, stat)))
        logs = np.log(_resampled(c_arr, stat, resamples, rng))
        return point, logs - np.log(_resampled(b_arr, stat, resamples, rng))

    return _over_pairs(baseline, candidate, phase, confidence, resamples, seed, units)


def matched_log_ratio(
    baseline: Sequence[PairSide],
    candidate: Sequence[PairSide],
    *,
    confidence: float = 0.95,
    resamples: int = 2000,
    seed: int = 0,
    units: Units = "pair",
) -> PairedEstimate:
    """The matched per-request change of a per-request metric (module docstring, *matched
    estimator*): per pair j and phase p the median of ln(c_i / b_i) over the requests i run on
    both sides, averaged over phases; within-pair variance by resampling matched request pairs;
    the random-effects interval over pairs.

    Args:
        baseline, candidate: ``side[j][p]``: positive per-request values (ms) of pair j, phase
            p, aligned: element i of both sides is the same request (same id). Equal lengths.
        confidence: two-sided, in (0, 1); resamples: ≥ 1000; seed: the generator's.
        units: ``pair`` (the run pair) or ``phase`` (each pair's phases, module docstring).

    Returns:
        A ``log`` :class:`PairedEstimate`: ``point``/``low``/``high`` candidate/baseline
        ratios, ``se`` and ``per_pair`` in natural-log units.

    Raises:
        ValueError: unequal pairs or phases, sides of a phase of unequal length, an empty or
            non-positive phase, a bad confidence, fewer than 1,000 resamples.
    """

    def phase(b_arr: np.ndarray, c_arr: np.ndarray, rng: np.random.Generator) -> _PhaseChange:
        if b_arr.shape != c_arr.shape:
            raise ValueError(f"matched sides need equal lengths ({b_arr.size}, {c_arr.size})")
        ratios = np.log(c_arr) - np.log(b_arr)
        return float(np.median(ratios)), _resampled(ratios, "p50", resamples, rng)

    return _over_pairs(baseline, candidate, phase, confidence, resamples, seed, units)


def _random_effects(observed: np.ndarray, within: np.ndarray, confidence: float) -> PairedEstimate:
    """The random-effects interval over pairs (module docstring) from each pair's log-ratio
    ``observed`` and its within-pair variance ``within`` (both shape (k,))."""
    k = observed.size
    between = float(observed.var(ddof=1)) if k > 1 else 0.0
    se = math.sqrt(max(float(within.mean()), between) / k)
    mean = float(observed.mean())
    half = NormalDist().inv_cdf((1 + confidence) / 2) * se
    return PairedEstimate(
        "log", math.exp(mean), math.exp(mean - half), math.exp(mean + half), se, k,
        tuple(float(x) for x in observed), "random-effects",
    )  # fmt: skip


def phase_units(
    changes: np.ndarray,
    within: np.ndarray | None = None,
    *,
    scale: PairedScale = "log",
    confidence: float = 0.95,
) -> PairedEstimate:
    """The estimate over phase units (module docstring, *phase units*) from d_jp.

    Args:
        changes: shape (k, P): d_jp of pair j, phase p (log-ratios for ``log``, differences in
            the figure's unit otherwise), all finite.
        within: shape (k, P): each unit's within-unit variance from its requests; ``None`` for
            a per-run figure (no request floor).
        scale: ``log`` maps the point and bounds by exp; confidence: two-sided, in (0, 1).

    Returns:
        ``point``: the mean of d_jp (mapped); ``se`` √(max(v̄, s²)/(kP)); ``df`` P(k − 1) when s²
        sets the variance, else ``None``; ``per_pair`` the pair means; ``per_phase`` d_jp. One
        pair (ν = 0) and no floor: the point alone.

    Raises:
        ValueError: not a (k, P) array of finite values with k, P ≥ 1, ``within`` of another
            shape, or ``confidence`` outside (0, 1).
    """
    d = np.asarray(changes, dtype=float)
    if d.ndim != 2 or d.size == 0 or not np.all(np.isfinite(d)):
        raise ValueError(f"a (pairs, phases) array of finite changes needed (shape {d.shape})")
    if within is not None and np.shape(within) != d.shape:
        raise ValueError(f"within must have the changes' shape {d.shape}")
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be in (0, 1) (got {confidence})")
    k, phases = d.shape
    df = phases * (k - 1)
    spread = float(((d - d.mean(axis=0)) ** 2).sum() / df) if df > 0 else 0.0
    floor = float(np.mean(within)) if within is not None else 0.0
    between = spread > floor and df > 0
    se = math.sqrt(max(floor, spread) / (k * phases))
    quantile = (t_quantile((1 + confidence) / 2, df) if between
                else NormalDist().inv_cdf((1 + confidence) / 2))  # fmt: skip
    mean, half = float(d.mean()), quantile * se
    to = math.exp if scale == "log" else float
    return PairedEstimate(
        scale, to(mean), to(mean - half), to(mean + half), se, k,
        tuple(float(x) for x in d.mean(axis=1)), "phase-units" if se > 0 else "point",
        df if between else None, phases, tuple(tuple(float(x) for x in row) for row in d),
    )  # fmt: skip


def paired_figure(
    per_pair: Sequence[float], *, scale: PairedScale, confidence: float = 0.95
) -> PairedEstimate:
    """The paired change of a per-run figure from its per-pair changes d_j (log-ratios for
    ``scale="log"``, differences in the figure's unit otherwise): paired t from 3 pairs, the
    range rule at 2, the point at 1 (module docstring).

    Raises:
        ValueError: no pair, a non-finite d_j, or ``confidence`` outside (0, 1).
    """
    d = np.asarray(per_pair, dtype=float)
    if d.size == 0 or not np.all(np.isfinite(d)):
        raise ValueError("one finite change per pair needed")
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be in (0, 1) (got {confidence})")
    k, mean = d.size, float(d.mean())
    if k == 1:
        half, se, method = 0.0, 0.0, "point"
    elif k == 2:
        half, method = float(abs(d[1] - d[0])), "range"
        se = float(d.std(ddof=1) / math.sqrt(k))
    else:
        se = float(d.std(ddof=1) / math.sqrt(k))
        half, method = t_quantile((1 + confidence) / 2, k - 1) * se, "paired-t"
    to = math.exp if scale == "log" else float
    return PairedEstimate(scale, to(mean), to(mean - half), to(mean + half), se, k,
                          tuple(float(x) for x in d), method)  # fmt: skip


def mde(
    se: float, confidence: float, scale: PairedScale, power: float = POWER, df: int | None = None
) -> float:
    """The minimum detectable effect (module docstring): (q_{(1+c)/2} + z_power) · SE, as a
    relative change (e^δ − 1) for ``log``, in the figure's unit for ``difference``; q is the
    normal quantile, or Student's t at ``df`` degrees of freedom when given.

    Raises:
        ValueError: a negative ``se``, ``confidence``/``power`` outside (0, 1), ``df`` < 1.
    """
    if se < 0 or not 0 < confidence < 1 or not 0 < power < 1:
        raise ValueError(f"se ≥ 0, confidence and power in (0, 1) needed ({se}, {confidence})")
    level = (1 + confidence) / 2
    q = NormalDist().inv_cdf(level) if df is None else t_quantile(level, df)
    z = q + NormalDist().inv_cdf(power)
    delta = z * se
    return math.expm1(delta) if scale == "log" else delta


def mde_after(estimate: PairedEstimate, confidence: float, extra_pairs: int = 1) -> float:
    """The MDE once ``extra_pairs`` more pairs are run, at the noise measured so far: SE scaled
    by √(k/(k + extra)); a t quantile's degrees of freedom grow by P per pair.

    Raises:
        ValueError: ``extra_pairs`` < 0 (and see :func:`mde`).
    """
    if extra_pairs < 0:
        raise ValueError(f"extra pairs must be ≥ 0 (got {extra_pairs})")
    k = estimate.pairs
    df = None if estimate.df is None else estimate.df + estimate.phases * extra_pairs
    se = estimate.se * math.sqrt(k / (k + extra_pairs))
    return mde(se, confidence, estimate.scale, df=df)


def tolerance_visible(tolerance: float, mde_value: float) -> bool:
    """Whether a tolerance band is at least the smallest change the gate can see (module
    docstring); ``False`` flags a tolerance that keeps an A/A gate undecided."""
    return tolerance >= mde_value
