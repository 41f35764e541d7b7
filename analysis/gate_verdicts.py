"""Verdicts (a scenario's pass/fail checks) compared over block pairs with an exact paired test,
so that a check that flips once by chance is not a regression.

**Unit: the block pair.** Run N of each side is block pair N (``loadgen gate`` runs them next
to each other, A B B A …). Each pair gives one (baseline verdict, candidate verdict). A pair in
which a side could not decide the check (UNDECIDED, ``None``) counts as neither concordant nor
discordant: it is left out and counted. Of the decided pairs, *pass→fail* ones (baseline
passed, candidate failed) speak for a regression, *fail→pass* ones for an improvement, and the
concordant ones (both pass, both fail) say nothing about a change.

**Test: McNemar's exact test** (McNemar, *Psychometrika* 12, 1947; the exact form is the
binomial sign test on the discordant pairs). Under "no change" each of the n discordant pairs
is pass→fail or fail→pass with probability ½ whatever the check's own failure rate, so the
number of pass→fail ones is Binomial(n, ½). The one-sided exact p-value of b pass→fail among
n is P(X ≥ b) = Σ_{i=b}^{n} C(n, i) / 2^n (:func:`sign_test_p`). A verdict is a *regression*
when that p is at most (1 − c)/2, c the look's confidence, and an *improvement* when the same
holds for the fail→pass ones: McNemar's two-sided exact test at c, its direction naming which.
The level is (1 − c)/2 a side because that is the false-regression rate a metric's two-sided
interval at c has (``analysis.compare_stats``): a verdict and a metric then carry the same
bound, and the union over key metrics and verdicts adds up the same way.

**Sequential looks.** A sequential gate hands every look the Bonferroni level c = 1 − α/L
(``analysis.gate_sequential``); the test is made at that level, so by the union bound a false
regression of a verdict over all L looks is at most α/2 (2.5 % at the default 95 %), however
the looks depend on each other. Under "no change" the chance that one look's exact test rejects
is at most its level whatever n is, because the test is exact (discrete: usually below it).

**The blocks a verdict needs.** A check that fails in every candidate block and passes in every
baseline block has b = n = k after k pairs and p = 2^−k; it is a regression once 2^−k ≤
(1 − c)/2, i.e. k ≥ ⌈log₂(2/(1 − c))⌉ (:func:`blocks_to_decide`): 6 pairs at 95 % (one look:
2^−5 = 0.031 > 0.025 ≥ 2^−6 = 0.0156), 7 with 2 looks (97.5 % each), 8 with 5 looks (99 %),
9 with the default ``--until-decided`` plan of 9 looks (2 to 10 pairs, 99.44 %: 2^−8 = 0.0039 >
0.0028 ≥ 2^−9 = 0.00195). Fewer pairs never make a verdict a regression: one or two flips are
what a check near its threshold does by chance.

**Undecided verdicts.** Discordant pairs that do not reach the level leave the verdict
*inconclusive*, with the pairs that would decide it if the flips continued at the rate seen
so far (:func:`pairs_if_flips_continue`). Flips that go both ways equally never decide it.
A verdict whose decided pairs all agree is *no change* (nothing flipped), including a check
that fails on both sides: the gate asks whether the candidate changed, and a check that fails
with the baseline too is a finding about the workload and its settings (e.g. a cache too
small for the probes to hit), shown in the verdict table and each run's report, which would
otherwise fail every gate of that workload whatever the candidate.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from analysis.compare_stats import Classification

#: One block pair's verdicts of a check: (baseline, candidate); ``None`` = undecided.
BlockVerdict = tuple[bool | None, bool | None]

#: Beyond this many pairs an estimate is not given (a flip rate near even asks for thousands).
MAX_PAIRS_ESTIMATED = 1000


def sign_test_p(successes: int, n: int) -> float:
    """One-sided exact p-value P(X ≥ ``successes``) for X ~ Binomial(``n``, ½) (the sign test;
    McNemar's exact test on ``n`` discordant pairs). 1.0 for ``n`` = 0.

    Raises:
        ValueError: ``n`` < 0 or ``successes`` outside 0..``n``.
    """
    if n < 0 or not 0 <= successes <= n:
        raise ValueError(f"0 ≤ successes ≤ n needed (got {successes} of {n})")
    return sum(math.comb(n, i) for i in range(successes, n + 1)) / 2**n


def one_sided_level(confidence: float) -> float:
    """(1 − ``confidence``)/2: the one-sided level of a look at that two-sided confidence.

    Raises:
        ValueError: ``confidence`` outside (0, 1).
    """
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be in (0, 1) (got {confidence})")
    return (1 - confidence) / 2


def blocks_to_decide(confidence: float) -> int:
    """Fewest pairs, all pass→fail, that make a verdict a regression at ``confidence``:
    the least k with 2^−k ≤ (1 − c)/2 (module docstring; 6 at 0.95).

    Raises:
        ValueError: ``confidence`` outside (0, 1).
    """
    level = one_sided_level(confidence)
    k = 1
    while 0.5**k > level:
        k += 1
    return k


def pairs_if_flips_continue(
    pass_fail: int, fail_pass: int, blocks: int, confidence: float
) -> int | None:
    """Fewest decided pairs k′ > ``blocks`` at which the exact test decides, if pass→fail and
    fail→pass pairs keep coming at the rates seen in ``blocks`` decided pairs: at k′ pairs
    ⌊b·k′/k⌋ of the leading direction and ⌈a·k′/k⌉ of the other (rounded against a decision).
    ``None`` when they never do (no flips, flips both ways equally, or past
    :data:`MAX_PAIRS_ESTIMATED`).

    Raises:
        ValueError: negative counts, more flips than ``blocks``, or a bad ``confidence``.
    """
    if min(pass_fail, fail_pass) < 0 or pass_fail + fail_pass > blocks:
        raise ValueError(f"flips {pass_fail}+{fail_pass} must fit in {blocks} pairs")
    level = one_sided_level(confidence)
    lead, other = max(pass_fail, fail_pass), min(pass_fail, fail_pass)
    if lead == other:
        return None
    for k in range(blocks + 1, MAX_PAIRS_ESTIMATED + 1):
        b = math.floor(lead * k / blocks + 1e-9)
        a = math.ceil(other * k / blocks - 1e-9)
        if sign_test_p(b, a + b) <= level:
            return k
    return None


@dataclass(frozen=True)
class VerdictTest:
    """A check's verdicts over the block pairs, tested (module docstring).

    Attributes:
        blocks: pairs with both sides decided; ``left_out``: pairs with a side undecided.
        pass_fail, fail_pass: the discordant pairs each way; ``both_fail``: concordant fails.
        p_regression, p_improvement: one-sided exact p-values of the pass→fail and the
            fail→pass pairs (1.0 with none).
        classification: regression, improvement, no change or inconclusive.
        extra_pairs: for an inconclusive one, the more pairs that would decide it if the flips
            continued (``None``: none would, or decided).
        note: one line saying why.
    """

    blocks: int
    left_out: int
    pass_fail: int
    fail_pass: int
    both_fail: int
    p_regression: float
    p_improvement: float
    classification: Classification
    extra_pairs: int | None
    note: str


def _undecided_note(pass_fail: int, fail_pass: int, extra: int | None) -> str:
    if extra is None:
        return "the flips go both ways equally: more pairs do not decide it"
    lead = "pass→fail" if pass_fail > fail_pass else "fail→pass"
    return f"~{extra} more pair(s) if {lead} flips continue at the rate seen"


def verdict_test(blocks: Sequence[BlockVerdict], confidence: float) -> VerdictTest:
    """Test one check's verdicts over the block pairs at the look's two-sided ``confidence``
    (module docstring).

    Args:
        blocks: per block pair, (baseline passed, candidate passed); ``None`` = undecided.
        confidence: the look's confidence c, in (0, 1).

    Raises:
        ValueError: ``confidence`` outside (0, 1).
    """
    level = one_sided_level(confidence)
    decided = [(b, c) for b, c in blocks if b is not None and c is not None]
    left_out = len(blocks) - len(decided)
    pf = sum(1 for b, c in decided if b and not c)
    fp = sum(1 for b, c in decided if c and not b)
    both_fail = sum(1 for b, c in decided if not b and not c)
    p_reg, p_imp = sign_test_p(pf, pf + fp), sign_test_p(fp, pf + fp)
    extra: int | None = None
    counts = f"{pf} pass→fail, {fp} fail→pass of {len(decided)} pair(s)"
    if left_out:
        counts += f"; {left_out} pair(s) left out (a side undecided)"
    if not decided:
        klass: Classification = "inconclusive"
        note = f"no pair with both sides decided ({left_out} left out)"
    elif pf == fp == 0:
        klass = "no change"
        note = "every pair agrees" + (f"; {left_out} left out" if left_out else "")
        if both_fail:
            note += f"; fails on both sides in {both_fail} pair(s) (a finding of the workload)"
    elif min(p_reg, p_imp) <= level:
        klass = "regression" if p_reg <= level else "improvement"
        note = f"{counts}; exact p {min(p_reg, p_imp):.3g} ≤ {level:.3g}"
    else:
        klass = "inconclusive"
        need = pairs_if_flips_continue(pf, fp, len(decided), confidence)
        extra = None if need is None else need - len(decided)
        note = (f"{counts}; exact p {min(p_reg, p_imp):.3g} > {level:.3g}; "
                f"{_undecided_note(pf, fp, extra)}")  # fmt: skip
    return VerdictTest(
        blocks=len(decided), left_out=left_out, pass_fail=pf, fail_pass=fp,
        both_fail=both_fail, p_regression=p_reg, p_improvement=p_imp, classification=klass,
        extra_pairs=extra, note=note,
    )  # fmt: skip


def sequential_verdict_gate(
    draw: Callable[[], BlockVerdict], first_pairs: int, max_pairs: int, look_level: float
) -> tuple[Classification, int]:
    """One simulated sequential gate of a check alone: ``first_pairs`` block pairs, then a look
    after each pair up to ``max_pairs``, each look at ``look_level`` (the Bonferroni level
    ``analysis.gate_sequential.look_confidence`` gives a gate of that plan); it stops at a
    regression or an improvement and otherwise runs to ``max_pairs`` (the most looks, so the
    most chances of a false alarm).

    Args:
        draw: one block pair's verdicts (a simulation's random draw).
        first_pairs, max_pairs: as ``--repeats`` and ``--max-repeats`` (1 ≤ first ≤ max).
        look_level: each look's two-sided confidence, in (0, 1).

    Returns:
        The last look's classification and its pairs.

    Raises:
        ValueError: ``look_level`` outside (0, 1), or ``first_pairs`` not in 1..``max_pairs``.
    """
    if not 1 <= first_pairs <= max_pairs:
        raise ValueError(f"1 ≤ first pairs ≤ max pairs needed ({first_pairs}, {max_pairs})")
    level = look_level
    blocks = [draw() for _ in range(first_pairs)]
    while True:
        test = verdict_test(blocks, level)
        if test.classification in ("regression", "improvement") or len(blocks) >= max_pairs:
            return test.classification, len(blocks)
        blocks.append(draw())
