"""What more pairs would decide an undecided paired key metric
(``analysis.gate_paired_keys.paired_pairs_needed``): toward whichever class its point lies in,
against ``classify``'s band. Expected figures derived by hand below each case (z₀.₉₇₅ = 1.959964).
"""

from __future__ import annotations

import pytest

from analysis.gate_paired import PairedEstimate
from analysis.gate_paired_keys import paired_pairs_needed


def _est(scale: str, point: float, se: float, pairs: int) -> PairedEstimate:
    return PairedEstimate(scale=scale, point=point, low=point, high=point, se=se,  # type: ignore[arg-type]
                          pairs=pairs, per_pair=(), method="random-effects")  # fmt: skip


@pytest.mark.parametrize(
    ("scale", "point", "se", "pairs", "tolerance", "better", "extra", "toward"),
    [
        # A TTFT ratio 0.85 (seen in an A/A trace-replay gate): beyond the improvement edge
        # ln 0.93 = −0.072571 by 0.089948; 2 · (1.959964 · 0.1 / 0.089948)² = 9.50 → 10 pairs,
        # 8 more. It used to read "sits on the tolerance edge".
        ("log", 0.85, 0.1, 2, 0.07, "lower", 8, "improvement"),
        # 1/0.85 = 1.17647: beyond ln 1.07 = 0.067659 by 0.094860; 2 · 2.06616² = 8.54 → 7 more.
        ("log", 1 / 0.85, 0.1, 2, 0.07, "lower", 7, "regression"),
        # A hit-rate drop of 0.03 (higher is better) past −0.02 by 0.01: 2 · 1.959964² = 7.68 → 6.
        ("difference", -0.03, 0.01, 2, 0.02, "higher", 6, "regression"),
        # Inside the band, 0.01 from the nearer edge: 3 · (1.959964 · 0.005 / 0.01)² = 2.88 → 3,
        # at least one more pair.
        ("difference", 0.01, 0.005, 3, 0.02, "higher", 1, "no change"),
    ],
)
def test_an_undecided_change_gets_the_pairs_toward_its_own_side(
    scale: str, point: float, se: float, pairs: int, tolerance: float, better: str,
    extra: int, toward: str,
) -> None:  # fmt: skip
    got, line = paired_pairs_needed(_est(scale, point, se, pairs), tolerance, better, 0.95)
    assert got == extra
    assert f"~{extra} more pair(s) toward {toward}" in line


def test_a_change_on_the_tolerance_edge_is_never_decided_by_pairs() -> None:
    got, line = paired_pairs_needed(_est("difference", 0.02, 0.01, 2), 0.02, "lower", 0.95)
    assert got is None
    assert "sits on the tolerance edge" in line
