"""The paired estimator of alternating blocks (``analysis.gate_paired``) by hand, and on
synthetic gates with a known machine drift (``analysis.gate_paired_sim``): a shift common to
both sides within a block pair and different between pairs, with known effects."""

from __future__ import annotations

import math

import numpy as np
import pytest

from analysis.gate_paired import (
    matched_log_ratio,
    mde,
    mde_after,
    paired_figure,
    paired_log_ratio,
    phase_units,
)
from analysis.gate_paired_sim import (
    Machine,
    detection_rate,
    predicted_mde,
    sequential_gate,
)

#: The test machine: request log-s.d. 0.30, the machine's speed between block pairs log-s.d.
#: 0.15 (shifts of ±15 % between blocks, common to both sides within one), a residual 0.02 per
#: run that the alternation does not cancel; 5 phases of 48 requests.
DRIFTING = Machine(sigma_request=0.30, sigma_block=0.15, sigma_run=0.02)
#: The same drift with requests of their own size: log-s.d. 0.40 common to both sides (the same
#: request), 0.15 fresh on each side (a per-request log-ratio s.d. of 0.15·√2 = 0.21).
MATCHED = Machine(sigma_item=0.40, sigma_request=0.15, sigma_block=0.15, sigma_run=0.02)
#: A machine whose drift within a pair's minutes matters (a run's shift log-s.d. 0.06, so two
#: runs minutes apart differ by about 0.085, as the per-pair changes of a real whole-run gate
#: did), with each side's phase shifted by its own 0.03 that no block cancels. Whole-run
#: blocks keep the 0.06 between the sides; phase blocks share it within each phase pair.
PHASED = Machine(sigma_item=0.40, sigma_request=0.15, sigma_block=0.15, sigma_run=0.06,
                 sigma_phase=0.03)  # fmt: skip
TOLERANCE = 0.07

# Two pairs of one phase, five requests each, element i the same request on both sides.
BASE = [
    [np.array([100.0, 200.0, 50.0, 400.0, 80.0])],
    [np.array([120.0, 150.0, 40.0, 500.0, 90.0])],
]
CAND = [
    [np.array([110.0, 180.0, 60.0, 400.0, 100.0])],
    [np.array([114.0, 195.0, 42.0, 400.0, 90.0])],
]


def test_matched_median_log_ratios_by_hand() -> None:
    # Pair 1 ratios 1.1, 0.9, 1.2, 1.0, 1.25: median 1.1. Pair 2 ratios 0.95, 1.3, 1.05, 0.8,
    # 1.0: median 1.0. d = (ln 1.1, 0); the change exp(ln 1.1 / 2) = √1.1 = 1.04881.
    est = matched_log_ratio(BASE, CAND, resamples=1000)
    assert est.per_pair == pytest.approx((math.log(1.1), 0.0))
    assert est.point == pytest.approx(math.sqrt(1.1))
    # The between-pair term alone: SE ≥ √(s_d² / 2) = |d₁ − d₂| / 2 = 0.047655.
    assert est.se >= math.log(1.1) / 2 - 1e-12
    # Per-side medians see other figures: pair 2's medians 120 and 114 give ln 0.95, not 0.
    old = paired_log_ratio(BASE, CAND, resamples=1000)
    assert old.per_pair == pytest.approx((math.log(1.1), math.log(0.95)))


def test_matched_interval_by_hand_when_requests_agree_within_pairs() -> None:
    # Every request 1.1× in pair 1 and 1.0× in pair 2: resampled medians do not move (v̄ = 0),
    # so SE = s_d/√2 = ln(1.1)/2 and the 95 % interval is exp(ln(1.1)/2 ± 1.95996 · ln(1.1)/2).
    cand = [[BASE[0][0] * 1.1], [BASE[1][0] * 1.0]]
    est = matched_log_ratio(BASE, cand, resamples=1000)
    half = math.log(1.1) / 2
    assert est.se == pytest.approx(half)
    assert (est.low, est.high) == pytest.approx(
        (math.exp(half - 1.959964 * half), math.exp(half + 1.959964 * half)), rel=1e-6
    )
    with pytest.raises(ValueError, match="equal lengths"):
        matched_log_ratio(BASE, [[CAND[0][0][:4]], CAND[1]], resamples=1000)


def test_a_drift_common_to_a_pair_cancels_exactly() -> None:
    # Pair j runs at speed s_j on both sides; the candidate is exactly 1.2× every request.
    rng = np.random.default_rng(1)
    base = [[rng.lognormal(5, 0.3, 48) * s for _ in range(3)] for s in (0.7, 1.0, 1.6)]
    cand = [[v * 1.2 for v in pair] for pair in base]
    est = paired_log_ratio(base, cand, confidence=0.95, resamples=1000)
    assert est.point == pytest.approx(1.2)
    assert est.per_pair == pytest.approx((math.log(1.2),) * 3)
    assert est.low < 1.2 < est.high  # the request noise floor keeps a width
    assert est.method == "random-effects"


def test_pairs_that_disagree_widen_the_interval() -> None:
    # Same requests; in the second case the pairs' changes differ by ±10 %, more than their
    # requests explain: SE = s_d/√k replaces the request floor.
    rng = np.random.default_rng(2)
    base = [[rng.lognormal(5, 0.3, 48)] for _ in range(4)]
    steady = paired_log_ratio(base, [[v * 1.0 for v in p] for p in base], resamples=1000)
    factors = (0.9, 1.1, 0.9, 1.1)
    moved = [[v * f for v in p] for p, f in zip(base, factors, strict=True)]
    moving = paired_log_ratio(base, moved, resamples=1000)
    s_d = float(np.std(np.log(factors), ddof=1))
    assert moving.se == pytest.approx(s_d / 2)
    assert moving.se > steady.se


def test_paired_figure_by_hand() -> None:
    # d = 0.1, 0.2, 0.3: mean 0.2, s = 0.1, SE = 0.1/√3 = 0.05774, t(0.975, 2) = 4.303:
    # half-width 0.2484.
    est = paired_figure([0.1, 0.2, 0.3], scale="difference", confidence=0.95)
    assert (est.point, est.method) == (pytest.approx(0.2), "paired-t")
    assert est.high - est.point == pytest.approx(4.303 * 0.1 / math.sqrt(3), rel=1e-3)
    # Two pairs: the range rule, 0.2 ± 0.2; log scale: exp of the ends.
    two = paired_figure([0.1, 0.3], scale="difference")
    assert (two.low, two.high, two.method) == (pytest.approx(0.0), pytest.approx(0.4), "range")
    ratio = paired_figure([math.log(0.9), math.log(0.9)], scale="log")
    assert (ratio.point, ratio.low, ratio.high) == pytest.approx((0.9, 0.9, 0.9))
    with pytest.raises(ValueError, match="finite"):
        paired_figure([], scale="log")


def test_mde_by_hand() -> None:
    # SE 0.02 at 95 %: (1.95996 + 0.84162) × 0.02 = 0.056032 in the log → e^δ − 1 = 5.763 %.
    assert mde(0.02, 0.95, "log") == pytest.approx(math.expm1(0.056032), rel=1e-4)
    assert mde(0.5, 0.95, "difference") == pytest.approx(2.80158 * 0.5, rel=1e-4)
    est = paired_figure([0.0, 0.02, -0.02, 0.01], scale="log")
    # The next pair: SE × √(4/5).
    assert mde_after(est, 0.95) == pytest.approx(mde(est.se * math.sqrt(0.8), 0.95, "log"))
    with pytest.raises(ValueError):
        mde(-1.0, 0.95, "log")


def test_paired_decides_a_over_a_and_15_percent_in_fewer_blocks_than_unpaired() -> None:
    # The same simulated blocks (seeded), decided by both estimators through the same
    # sequential looks (2 to 6 pairs, 99 % a look), at a 7 % tolerance on TTFT p50.
    for effect, want in ((1.0, "no change"), (1.15, "regression")):
        runs = {name: [sequential_gate(s, DRIFTING, effect, name, tolerance=TOLERANCE)
                       for s in range(12)] for name in ("paired", "unpaired")}  # fmt: skip
        pairs = {k: float(np.mean([r.pairs for r in v])) for k, v in runs.items()}
        right = {k: sum(r.classification == want for r in v) for k, v in runs.items()}
        assert pairs["paired"] < pairs["unpaired"], (effect, pairs)
        assert right["paired"] >= 9 and right["paired"] > right["unpaired"], (effect, right)


def test_matched_decides_in_fewer_blocks_than_per_side_medians() -> None:
    # Requests of their own size (MATCHED): the matched log-ratios cancel it, the per-side
    # medians see it on each side. Same blocks, same looks, 7 % tolerance.
    for effect, want in ((1.0, "no change"), (1.15, "regression")):
        runs = {name: [sequential_gate(s, MATCHED, effect, name, tolerance=TOLERANCE)
                       for s in range(12)] for name in ("matched", "paired")}  # fmt: skip
        pairs = {k: float(np.mean([r.pairs for r in v])) for k, v in runs.items()}
        right = {k: sum(r.classification == want for r in v) for k, v in runs.items()}
        print(effect, pairs, right)
        assert pairs["matched"] < pairs["paired"], (effect, pairs)
        assert right["matched"] >= 11 and right["matched"] >= right["paired"], (effect, right)


def test_false_alarms_over_200_a_over_a_gates_within_the_bound() -> None:
    # Bonferroni over 5 looks bounds a false regression of one metric by α/2 = 2.5 %: at most
    # 5 of 200, with per-request noise and block drift, decided by the matched estimator.
    runs = [sequential_gate(s, MATCHED, 1.0, "matched", tolerance=TOLERANCE) for s in range(200)]
    false = sum(r.classification == "regression" for r in runs)
    print("false regressions", false, "of 200")
    assert false <= 5, false


def test_mde_within_a_factor_1_5_of_the_simulated_one() -> None:
    # The MDE a 4-pair gate reports: at a third less the change is seen in under 80 % of the
    # gates, at half more in over 80 %.
    stated = predicted_mde(MATCHED, 4, 40, 0.95)
    delta = math.log1p(stated)
    below = detection_rate(MATCHED, 4, math.exp(delta / 1.5), 100, 0.95)
    above = detection_rate(MATCHED, 4, math.exp(delta * 1.5), 100, 0.95)
    assert below < 0.8 < above, (stated, below, above)


def test_phase_units_by_hand() -> None:
    # Two pairs of two phases: d = [[0.1, 0.0], [0.3, 0.2]]. Phase means 0.2 and 0.1, residuals
    # ±0.1 each: s² = 4 × 0.01 / (2 × (2 − 1)) = 0.02 on ν = 2; SE = √(0.02 / 4) = 0.070711.
    # No request floor (a per-run figure): t₀.₉₇₅ at ν = 2 is 4.302653, half = 4.302653 ×
    # 0.070711 = 0.304243.
    d = np.array([[0.1, 0.0], [0.3, 0.2]])
    est = phase_units(d, None, scale="difference", confidence=0.95)
    assert est.point == pytest.approx(0.15)
    assert est.se == pytest.approx(math.sqrt(0.005))
    assert (est.df, est.phases, est.pairs) == (2, 2, 2)
    assert (est.low, est.high) == pytest.approx((0.15 - 0.304243, 0.15 + 0.304243), abs=2e-6)
    assert est.per_pair == pytest.approx((0.05, 0.25))
    assert est.per_phase == ((0.1, 0.0), (0.3, 0.2))
    # A request floor above s² sets the variance: v̄ = 0.05, SE = √(0.05 / 4) = 0.111803, and
    # the normal quantile (1.959964): the log-ratio 0.15 ± 0.219131, mapped by exp.
    est = phase_units(d, np.full((2, 2), 0.05), confidence=0.95)
    assert est.df is None and est.se == pytest.approx(0.111803, abs=1e-6)
    assert (est.low, est.high) == pytest.approx((math.exp(-0.069131), math.exp(0.369131)))
    # The MDE uses t at ν when s² decides: (4.302653 + 0.841621) × 0.070711 = 0.363757.
    assert mde(0.070711, 0.95, "difference", df=2) == pytest.approx(0.363757, abs=2e-6)
    with pytest.raises(ValueError, match="pairs, phases"):
        phase_units(np.array([0.1, 0.2]))


def test_matched_phase_units_pool_the_same_point_as_pair_units() -> None:
    # The point is the mean over pairs and phases either way; only the unit of the spread
    # differs. Two pairs of two phases made of BASE/CAND's two one-phase pairs.
    two_phase_b = [[BASE[0][0], BASE[1][0]], [BASE[1][0], BASE[0][0]]]
    two_phase_c = [[CAND[0][0], CAND[1][0]], [CAND[1][0], CAND[0][0]]]
    pair = matched_log_ratio(two_phase_b, two_phase_c)
    phase = matched_log_ratio(two_phase_b, two_phase_c, units="phase")
    assert phase.point == pytest.approx(pair.point)
    assert phase.phases == 2 and len(phase.per_phase) == 2 and pair.per_phase == ()


def test_phase_units_decide_a_over_a_and_15_percent_in_fewer_pairs_than_run_pairs() -> None:
    # The same machine (PHASED), gates of 2 to 6 pairs at 99 % a look, 7 % tolerance: whole-run
    # blocks decided over run pairs against phase blocks decided over phase pairs.
    for effect, want in ((1.0, "no change"), (1.15, "regression")):
        runs = {name: [sequential_gate(s, PHASED, effect, name, tolerance=TOLERANCE)
                       for s in range(12)] for name in ("matched", "phase-units")}  # fmt: skip
        pairs = {k: float(np.mean([r.pairs for r in v])) for k, v in runs.items()}
        right = {k: sum(r.classification == want for r in v) for k, v in runs.items()}
        print(effect, pairs, right)
        assert pairs["phase-units"] < pairs["matched"], (effect, pairs)
        assert right["phase-units"] >= 11 and right["phase-units"] >= right["matched"], right


def test_phase_unit_false_alarms_over_200_a_over_a_gates_within_the_bound() -> None:
    runs = [sequential_gate(s, PHASED, 1.0, "phase-units", tolerance=TOLERANCE)
            for s in range(200)]  # fmt: skip
    false = sum(r.classification == "regression" for r in runs)
    print("false regressions", false, "of 200")
    assert false <= 5, false


def test_phase_unit_mde_within_a_factor_1_5_of_the_simulated_one() -> None:
    stated = predicted_mde(PHASED, 2, 40, 0.95, "phase")
    delta = math.log1p(stated)
    below = detection_rate(PHASED, 2, math.exp(delta / 1.5), 100, 0.95, "phase")
    above = detection_rate(PHASED, 2, math.exp(delta * 1.5), 100, 0.95, "phase")
    print(stated, below, above)
    assert below < 0.8 < above, (stated, below, above)
