"""Verdicts over block pairs (``analysis.gate_verdicts``): McNemar's exact test on the pairs
that flipped, at each look's Bonferroni level. Every figure is derived by hand from
P(X ≥ b), X ~ Binomial(n, ½) = Σ_{i ≥ b} C(n, i) / 2^n, and the one-sided level (1 − c)/2.
"""

from __future__ import annotations

import random

import pytest

from analysis.gate_sequential import look_confidence, planned_looks
from analysis.gate_verdicts import (
    BlockVerdict,
    blocks_to_decide,
    pairs_if_flips_continue,
    sequential_verdict_gate,
    sign_test_p,
    verdict_test,
)

PASS_FAIL: BlockVerdict = (True, False)
FAIL_PASS: BlockVerdict = (False, True)
BOTH_PASS: BlockVerdict = (True, True)
BOTH_FAIL: BlockVerdict = (False, False)


@pytest.mark.parametrize(
    ("b", "n", "p"),
    [
        (0, 0, 1.0),
        (1, 1, 1 / 2),
        (1, 2, 3 / 4),  # (C(2,1) + C(2,2)) / 4
        (2, 2, 1 / 4),
        (3, 4, 5 / 16),  # (4 + 1) / 16
        (5, 5, 1 / 32),
        (5, 6, 7 / 64),  # (6 + 1) / 64
        (6, 6, 1 / 64),
        (7, 8, 9 / 256),  # (8 + 1) / 256
        (8, 9, 10 / 512),  # (9 + 1) / 512
        (9, 9, 1 / 512),
    ],
)
def test_exact_one_sided_p_values_of_small_discordant_counts(b: int, n: int, p: float) -> None:
    assert sign_test_p(b, n) == pytest.approx(p, rel=1e-12)


def test_bad_counts_are_refused() -> None:
    with pytest.raises(ValueError, match="successes"):
        sign_test_p(3, 2)
    with pytest.raises(ValueError, match="fit in"):
        pairs_if_flips_continue(2, 1, 2, 0.95)


@pytest.mark.parametrize(
    ("looks", "blocks"),
    # one-sided level α/(2L) at α = 0.05 against 2^-k:
    # L=1: 0.025 (2^-5 = 0.031 >, 2^-6 = 0.0156 ≤) → 6; L=2: 0.0125 (2^-7 = 0.0078) → 7;
    # L=5: 0.005 (2^-7 = 0.0078 >, 2^-8 = 0.0039 ≤) → 8;
    # L=9 (the default --until-decided plan, 2 to 10 pairs): 0.00278 (2^-8 >, 2^-9 ≤) → 9.
    [(1, 6), (2, 7), (5, 8), (9, 9)],
)
def test_pairs_a_consistent_regression_needs(looks: int, blocks: int) -> None:
    assert blocks_to_decide(look_confidence(0.95, looks)) == blocks


def test_one_flip_in_two_pairs_is_undecided_not_a_regression() -> None:
    test = verdict_test([BOTH_PASS, PASS_FAIL], 0.95)
    assert (test.classification, test.pass_fail, test.fail_pass) == ("inconclusive", 1, 0)
    assert test.p_regression == 0.5
    # Flips continuing at 1 in 2 pairs: at k′ pairs ⌊k′/2⌋ pass→fail; 2^-6 ≤ 0.025 first at
    # k′ = 12 (⌊11/2⌋ = 5 gives 2^-5 = 0.031): 10 more pairs.
    assert test.extra_pairs == 10
    assert "~10 more pair(s) if pass→fail flips continue" in test.note


def test_the_old_reduced_self_test_aa_verdict_two_flips_at_two_looks() -> None:
    # The A/A gate of the reduced self-test ('revisit hit rate below warm': PASS in both
    # baseline runs, FAIL in both candidate runs) at its first look, 2 looks of 97.5 %:
    # p = 2^-2 = 0.25 > 0.0125; all flips continuing, 2^-7 = 0.0078 ≤ 0.0125 at 7 pairs.
    test = verdict_test([PASS_FAIL, PASS_FAIL], look_confidence(0.95, 2))
    assert (test.classification, test.p_regression, test.extra_pairs) == ("inconclusive", 0.25, 5)


def test_a_consistent_regression_is_decided_at_the_hand_derived_pairs() -> None:
    assert verdict_test([PASS_FAIL] * 5, 0.95).classification == "inconclusive"
    six = verdict_test([PASS_FAIL] * 6, 0.95)
    assert (six.classification, six.p_regression) == ("regression", 1 / 64)
    # One fail→pass pair among them costs a pair: 7 of 8 is p = 9/256 = 0.035 > 0.025,
    # 8 of 9 is p = 10/512 = 0.0195 ≤ 0.025.
    assert verdict_test([PASS_FAIL] * 7 + [FAIL_PASS], 0.95).classification == "inconclusive"
    assert verdict_test([PASS_FAIL] * 8 + [FAIL_PASS], 0.95).classification == "regression"
    # The improvement is the mirror image.
    assert verdict_test([FAIL_PASS] * 6, 0.95).classification == "improvement"


def test_sequential_default_plan_decides_a_consistent_regression_at_nine_pairs() -> None:
    level = look_confidence(0.95, planned_looks(2, 10))
    assert sequential_verdict_gate(lambda: PASS_FAIL, 2, 10, level) == ("regression", 9)
    # With at most 6 pairs (5 looks at 99 %, 8 pairs needed) it is never decided.
    level6 = look_confidence(0.95, planned_looks(2, 6))
    assert sequential_verdict_gate(lambda: PASS_FAIL, 2, 6, level6) == ("inconclusive", 6)


def test_undecided_sides_count_as_neither() -> None:
    left = verdict_test([(None, False), BOTH_PASS], 0.95)
    assert (left.classification, left.blocks, left.left_out) == ("no change", 1, 1)
    none = verdict_test([(None, None), (True, None)], 0.95)
    assert (none.classification, none.blocks, none.left_out) == ("inconclusive", 0, 2)
    one = verdict_test([(True, None), PASS_FAIL], 0.95)
    assert (one.classification, one.blocks, one.pass_fail, one.left_out) == (
        "inconclusive",
        1,
        1,
        1,
    )


def test_a_check_failing_on_both_sides_does_not_block_and_says_so() -> None:
    test = verdict_test([BOTH_FAIL, BOTH_FAIL], 0.95)
    assert test.classification == "no change"
    assert "fails on both sides in 2 pair(s)" in test.note


def test_flips_both_ways_equally_are_never_decided_by_more_pairs() -> None:
    test = verdict_test([PASS_FAIL, FAIL_PASS, BOTH_PASS], 0.95)
    assert (test.classification, test.extra_pairs) == ("inconclusive", None)
    assert "more pairs do not decide it" in test.note


def _aa_block(rng: random.Random, fail: float) -> BlockVerdict:
    """An A/A block pair: each side's run fails the check with probability ``fail``."""
    return rng.random() >= fail, rng.random() >= fail


@pytest.mark.parametrize("fail", [0.2, 0.5])
def test_false_alarms_over_200_simulated_aa_gates_stay_within_the_bound(fail: float) -> None:
    # Per-block flip probability 2 f (1 − f): 0.32 at f = 0.2, 0.5 at f = 0.5 (the worst).
    # The default plan (2 to 10 pairs, 9 looks at 1 − 0.05/9) bounds a false regression by
    # α/2 = 2.5 %, 5 of 200. Exactly, a regression needs 9 pass→fail among the first 9
    # discordant pairs (at 10, 9 of 10 is p = 11/1024 = 0.0107 > 0.00278): at most
    # 2^-9 = 0.2 % of gates, so 0 of 200 is what to expect.
    rng = random.Random(20261205)
    level = look_confidence(0.95, planned_looks(2, 10))
    ends = [sequential_verdict_gate(lambda: _aa_block(rng, fail), 2, 10, level)
            for _ in range(200)]  # fmt: skip
    regressions = sum(1 for klass, _ in ends if klass == "regression")
    wrong = sum(1 for klass, _ in ends if klass in ("regression", "improvement"))
    assert regressions <= 5 and wrong <= 10
    assert regressions == 0


def test_false_alarms_when_every_pair_flips_one_way_or_the_other() -> None:
    # The worst case for the bound: every block pair discordant, its direction a fair coin.
    # A false regression needs the first 9 all pass→fail: probability 2^-9 = 0.00195 a gate.
    rng = random.Random(31)
    level = look_confidence(0.95, planned_looks(2, 10))
    ends = [sequential_verdict_gate(lambda: PASS_FAIL if rng.random() < 0.5 else FAIL_PASS,
                                    2, 10, level) for _ in range(200)]  # fmt: skip
    assert sum(1 for klass, _ in ends if klass == "regression") <= 5
