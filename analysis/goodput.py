"""SLO goodput: the definitions, stated once, and the arithmetic of a rate sweep (pure functions).

Definitions (``analysis.reports.slo_goodput`` prints them in the report):

- **Good request**: it succeeded (status ``ok``: every token asked for arrived, usage
  checked) and every given SLO holds with ≤ — a value exactly on the limit is good:
  TTFT ≤ ttft, TPOT ≤ tpot, E2EL ≤ e2el (``analysis.latency`` defines the three). TPOT exists
  only for outputs of 2+ tokens: a 1-token output is judged on its other SLOs (its TPOT SLO
  counts as met). This is vLLM ``bench serve --goodput``'s rule for TPOT; AIPerf-style tools
  that judge a missing TPOT as a miss would call such a reply bad.
- **Counted requests** of a phase: those *scheduled* inside its measurement window
  (``loadgen.measure``: [t0 + warm-up, t0 + duration) for an open loop), whatever happened to
  them later (finished after the window, failed, timed out, aborted, never sent). Scheduled,
  not sent: a request the client sent late still belongs to the rate that offered it.
- **SLO attainment** = good counted requests ÷ all counted requests, so failures, time-outs
  and aborts count against it. **Attainment per SLO** = counted requests that succeeded and
  met that SLO ÷ all counted requests.
- **Rates** count events inside the window and divide by its length, the same window for
  every rate: offered = requests scheduled in it; achieved = requests sent in it; completed =
  successful completions (end of the response) in it; goodput = completions in it of good
  requests. Completions, not requests sent, because past saturation the backlog completes
  after the window at the server's maximum rate: dividing a window's requests by its length
  would report a completion rate above what the server can do, and dividing by first send →
  last completion (vLLM bench's duration) mixes the drain into the rate and makes it depend
  on the window's length.
- **Completed, pro rata** = Σ over successful requests of (their tokens that arrived inside
  the window ÷ all their tokens), ÷ the window's length: each success adds one completion,
  spread over its token stream. A server at its batch limit finishes a whole batch within a
  few steps, so the count of whole completions moves by a batch (8 in 8 s = 1 req/s) with
  where the window's edges fall; the pro-rata rate moves by the fraction of a batch's tokens
  that cross an edge. Both agree over a long steady window; the pro-rata rate is the one to
  compare with a saturation throughput.
- **Percentiles** (TTFT, TPOT, ITL, E2EL) are over the successful counted requests, with the
  failure count beside them; the **error-adjusted** view ranks every failed counted request
  above every success (a failure has no latency: a quantile that falls on one is shown as
  "fail").
- **Maximum sustainable rate**: the highest offered rate whose attainment ≥ the target,
  interpolated linearly in attainment between the highest measured rate that reaches the
  target and the next measured rate, which does not (the two bracketing points).
- **Replicas** for X req/s = ⌈X ÷ maximum sustainable rate⌉, assuming replicas scale
  linearly: each serves its share of the load as it would alone (even load balancing, no
  shared bottleneck).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from loadgen.measure import Window

QUANTILES = (50, 90, 99)


@dataclass(frozen=True)
class SLOLimits:
    """Latency limits in ms (``None``: that SLO is not applied)."""

    ttft_ms: float | None = None
    tpot_ms: float | None = None
    e2el_ms: float | None = None

    def given(self) -> dict[str, float]:
        """metric (ttft/tpot/e2el) → limit, for the SLOs that apply."""
        return {
            k: v
            for k, v in (("ttft", self.ttft_ms), ("tpot", self.tpot_ms), ("e2el", self.e2el_ms))
            if v is not None
        }


def judge(frame: pd.DataFrame, slo: SLOLimits) -> pd.DataFrame:
    """``frame`` (``analysis.latency.request_frame`` rows) with boolean columns ``ok``,
    ``ttft_met``, ``tpot_met``, ``e2el_met`` (met that SLO *and* succeeded; an SLO that is not
    given is met) and ``good`` (all of them), by the definitions of the module docstring."""
    out = frame.copy()
    ok = out["status"] == "ok"
    out["ok"] = ok
    for metric, limit in (("ttft", slo.ttft_ms), ("tpot", slo.tpot_ms), ("e2el", slo.e2el_ms)):
        values = out[f"{metric}_ms"].astype(float)
        if limit is None:
            met = ok
        elif metric == "tpot":
            # No TPOT (1-token output): judged on the other SLOs only.
            met = ok & ((out["output_tokens"] < 2) | (values <= limit))
        else:
            met = ok & (values <= limit)
        out[f"{metric}_met"] = met.astype(bool)
    out["good"] = out["ttft_met"] & out["tpot_met"] & out["e2el_met"]
    return out


@dataclass(frozen=True)
class WindowRates:
    """Counts and rates of one phase over its measurement window (see the module docstring).

    Rates in req/s; ``attainment`` and ``attainment_by_slo`` are fractions (``None`` when
    nothing was counted).
    """

    window_s: float
    counted: int
    sent: int
    ok: int
    good: int
    offered_rps: float
    achieved_rps: float
    completed_rps: float
    completed_prorata_rps: float
    goodput_rps: float
    attainment: float | None
    attainment_by_slo: dict[str, float]


def _tokens_inside_share(stamps: object, tokens: object, window: Window) -> float:
    """The fraction (0–1) of one request's generated tokens whose chunk arrived in ``window``
    (``stamps``: chunk arrival ns, ``tokens``: tokens per chunk); 0 without tokens."""
    at: list[int] = list(stamps) if isinstance(stamps, list) else []
    counts: list[int] = list(tokens) if isinstance(tokens, list) else []
    total = sum(counts)
    if total <= 0 or len(at) != len(counts):
        return 0.0
    inside = sum(n for t, n in zip(at, counts, strict=True)
                 if window.start_ns <= t <= window.end_ns)  # fmt: skip
    return inside / total


def _completed_prorata(judged: pd.DataFrame, window: Window) -> float:
    """Σ over successful rows of :func:`_tokens_inside_share` (completions, fractional)."""
    if "chunk_ns" not in judged or "chunk_tokens" not in judged:
        return 0.0
    ok = judged[judged["ok"]]
    return float(sum(_tokens_inside_share(s, t, window)
                     for s, t in zip(ok["chunk_ns"], ok["chunk_tokens"], strict=True)))  # fmt: skip


def _inside(stamps: pd.Series, window: Window) -> pd.Series:
    values = pd.to_numeric(stamps, errors="coerce")
    return (values >= window.start_ns) & (values <= window.end_ns)


def window_rates(judged: pd.DataFrame, window: Window, slo: SLOLimits) -> WindowRates:
    """The rates of a phase's judged rows (:func:`judge`) over ``window``.

    Raises:
        ValueError: the window has no positive length.
    """
    if window.length_s <= 0:
        raise ValueError("a measurement window needs a positive length")
    length = window.length_s
    counted = judged[_inside(judged["scheduled_ns"], window)]
    sent_in = _inside(judged["sent_ns"], window) if "sent_ns" in judged else pd.Series(False)
    ended_in = _inside(judged["end_ns"], window) if "end_ns" in judged else pd.Series(False)
    n = len(counted)
    by_slo = {m: float(counted[f"{m}_met"].sum()) / n for m in slo.given()} if n else {}
    return WindowRates(
        window_s=length,
        counted=n,
        sent=int(counted["sent_ns"].notna().sum()) if n else 0,
        ok=int(counted["ok"].sum()),
        good=int(counted["good"].sum()),
        offered_rps=n / length,
        achieved_rps=int(sent_in.sum()) / length,
        completed_rps=int((ended_in & judged["ok"]).sum()) / length,
        completed_prorata_rps=_completed_prorata(judged, window) / length,
        goodput_rps=int((ended_in & judged["good"]).sum()) / length,
        attainment=float(counted["good"].sum()) / n if n else None,
        attainment_by_slo=by_slo,
    )


def quantiles(values: Sequence[float] | np.ndarray | pd.Series) -> dict[str, float | None]:
    """p50/p90/p99 (numpy's linear interpolation) of the finite ``values``; ``None`` if none."""
    arr = np.asarray(values, dtype=float)
    arr = arr[np.isfinite(arr)]
    if arr.size == 0:
        return {f"p{q}": None for q in QUANTILES}
    return {
        f"p{q}": float(v) for q, v in zip(QUANTILES, np.percentile(arr, QUANTILES), strict=True)
    }


def error_adjusted_quantiles(
    values: Sequence[float] | np.ndarray | pd.Series, failed: int
) -> dict[str, float | None]:
    """p50/p90/p99 of ``values`` (successes) with ``failed`` failures ranked above all of them.

    Nearest rank (the smallest value with at least q % of all requests at or below it), so a
    quantile is either a measured latency or ``None`` when its rank falls on a failure.
    """
    arr = np.sort(np.asarray(values, dtype=float)[np.isfinite(np.asarray(values, dtype=float))])
    total = arr.size + failed
    out: dict[str, float | None] = {}
    for q in QUANTILES:
        if total == 0:
            out[f"p{q}"] = None
            continue
        rank = max(1, math.ceil(q / 100 * total))  # 1-based
        out[f"p{q}"] = float(arr[rank - 1]) if rank <= arr.size else None
    return out


@dataclass(frozen=True)
class RatePoint:
    """One measured rate of the sweep: offered req/s and its attainment."""

    phase: str
    offered_rps: float
    attainment: float


@dataclass(frozen=True)
class MaxRate:
    """The maximum sustainable rate and the measured rates that bracket it.

    Attributes:
        rate_rps: the interpolated rate; ``None`` when even the lowest rate misses the target
            (below the sweep) or nothing was measured.
        lower: the highest measured rate that reaches the target (``None``: none does).
        upper: the next measured rate, which does not (``None``: the highest rate reaches
            it, so the maximum is at least that rate and not bracketed).
    """

    rate_rps: float | None
    lower: RatePoint | None
    upper: RatePoint | None

    @property
    def bracketed(self) -> bool:
        return self.lower is not None and self.upper is not None


def max_sustainable_rate(points: Sequence[RatePoint], target: float) -> MaxRate:
    """The maximum sustainable rate of a sweep (points in any order), see the module docstring.

    Interpolation between the bracketing points (r₁, a₁ ≥ target) and (r₂, a₂ < target):
    r = r₁ + (a₁ − target) / (a₁ − a₂) × (r₂ − r₁). A dip below the target followed by a rate
    that reaches it again is not a crossing: the highest rate that reaches the target wins.
    """
    ordered = sorted(points, key=lambda p: p.offered_rps)
    reaching = [i for i, p in enumerate(ordered) if p.attainment >= target]
    if not reaching:
        return MaxRate(None, None, ordered[0] if ordered else None)
    i = reaching[-1]
    lower = ordered[i]
    if i == len(ordered) - 1:
        return MaxRate(lower.offered_rps, lower, None)
    upper = ordered[i + 1]
    share = (lower.attainment - target) / (lower.attainment - upper.attainment)
    return MaxRate(
        lower.offered_rps + share * (upper.offered_rps - lower.offered_rps), lower, upper
    )


def replicas_needed(target_rps: float, max_rate_rps: float) -> int:
    """⌈target ÷ maximum sustainable rate⌉ replicas, assuming linear scaling.

    Raises:
        ValueError: a non-positive maximum rate.
    """
    if max_rate_rps <= 0:
        raise ValueError("the maximum sustainable rate must be positive")
    # A tiny epsilon so 10 ÷ 2.5 stays 4 despite floating-point noise.
    return max(1, math.ceil(target_rps / max_rate_rps - 1e-9))
