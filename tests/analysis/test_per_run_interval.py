"""Per-run figures' interval (``compare_stats.per_run_difference``): Welch's t-interval from 3
runs a side (``analysis.welch``), the range rule with 2, the point with 1; the confidence a
comparison (and a sequential gate's look) passes; the pairs an undecided per-run figure needs
(``gate_sample_size.per_run_pairs_needed``); and simulated sequential A/A and A/B gates on one
per-run figure.

Figures measured here (seeded) are quoted in docs/gate-decisions.md.
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from analysis.compare_figures import compare_run_metric
from analysis.compare_metrics import RunMetric
from analysis.compare_stats import classify, per_run_difference
from analysis.gate_file import load_gate
from analysis.gate_sample_size import per_run_pairs_needed
from analysis.gate_sequential import look_confidence, planned_looks
from analysis.welch import t_quantile, welch_interval


@pytest.mark.parametrize(
    ("p", "df", "table"),
    [(0.975, 2, 4.303), (0.975, 5, 2.571), (0.995, 10, 3.169), (0.975, 30, 2.042),
     (0.975, 4, 2.776), (0.995, 4, 4.604), (0.975, 1, 12.706)],
)  # fmt: skip
def test_t_quantile_matches_the_tables(p: float, df: float, table: float) -> None:
    # Student-t tables (e.g. NIST/SEMATECH e-Handbook 1.3.6.7.2), three decimals.
    assert t_quantile(p, df) == pytest.approx(table, abs=5e-4)


def test_t_quantile_refuses_levels_it_does_not_cover() -> None:
    with pytest.raises(ValueError, match="df ≥ 1"):
        t_quantile(0.975, 0.5)
    with pytest.raises(ValueError, match=r"p in \(0.5, 1\)"):
        t_quantile(0.4, 5)


def test_welch_interval_of_three_runs_a_side_by_hand() -> None:
    # B = [10, 11, 12], C = [13, 14, 15]: d = 3, s² = 1 each, SE = √(1/3 + 1/3) = 0.8165,
    # ν = (2/3)² / (2 × (1/3)² / 2) = 4, t_{0.975,4} = 2.776: 3 ± 2.267 = [0.733, 5.267].
    spread = per_run_difference([10, 11, 12], [13, 14, 15])
    assert spread.method == "welch"
    assert spread.df == pytest.approx(4.0)
    assert spread.difference.low == pytest.approx(0.7330, abs=1e-3)
    assert spread.difference.high == pytest.approx(5.2670, abs=1e-3)
    # At 99 % (a sequential gate's look): t_{0.995,4} = 4.604, 3 ± 3.759.
    at_99 = per_run_difference([10, 11, 12], [13, 14, 15], confidence=0.99)
    assert at_99.difference.low == pytest.approx(3 - 4.604 * 0.8165, abs=1e-3)
    # The ratio by the delta method: R = 14/11 = 1.2727; terms R² · 1/11² = 0.013387 and
    # 1/11² = 0.0082645, SE = √((0.013387 + 0.0082645)/3) = 0.084954; ν = SE⁴ /
    # ((0.013387/3)²/2 + (0.0082645/3)²/2) = 3.788; t_{0.975,3.788} = 2.839 (between the
    # tables' 3.182 at 3 and 2.776 at 4): 1.2727 ± 0.2412 = [1.0316, 1.5139].
    assert spread.ratio is not None
    assert spread.ratio.point == pytest.approx(14 / 11)
    assert spread.ratio.low == pytest.approx(1.0316, abs=1e-3)
    assert spread.ratio.high == pytest.approx(1.5139, abs=1e-3)


def test_the_interval_narrows_as_runs_with_the_same_spread_are_added() -> None:
    # The same three values repeated: 6 runs a side have s² = 4/5 = 0.8, SE = √(2 × 0.8/6) =
    # 0.5164, ν = 10, t = 2.228: ± 1.151; 9 runs s² = 6/8, SE = 0.4082, ν = 16, t = 2.120:
    # ± 0.865. (The range rule gave ± 2 at any number of runs.)
    widths = [per_run_difference([10, 11, 12] * k, [13, 14, 15] * k).spread for k in (1, 2, 3)]
    assert widths == pytest.approx([2.267, 1.151, 0.865], abs=1e-3)


def test_two_runs_a_side_keep_the_range_rule_and_one_run_the_point() -> None:
    # 3 baseline runs, 2 candidate runs: still the range rule (Welch needs 3 on both sides):
    # d = 14 − 11 = 3, the larger range max(2, 2) = 2: [1, 5].
    spread = per_run_difference([10, 11, 12], [13, 15])
    assert (spread.method, spread.difference.low, spread.difference.high) == ("range", 1, 5)
    assert spread.ratio is not None
    assert spread.ratio.low == pytest.approx(1 + 1 / 11)  # 1 + (d − s)/mean(B), as before
    one = per_run_difference([4.0], [7.0])
    assert (one.method, one.spread, one.difference.low, one.difference.high) == (
        "point", None, 3.0, 3.0)  # fmt: skip


def test_equal_runs_give_the_point_and_no_degrees_of_freedom() -> None:
    spread = per_run_difference([0.5] * 3, [0.5] * 4)
    assert (spread.method, spread.df, spread.difference.low, spread.difference.high) == (
        "welch", None, 0.0, 0.0)  # fmt: skip
    # One side constant: ν is the other side's n − 1 (its term alone): t_{0.975,2} = 4.303.
    w = welch_interval(1.0, 0.0, 3, 3.0, 3, 0.95)
    assert w.df == pytest.approx(2.0)
    assert w.half_width == pytest.approx(4.303, abs=1e-3)


def _views(values: list[float]) -> list[SimpleNamespace]:
    """Run views whose one case/phase summary is the figure itself (the metric reads it)."""
    return [
        SimpleNamespace(run_dir=Path(f"run-{i}"),
                        cases={"c": SimpleNamespace(phases={"p": v}, missing_families=[])})
        for i, v in enumerate(values)
    ]  # fmt: skip


THROUGHPUT = RunMetric(name="output_throughput_tok_s", scale="ratio", better="higher",
                       value=lambda phase: phase)  # type: ignore[arg-type, return-value]  # fmt: skip


def test_the_comparison_uses_its_confidence_for_the_per_run_interval() -> None:
    # Throughput 100, 110, 120 vs 85, 93.5, 102 tok/s (× 0.85): R = 0.85, the default gate
    # tolerating 20 %. The gate's confidence sets t: a look's 99 % widens the interval by
    # t_{0.995,4}/t_{0.975,4} = 1.66 (both straddle 0.8 at 3 runs).
    base, cand = _views([100, 110, 120]), _views([85, 93.5, 102])
    gate = load_gate()
    at_95 = compare_run_metric(THROUGHPUT, base, cand, ("c", "c"), "p", gate)  # type: ignore[arg-type]
    at_99 = compare_run_metric(THROUGHPUT, base, cand, ("c", "c"), "p",  # type: ignore[arg-type]
                               gate.model_copy(update={"confidence": 0.99}))  # fmt: skip
    assert at_95 is not None and at_99 is not None
    assert at_95.change == pytest.approx(0.85)
    assert at_95.note is not None and "Welch t-interval at 0.95" in at_95.note
    # The hand interval: R = 0.85, terms 0.85² × 100/110² = 72.25/110² = 0.0059711 (equal, as
    # C = 0.85 B), SE = √(2 × 0.0059711/3) = 0.063093, ν = 4, t_{0.975,4} = 2.776: 0.85 ±
    # 0.1752 = [0.6748, 1.0252]; at 99 % t = 4.604: low 0.5595.
    assert at_95.low == pytest.approx(0.85 - 2.7764 * 0.063093, abs=1e-3)
    assert at_99.low == pytest.approx(0.85 - 4.6041 * 0.063093, abs=1e-3)
    assert (at_95.classification, at_99.classification) == ("inconclusive", "inconclusive")
    assert at_99.low < at_95.low


def test_pairs_needed_for_a_per_run_figure_by_hand() -> None:
    # d = 3, s² = 1 each, tolerance 1 (absolute), lower is better: a regression once
    # 3 − t_{ν′} · √(2/k′) > 1, ν′ = (k′ − 1)(1 + 1)²/(1 + 1) = 2(k′ − 1). k′ = 4: t_{0.975,6}
    # = 2.447 × 0.7071 = 1.730 < 2: decided at 4 runs, 1 more pair.
    est = per_run_pairs_needed([10, 11, 12], [13, 14, 15], ratio=False, tolerance=1.0,
                               better="lower", confidence=0.95)  # fmt: skip
    assert (est.runs_needed, est.extra_pairs, est.toward) == (4, 1, "regression")
    # Tolerance 2: t · √(2/k′) < 1; k′ = 8: 2.145 × 0.5 = 1.072 no; k′ = 9: 2.120 × 0.4714
    # = 0.999 yes: 9 runs, 6 more pairs. With no effect (C = B) and tolerance 1, "no change"
    # needs 0 ± t · √(2/k′) inside ±1: the same inequality, 9 runs.
    est = per_run_pairs_needed([10, 11, 12], [13, 14, 15], ratio=False, tolerance=2.0,
                               better="lower", confidence=0.95)  # fmt: skip
    assert (est.runs_needed, est.extra_pairs) == (9, 6)
    same = per_run_pairs_needed([10, 11, 12], [10, 11, 12], ratio=False, tolerance=1.0,
                                better="lower", confidence=0.95)  # fmt: skip
    assert (same.runs_needed, same.toward) == (9, "no change")
    # Two runs a side (the range rule now) estimate from their SDs: B = [10, 12], C = [13,
    # 15], s² = 2 each, d = 3, tolerance 1: k′ = 5: 2.306 × √(4/5) = 2.063 no; k′ = 6:
    # t_{0.975,10} = 2.228 × 0.8165 = 1.819 < 2: 6 runs, 4 more pairs.
    two = per_run_pairs_needed([10, 12], [13, 15], ratio=False, tolerance=1.0,
                               better="lower", confidence=0.95)  # fmt: skip
    assert (two.runs_needed, two.extra_pairs) == (6, 4)
    # A ratio: B = C = [100, 110, 120], R = 1, each term 100/110² = 0.0082645, tolerance 10 %:
    # t · √(2 × 0.0082645/k′) ≤ 0.1, i.e. t/√k′ ≤ 0.7778: k′ = 7: 2.179/2.646 = 0.824 no;
    # k′ = 8: 2.145/2.828 = 0.758 yes.
    ratio = per_run_pairs_needed([100, 110, 120], [100, 110, 120], ratio=True, tolerance=0.1,
                                 better="higher", confidence=0.95)  # fmt: skip
    assert (ratio.runs_needed, ratio.toward) == (8, "no change")
    # One run a side: a second pair shows the spread; on the edge: nothing decides it.
    assert per_run_pairs_needed([1.0], [2.0], ratio=False, tolerance=0.5, better="lower",
                                confidence=0.95).runs_needed == 2  # fmt: skip
    edge = per_run_pairs_needed([10, 11, 12], [11, 12, 13], ratio=False, tolerance=1.0,
                                better="lower", confidence=0.95)  # fmt: skip
    assert edge.runs_needed is None and "edge" in edge.why


def _sequential_per_run_gate(
    rng: np.random.Generator, effect: float, sd: float, tolerance: float, max_pairs: int = 6
) -> tuple[str, int]:
    """One ``--repeats 2 --max-repeats max_pairs`` gate on a throughput-like per-run figure
    (normal runs, mean 100, SD ``sd``; the candidate × ``effect``), Bonferroni over the looks,
    stopping at the first decided look: (class, pairs)."""
    level = look_confidence(0.95, planned_looks(2, max_pairs))
    base = list(rng.normal(100, sd, 2))
    cand = list(rng.normal(100 * effect, sd * effect, 2))
    while True:
        r = per_run_difference(base, cand, confidence=level).ratio
        assert r is not None and r.low is not None and r.high is not None
        klass = classify(r.low, r.high, neutral=1.0, tolerance=tolerance, better="higher")
        if klass != "inconclusive" or len(base) == max_pairs:
            return klass, len(base)
        base.append(float(rng.normal(100, sd)))
        cand.append(float(rng.normal(100 * effect, sd * effect)))


def test_sequential_per_run_gates_keep_false_alarms_in_bound_and_now_decide() -> None:
    # 1,000 A/A gates, run-to-run SD 2 % of the mean, tolerance 5 %, 2..6 pairs at 99 % a look
    # (5 looks). Bound: a false regression needs the interval's high end below 0.95 while the
    # truth is 1: at most α/2 = 2.5 % over the Welch looks (Bonferroni); the 2-pair look is
    # the range rule (no stated level), so the figure is measured as well as bounded.
    # Measured: 0 false regressions, 801 no change, 199 inconclusive at 6 pairs; the range
    # rule at every look (WELCH_MIN_RUNS out of reach) ended 0 / 646 / 354 on the same draws.
    rng = np.random.default_rng(0)
    aa = [_sequential_per_run_gate(rng, 1.0, 2.0, 0.05) for _ in range(1000)]
    classes = [k for k, _ in aa]
    assert classes.count("regression") / 1000 <= 0.025
    assert classes.count("regression") == 0
    assert classes.count("no change") >= 750, classes.count("no change")  # measured 801
    # A 10 % throughput drop (5 points beyond the tolerance). Measured: 942 of 1,000 found,
    # 58 inconclusive at 6 pairs, none called no change or improvement (range rule alone: 843).
    ab = [_sequential_per_run_gate(rng, 0.9, 2.0, 0.05) for _ in range(1000)]
    ab_classes = [k for k, _ in ab]
    assert ab_classes.count("regression") >= 900, ab_classes.count("regression")
    assert ab_classes.count("regression") + ab_classes.count("inconclusive") == 1000
