"""analysis.reports.spec_decode.acceptance: acceptance from vLLM's counters, and the speedup
model's arithmetic."""

from __future__ import annotations

import math

import pytest

from analysis.reports.spec_decode.acceptance import (
    alpha_for_speedup,
    break_even_alpha,
    expected_tokens_per_step,
    implied_draft_cost,
    predicted_speedup,
    spec_counters,
)
from metrics.parse import parse_samples


def _page(values: dict[str, tuple[float, float, float, tuple[float, float, float]]]) -> str:
    """An exposition page of two engines' spec-decode counters (with their ``_created``
    samples, a Unix time that must never be summed): engine → (drafts, draft tokens,
    accepted, accepted per position)."""
    lines = []
    for engine, (drafts, draft_tokens, accepted, per_pos) in values.items():
        labels = f'engine="{engine}",model_name="m"'
        for name, value in (
            ("num_drafts", drafts),
            ("num_draft_tokens", draft_tokens),
            ("num_accepted_tokens", accepted),
        ):
            lines.append(f"vllm:spec_decode_{name}_total{{{labels}}} {value}")
            lines.append(f"vllm:spec_decode_{name}_created{{{labels}}} 1.7e9")
        for pos, value in enumerate(per_pos):
            pos_labels = f'{labels},position="{pos}"'
            lines.append(
                f"vllm:spec_decode_num_accepted_tokens_per_pos_total{{{pos_labels}}} {value}"
            )
            lines.append(
                f"vllm:spec_decode_num_accepted_tokens_per_pos_created{{{pos_labels}}} 1.7e9"
            )
    return "\n".join(lines) + "\n"


def test_two_engines_counters_are_summed_into_acceptance_figures() -> None:
    # Engine 0 starts the phase at drafts 5 / tokens 15 / accepted 7 / per position 4, 2, 1
    # and grows by 10 / 30 / 15 / (8, 5, 2); engine 1 starts at 0 and grows by 30 / 90 / 45 /
    # (24, 14, 7). Phase deltas: drafts 40, draft tokens 120, accepted 60, per position
    # 32, 19, 9 → α = 60 / 120 = 0.50, τ = 1 + 60 / 40 = 2.5, per position 32 / 40 = 0.80,
    # 19 / 40 = 0.475, 9 / 40 = 0.225; the per-position counts add up: 32 + 19 + 9 = 60.
    before = _page({"0": (5, 15, 7, (4, 2, 1)), "1": (0, 0, 0, (0, 0, 0))})
    after = _page({"0": (15, 45, 22, (12, 7, 3)), "1": (30, 90, 45, (24, 14, 7))})
    samples = parse_samples(before, 100) + parse_samples(after, 200)
    figures = spec_counters(samples, 100, 200)
    assert figures is not None
    assert (figures.drafts, figures.draft_tokens, figures.accepted) == (40, 120, 60)
    assert figures.accepted_per_position == (32, 19, 9)
    assert figures.acceptance_rate == pytest.approx(0.50)
    assert figures.mean_acceptance_length == pytest.approx(2.5)
    assert figures.per_position_rates == pytest.approx((0.80, 0.475, 0.225))
    assert figures.per_position_excess == 0


def test_positions_are_ordered_numerically_and_missing_counters_give_none() -> None:
    # Ten positions: "10" must come after "9", not after "1".
    lines = [
        "vllm:spec_decode_num_drafts_total 10",
        "vllm:spec_decode_num_draft_tokens_total 110",
        "vllm:spec_decode_num_accepted_tokens_total 55",
    ]
    lines += [
        f'vllm:spec_decode_num_accepted_tokens_per_pos_total{{position="{p}"}} {10 - p}'
        for p in range(11)
    ]
    zero = parse_samples("\n".join(line.rsplit(" ", 1)[0] + " 0" for line in lines) + "\n", 1)
    figures = spec_counters(zero + parse_samples("\n".join(lines) + "\n", 2), 1, 2)
    assert figures is not None
    assert figures.accepted_per_position == tuple(float(10 - p) for p in range(11))
    # No speculation configured: no such family on the page.
    assert spec_counters(parse_samples("vllm:num_preemptions_total 3\n", 1), 0, 2) is None


def test_a_position_counter_not_read_in_the_window_leaves_per_position_figures_unknown() -> None:
    # The totals are read at t = 1 and t = 2 (deltas 40 / 120 / 60); the per-position family
    # only at t = 1 (its reading at t = 2 was lost), so its deltas are unknown, never 0: with
    # 0 the counts would "add up" to 0 against 60 accepted and fail a check on no evidence.
    before = _page({"0": (0, 0, 0, (0, 0, 0))})
    after = "\n".join(
        line
        for line in _page({"0": (40, 120, 60, (32, 19, 9))}).splitlines()
        if "per_pos" not in line
    )
    figures = spec_counters(parse_samples(before, 1) + parse_samples(after + "\n", 2), 1, 2)
    assert figures is not None
    assert figures.acceptance_rate == pytest.approx(0.5)  # 60 / 120
    assert figures.accepted_per_position is None
    assert figures.per_position_rates is None
    assert figures.per_position_excess is None


def test_no_drafts_leave_the_rates_undefined() -> None:
    zero = parse_samples(_page({"0": (0, 0, 0, (0, 0, 0))}), 1)
    figures = spec_counters(zero + parse_samples(_page({"0": (0, 0, 0, (0, 0, 0))}), 2), 1, 2)
    assert figures is not None
    assert figures.acceptance_rate is None
    assert figures.mean_acceptance_length is None
    assert figures.per_position_rates is None


def test_expected_tokens_per_step_at_the_ends_and_in_the_middle() -> None:
    # α = 0: only the target's own token; α = 1: all k proposals plus the bonus token.
    assert expected_tokens_per_step(0.0, 3) == 1.0
    assert expected_tokens_per_step(1.0, 3) == 4.0
    assert expected_tokens_per_step(1 - 1e-9, 3) == pytest.approx(4.0, rel=1e-6)
    # α = 0.5, k = 3: (1 − 0.5^4) / (1 − 0.5) = 0.9375 / 0.5 = 1.875 = 1 + 0.5 + 0.25 + 0.125.
    assert expected_tokens_per_step(0.5, 3) == pytest.approx(1.875)
    with pytest.raises(ValueError):
        expected_tokens_per_step(1.5, 3)


def test_predicted_speedup_at_alpha_zero_one_and_a_middle_value() -> None:
    # α = 0 with a free proposer (n-gram, c = 0) neither gains nor loses; with c = 0.1 each
    # step costs 3 × 0.1 + 1 = 1.3 target steps for one token: 1 / 1.3 = 0.769.
    assert predicted_speedup(0.0, 3, 0.0) == 1.0
    assert predicted_speedup(0.0, 3, 0.1) == pytest.approx(1 / 1.3)
    # α → 1: 4 tokens per step: ×4 when free, 4 / 1.3 = 3.077 at c = 0.1.
    assert predicted_speedup(1.0, 3, 0.0) == 4.0
    assert predicted_speedup(1.0, 3, 0.1) == pytest.approx(4 / 1.3)
    # α = 0.5, c = 0.05: 1.875 / 1.15 = 1.6304.
    assert predicted_speedup(0.5, 3, 0.05) == pytest.approx(1.875 / 1.15)
    with pytest.raises(ValueError):
        predicted_speedup(0.5, 3, -0.1)


def test_break_even_acceptance_solves_predicted_speedup_one() -> None:
    # k = 1: E = 1 + α, so α* = c exactly.
    assert break_even_alpha(1, 0.2) == pytest.approx(0.2)
    # k = 2, c = 0.375: 1 + α + α² = 1.75 → α² + α − 0.75 = 0 → α* = (−1 + √4) / 2 = 0.5.
    assert break_even_alpha(2, 0.375) == pytest.approx(0.5)
    # k = 3, c = 0.1: α* ≥ c (E ≤ 1 + kα) and predicted speedup there is 1.
    alpha = break_even_alpha(3, 0.1)
    assert alpha is not None and alpha >= 0.1
    assert predicted_speedup(alpha, 3, 0.1) == pytest.approx(1.0)
    # A free proposer pays at any acceptance; a draft as dear as the target never pays.
    assert break_even_alpha(3, 0.0) == 0.0
    assert break_even_alpha(3, 1.0) is None


def test_hysteresis_thresholds_bracket_the_break_even() -> None:
    # k = 1, c = 0.2: E = 1 + α = s × 1.2 → α = 1.2 s − 1: 0.14 at s = 0.95, 0.26 at s = 1.05.
    assert alpha_for_speedup(1, 0.2, 0.95) == pytest.approx(0.14)
    assert alpha_for_speedup(1, 0.2, 1.05) == pytest.approx(0.26)
    # Below what α = 0 already reaches: 0; above what α = 1 reaches: none.
    assert alpha_for_speedup(3, 0.0, 0.95) == 0.0
    assert alpha_for_speedup(3, 0.0, 4.5) is None


def test_draft_cost_from_a_case_that_accepts_nothing() -> None:
    # τ = 1 (nothing accepted): TPOT 20 ms against 16 ms → each step costs 1.25 target steps,
    # 0.25 of it for 3 draft steps: c = 0.25 / 3 = 0.0833.
    assert implied_draft_cost(20.0, 1.0, 16.0, 3) == pytest.approx(0.25 / 3)
    # τ = 2.5 at TPOT 8 ms: a step takes 20 ms, so again c = 0.0833.
    assert implied_draft_cost(8.0, 2.5, 16.0, 3) == pytest.approx(0.25 / 3)
    assert math.isclose(implied_draft_cost(16.0, 1.0, 16.0, 3), 0.0, abs_tol=1e-12)
