"""Welch's t-interval for a difference of two means, and the Student-t quantile it needs,
without scipy (not a dependency of the project).

**Interval** (Welch, *Biometrika* 34, 1947; Satterthwaite, *Biometrics Bulletin* 2, 1946).
Two independent samples of n_b and n_c values with variances v_b, v_c (n − 1 denominators) in
the space the interval is built in: SE = √(v_b/n_b + v_c/n_c), the Welch–Satterthwaite degrees
of freedom ν = SE⁴ / ((v_b/n_b)²/(n_b − 1) + (v_c/n_c)²/(n_c − 1)), and the interval
point ± t_{(1+c)/2, ν} · SE at confidence c. ν lies between min(n_b, n_c) − 1 and
n_b + n_c − 2. With both variances 0 the interval is the point (SE = 0, ν undefined).

**Quantile** (Hill, "Algorithm 396: Student's t-quantiles", *Comm. ACM* 13, 1970): exact for
ν = 1 and 2, an asymptotic expansion around the normal quantile otherwise, valid for
non-integer ν (as Welch's ν is); within 0.05 % of the exact quantile just above ν = 2 and
closer as ν grows (four decimals of the tables at ν = 3, 4, 5, 10, 30). Checked against
table values in tests/analysis/test_compare_stats.py (t_{0.975,2} = 4.303, t_{0.975,5} = 2.571,
t_{0.995,10} = 3.169, t_{0.975,30} = 2.042).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from statistics import NormalDist


def t_quantile(p: float, df: float) -> float:
    """The ``p`` quantile (0.5 < p < 1) of Student's t with ``df`` (≥ 1) degrees of freedom
    (Hill 1970, module docstring).

    Raises:
        ValueError: ``p`` outside (0.5, 1) or ``df`` < 1.
    """
    if not 0.5 < p < 1 or not df >= 1:
        raise ValueError(f"p in (0.5, 1) and df ≥ 1 needed (got {p}, {df})")
    two_tail = 2 * (1 - p)
    n = df
    if n == 1:
        return 1 / math.tan(two_tail * math.pi / 2)
    if n == 2:
        return math.sqrt(2 / (two_tail * (2 - two_tail)) - 2)
    a = 1 / (n - 0.5)
    b = 48 / (a * a)
    c = ((20700 * a / b - 98) * a - 16) * a + 96.36
    d = ((94.5 / (b + c) - 3) / b + 1) * math.sqrt(a * math.pi / 2) * n
    x = d * two_tail
    y = x ** (2 / n)
    if y > 0.05 + a:  # the expansion around the normal quantile
        x = NormalDist().inv_cdf(two_tail / 2)
        y = x * x
        if n < 5:
            c += 0.3 * (n - 4.5) * (x + 0.6)
        c = (((0.05 * d * x - 5) * x - 7) * x - 2) * x + b + c
        y = (((((0.4 * y + 6.3) * y + 36) * y + 94.5) / c - y - 3) / b + 1) * x
        y = math.expm1(a * y * y)
    else:  # far tail, small n
        y = ((1 / (((n + 6) / (n * y) - 0.089 * d - 0.822) * (n + 2) * 3) + 0.5 / (n + 4)) * y
             - 1) * (n + 1) / (n + 2) + 1 / y  # fmt: skip
    return math.sqrt(n * y)


@dataclass(frozen=True)
class WelchInterval:
    """``point ± half_width``: ``se`` the standard error, ``df`` Welch–Satterthwaite's ν
    (``None`` when both variances are 0 and the interval is the point)."""

    low: float
    high: float
    half_width: float
    se: float
    df: float | None


def welch_interval(
    point: float, var_b: float, n_b: int, var_c: float, n_c: int, confidence: float
) -> WelchInterval:
    """Welch's interval around ``point`` from per-value variances ``var_b``, ``var_c`` of
    samples of ``n_b``, ``n_c`` values (module docstring).

    Raises:
        ValueError: a side with fewer than 2 values, a negative variance, or a confidence
            outside (0, 1).
    """
    if n_b < 2 or n_c < 2 or var_b < 0 or var_c < 0 or not 0 < confidence < 1:
        raise ValueError(
            f"2+ values a side, variances ≥ 0 and confidence in (0, 1) needed "
            f"(got n {n_b}, {n_c}; var {var_b}, {var_c}; confidence {confidence})"
        )
    eb, ec = var_b / n_b, var_c / n_c
    se2 = eb + ec
    if se2 == 0:
        return WelchInterval(point, point, 0.0, 0.0, None)
    df = se2 * se2 / (eb * eb / (n_b - 1) + ec * ec / (n_c - 1))
    half = t_quantile((1 + confidence) / 2, df) * math.sqrt(se2)
    return WelchInterval(point - half, point + half, half, math.sqrt(se2), df)
