"""Speculative-decoding arithmetic: acceptance from vLLM's counters, and the speedup model.

**From the server's counters** (per phase: deltas summed over ``engine`` labels; vLLM
``vllm/v1/spec_decode/metrics.py``, ``SpecDecodingProm``):

- acceptance rate α = Δ``spec_decode_num_accepted_tokens`` ÷ Δ``spec_decode_num_draft_tokens``;
- mean acceptance length τ = 1 + Δaccepted ÷ Δ``spec_decode_num_drafts`` (tokens per
  verification step, the bonus token included, as vLLM logs it);
- per-position acceptance rate at position i = Δ``spec_decode_num_accepted_tokens_per_pos``
  {position=i} ÷ Δdrafts. A draft accepted up to position j counts once at each of 0 … j − 1
  (``SpecDecodingStats.observe_draft``), so the per-position counts add up to Δaccepted and
  can never rise from one position to the next.

**The speedup model** (Leviathan, Kalman & Matias, 2023, "Fast Inference from Transformers via
Speculative Decoding", §3.1 and Theorem 3.8). With k proposals per step, each accepted
independently with probability α, and a draft step costing c target steps:

- expected tokens per target step E(α) = (1 − α^(k+1)) ÷ (1 − α) (= 1 + α + … + α^k;
  1 at α = 0, k + 1 as α → 1);
- predicted speedup = E(α) ÷ (k·c + 1): each step runs the draft k times and the target once
  (the verification of k + 1 tokens is assumed to cost one target step);
- break-even acceptance α*: the α where the predicted speedup is 1, i.e. E(α*) = k·c + 1; none
  when c ≥ 1 (E < k + 1 for every α < 1). Since E(α) ≤ 1 + k·α, α* ≥ c: speculation cannot
  pay when α ≤ c (docs/scenarios/spec-decode.md).

**Draft cost c from measured figures.** A step takes TPOT × (tokens it delivers) of wall time,
and delivers τ tokens on average, so a case's step time is TPOT_case × τ_case; the model's
step time is T·(k·c + 1) with T = TPOT_baseline (one token per step). Hence
c = (TPOT_case × τ_case ÷ TPOT_baseline − 1) ÷ k (:func:`implied_draft_cost`). Measured on a
draft whose proposals are (almost) never accepted (τ ≈ 1), this is the draft's own cost: k
draft steps plus the verification overhead, per target step. Measured on any other case it is
the cost the model would need to match that case's TPOT: the gap between the two is what the
model leaves out (verification of k + 1 tokens costs more than one, batching).

Where the model does not hold: it assumes acceptance independent per position (real drafts
are right in runs: E(α) ≠ τ) and batch size 1 (at high concurrency a step verifies k + 1
tokens of every request, so the target step itself gets dearer and c changes with the batch).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from metrics.samples import Sample, counter_delta, series, series_by

#: Counter families of speculative decoding (canonical names, ``metrics.names``).
DRAFTS = "spec_decode_num_drafts"
DRAFT_TOKENS = "spec_decode_num_draft_tokens"
ACCEPTED = "spec_decode_num_accepted_tokens"
ACCEPTED_PER_POS = "spec_decode_num_accepted_tokens_per_pos"


@dataclass(frozen=True)
class SpecCounters:
    """Speculative-decoding counter deltas of one phase, summed over engines.

    Attributes:
        drafts: verification steps that carried proposals (requests × steps).
        draft_tokens: tokens proposed.
        accepted: proposed tokens the target accepted.
        accepted_per_position: accepted tokens at each proposal position 0 … k − 1;
            ``None`` when any position's counter was not read inside the window (a partial
            list would read as a sum that does not add up).
    """

    drafts: float
    draft_tokens: float
    accepted: float
    accepted_per_position: tuple[float, ...] | None

    @property
    def acceptance_rate(self) -> float | None:
        """α = accepted ÷ draft tokens; ``None`` without drafts."""
        return self.accepted / self.draft_tokens if self.draft_tokens > 0 else None

    @property
    def mean_acceptance_length(self) -> float | None:
        """τ = 1 + accepted ÷ drafts (tokens per verification step); ``None`` without drafts."""
        return 1 + self.accepted / self.drafts if self.drafts > 0 else None

    @property
    def per_position_rates(self) -> tuple[float, ...] | None:
        """Accepted at position i ÷ drafts, per position; ``None`` without drafts or without
        per-position counts."""
        if self.drafts <= 0 or self.accepted_per_position is None:
            return None
        return tuple(a / self.drafts for a in self.accepted_per_position)

    @property
    def per_position_excess(self) -> float | None:
        """Σ per-position accepted − accepted (0 when the counts add up); ``None`` without
        per-position counts."""
        if self.accepted_per_position is None:
            return None
        return sum(self.accepted_per_position) - self.accepted


def spec_counters(samples: Sequence[Sample], start_ns: int, end_ns: int) -> SpecCounters | None:
    """The phase's speculative-decoding counter deltas over [start_ns, end_ns].

    Each family is summed over every label set (engines) at each scrape before the delta is
    taken (``metrics.samples.series``); the per-position family is split by its ``position``
    label first (``series_by``), positions in numeric order. Returns ``None`` when the server
    exposes no speculative-decoding counter (no speculation configured).
    """
    deltas = {}
    for name in (DRAFTS, DRAFT_TOKENS, ACCEPTED):
        delta = counter_delta(series(samples, name), start_ns, end_ns)
        if delta is None:
            return None
        deltas[name] = delta
    by_position = series_by(samples, ACCEPTED_PER_POS, label="position")
    positions = sorted(by_position, key=lambda p: int(p) if p.isdigit() else 10**9)
    per_pos = [counter_delta(by_position[p], start_ns, end_ns) for p in positions]
    known = None if any(d is None for d in per_pos) else tuple(d for d in per_pos if d is not None)
    return SpecCounters(deltas[DRAFTS], deltas[DRAFT_TOKENS], deltas[ACCEPTED], known)


def expected_tokens_per_step(alpha: float, k: int) -> float:
    """E(α) = (1 − α^(k+1)) ÷ (1 − α) tokens per target step (Leviathan et al., eq. 1);
    k + 1 at α = 1 (the limit).

    Raises:
        ValueError: α outside [0, 1] or k < 1.
    """
    if not 0.0 <= alpha <= 1.0 or k < 1:
        raise ValueError(f"need 0 ≤ α ≤ 1 and k ≥ 1, got α={alpha}, k={k}")
    if alpha == 1.0:
        return float(k + 1)
    return (1.0 - alpha ** (k + 1)) / (1.0 - alpha)


def predicted_speedup(alpha: float, k: int, c: float) -> float:
    """E(α) ÷ (k·c + 1): the model's speedup in time per token over no speculation.

    Raises:
        ValueError: α outside [0, 1], k < 1 or c < 0.
    """
    if c < 0:
        raise ValueError(f"draft cost c must be ≥ 0, got {c}")
    return expected_tokens_per_step(alpha, k) / (k * c + 1.0)


def alpha_for_speedup(k: int, c: float, speedup: float = 1.0) -> float | None:
    """The acceptance α at which the predicted speedup equals ``speedup``: E(α) = speedup ×
    (k·c + 1), solved by bisection (E rises monotonically from 1 to k + 1 on [0, 1]).

    0.0 when even α = 0 reaches it; ``None`` when no α < 1 does (e.g. speedup 1 with c ≥ 1).
    """
    target = speedup * (k * max(c, 0.0) + 1.0)
    if target <= 1.0:
        return 0.0
    if target >= k + 1:
        return None
    lo, hi = 0.0, 1.0
    for _ in range(60):  # 2^-60: far below any figure shown
        mid = (lo + hi) / 2
        if expected_tokens_per_step(mid, k) < target:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


def break_even_alpha(k: int, c: float) -> float | None:
    """α* with predicted speedup 1: E(α*) = k·c + 1 (``None`` when c ≥ 1: never pays)."""
    return alpha_for_speedup(k, c, 1.0)


def implied_draft_cost(
    tpot_case_ms: float, tau_case: float, tpot_baseline_ms: float, k: int
) -> float:
    """c = (TPOT_case × τ_case ÷ TPOT_baseline − 1) ÷ k (module docstring): the cost per
    draft step, in target steps, that makes the model's step time match the case's.
    ``tau_case`` is the case's tokens per decode step (τ, or τ over every step where some
    steps carried no proposal).

    May come out negative when speculating made each step cheaper than the baseline's (noise,
    or a model the formula does not describe); callers show it as measured.
    """
    return (tpot_case_ms * tau_case / tpot_baseline_ms - 1.0) / k
