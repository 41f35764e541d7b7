"""spec-decode's report: acceptance per position and phase, predicted vs measured speedup, the
break-even acceptance, a keep/disable recommendation with hysteresis, and its verdicts.

The figures and their definitions are ``analysis.spec_decode_figures`` (client chunks, τ over
every decode step, merged reads, the draft cost c, the model) and ``analysis.speculative``
(the counter arithmetic and Leviathan et al.'s speedup formula). The report ends with one line
per case: does speculation pay, at which concurrency, by how much, at which acceptance, and
where it would stop paying.
"""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any, ClassVar

import matplotlib.pyplot as plt
import numpy as np

from analysis.checks import fmt
from analysis.load import RunData
from analysis.markdown import f, pct, table
from analysis.models import CaseSummary, Verdict
from analysis.plots import save
from analysis.reports import Evaluator, PhaseColumn, ScenarioReport
from analysis.spec_decode_figures import SpecDecodeDetails, spec_decode_details
from scenarios.spec_decode import (
    ChunkTokensMatchAcceptanceLength,
    PerPositionNonIncreasing,
    PerPositionSumsToAccepted,
    SpeedupDirection,
)


def _undecided(check: Any, name: str, why: str) -> Verdict:
    return Verdict(case=check.case, check=name, passed=None, detail=why)


def _speedup(check: SpeedupDirection, _: CaseSummary, details: SpecDecodeDetails) -> Verdict:
    name = f"{'faster' if check.faster else 'slower'} than {check.baseline} in {check.phase} (TPOT)"
    row, base = details.row(check.case, check.phase), details.row(check.baseline, check.phase)
    if row is None or base is None or row.tpot_mean_ms is None or base.tpot_mean_ms is None:
        return _undecided(check, name, "TPOT of the case or of the baseline missing")
    speedup = base.tpot_mean_ms / row.tpot_mean_ms
    detail = (
        f"TPOT mean {row.tpot_mean_ms:.2f} ms vs {base.tpot_mean_ms:.2f} ms: measured speedup "
        f"×{speedup:.2f}"
    )
    passed = speedup > 1 if check.faster else speedup < 1
    return Verdict(case=check.case, check=name, passed=passed, detail=detail)


def _non_increasing(
    check: PerPositionNonIncreasing, _: CaseSummary, details: SpecDecodeDetails
) -> Verdict:
    name = f"per-position acceptance non-increasing in {check.phase}"
    row = details.row(check.case, check.phase)
    if row is None or row.per_position is None:
        return _undecided(check, name, "no drafts (or no spec-decode counters) in the phase")
    rates = row.per_position
    rise = max((b - a for a, b in itertools.pairwise(rates)), default=0.0)
    detail = (
        f"rates {' / '.join(f'{x:.3f}' for x in rates)}; largest rise {rise:+.3f} "
        f"(tolerance {check.tolerance})"
    )
    return Verdict(case=check.case, check=name, passed=rise <= check.tolerance, detail=detail)


def _sums(check: PerPositionSumsToAccepted, _: CaseSummary, details: SpecDecodeDetails) -> Verdict:
    name = f"accepted per position sum to accepted in {check.phase}"
    row = details.row(check.case, check.phase)
    if row is None or row.accepted is None or row.accepted_per_position is None:
        return _undecided(check, name, "spec-decode counters missing")
    total = sum(row.accepted_per_position)
    detail = (
        f"{' + '.join(f'{a:.0f}' for a in row.accepted_per_position)} = {total:.0f} vs "
        f"accepted {row.accepted:.0f}"
    )
    passed = abs(total - row.accepted) <= check.tolerance_tokens
    return Verdict(case=check.case, check=name, passed=passed, detail=detail)


def _chunks(
    check: ChunkTokensMatchAcceptanceLength, _: CaseSummary, details: SpecDecodeDetails
) -> Verdict:
    name = f"client tokens per chunk agree with τ in {check.phase} (±{check.tolerance:.0%})"
    row = details.row(check.case, check.phase)
    if row is None or row.tau is None or row.client.tokens_per_chunk is None:
        return _undecided(check, name, "no drafts or no decode chunks in the phase")
    target = row.tau_all_steps if row.tau_all_steps is not None else row.tau
    diff = row.client.tokens_per_chunk / target - 1
    without = row.steps_without_drafts
    detail = (
        f"client {row.client.tokens_per_chunk:.3f} tokens per decode chunk vs τ over every "
        f"decode step {fmt(row.tau_all_steps)} ({diff:+.1%}); τ over steps with proposals "
        f"{row.tau:.3f} ({fmt(row.chunk_vs_tau and row.chunk_vs_tau * 100, 1)} %); steps "
        f"without proposals ≈ {f(without, 0)}; chunks of more than one step's tokens "
        f"{row.client.over_step} (merged reads)"
    )
    return Verdict(case=check.case, check=name, passed=abs(diff) <= check.tolerance, detail=detail)


# --- Markdown -------------------------------------------------------------------------------


def _rates(values: list[float] | list[float | None] | None) -> str:
    return " / ".join(fmt(v) for v in values) if values else "–"


def _main_table(details: SpecDecodeDetails) -> list[str]:
    headers = ["case", "phase", "TPOT mean ms", "out tok/s", "α", "τ", "tokens/chunk",
               "chunk vs τ", "c used", "E(α)", "predicted ×", "predicted from steps ×",
               "measured ×", "measured ÷ predicted", "break-even α (τ)",
               "break-even α, implied c"]  # fmt: skip
    rows = []
    for r in details.rows:
        rows.append(
            [r.case, r.phase, f(r.tpot_mean_ms, 2), f(r.output_tok_s), f(r.alpha, 3),
             f(r.tau, 2), f(r.client.tokens_per_chunk, 2),
             f"{r.chunk_vs_tau:+.1%}" if r.chunk_vs_tau is not None else "–", f(r.c, 3),
             f(r.expected_tokens, 2), f(r.predicted_speedup, 2), f(r.predicted_from_steps, 2),
             f(r.measured_speedup, 2), f(r.measured_over_predicted, 2),
             f"{fmt(r.break_even_alpha)} ({fmt(r.break_even_tau, 2)})"
             if r.break_even_tau is not None else "–", f(r.break_even_alpha_implied, 3)]
        )  # fmt: skip
    return [
        "## Speculative decoding: acceptance and speedup per case and concurrency",
        "",
        "α = accepted ÷ draft tokens, τ = 1 + accepted ÷ drafts (counter deltas over the "
        "phase); tokens/chunk = the client's tokens per decode chunk (first chunk of each "
        "request left out); c = draft step cost in target steps (see below); E(α) = (1 − "
        "α^(k+1)) ÷ (1 − α); predicted × = E(α) ÷ (k·c + 1) (Leviathan et al., 2023); "
        "predicted from steps × = measured tokens per step (τ over every decode step) ÷ "
        "(k·c + 1); measured × = baseline TPOT mean ÷ case TPOT mean in the same phase; "
        "break-even α solves E(α) = k·c + 1 (τ = k·c + 1); the last column solves it at the "
        "case's implied c (below).",
        "",
        table(headers, rows),
        "",
    ]


def _position_table(details: SpecDecodeDetails) -> list[str]:
    rows = []
    for r in details.rows:
        if r.kind is None:
            continue
        independent = (
            [r.alpha**i for i in range(1, len(r.per_position or []) + 1)]
            if r.alpha is not None
            else None
        )
        rows.append(
            [r.case, r.phase, f(r.k), f(r.drafts, 0), f(r.draft_tokens, 0), f(r.accepted, 0),
             " + ".join(f(a, 0) for a in r.accepted_per_position or []) or "–",
             _rates(r.per_position), _rates(r.conditional), _rates(independent)]
        )  # fmt: skip
    headers = ["case", "phase", "k", "drafts", "draft tokens", "accepted",
               "accepted per position", "per-position rate (÷ drafts)",
               "conditional rate (÷ previous position)", "α^i (independence)"]  # fmt: skip
    return [
        "### Acceptance per position",
        "",
        "Per-position rate = accepted at position i ÷ drafts; conditional rate = accepted at "
        "position i ÷ accepted at position i − 1 (drafts for the first): one constant α if "
        "acceptance were independent per position, as the speedup model assumes; α^i is what "
        "that would give per position.",
        "",
        table(headers, rows),
        "",
    ]


def _latency_table(details: SpecDecodeDetails) -> list[str]:
    rows = [
        [r.case, r.phase, f(r.ttft_mean_ms), f(r.tpot_mean_ms, 2), f(r.tpot_p95_ms, 2),
         f(r.client.itl_token_ms.mean, 2), f(r.client.itl_token_ms.p50, 2),
         f(r.client.itl_token_ms.p95, 2), f(r.client.chunk_gap_ms.mean, 2),
         f(r.client.chunk_gap_ms.p50, 2), f(r.client.chunk_gap_ms.p95, 2), f(r.output_tok_s)]
        for r in details.rows
    ]  # fmt: skip
    headers = ["case", "phase", "TTFT mean", "TPOT mean", "TPOT p95", "ITL per token mean",
               "ITL per token p50", "ITL per token p95", "chunk gap mean", "chunk gap p50",
               "chunk gap p95", "out tok/s"]  # fmt: skip
    return [
        "### Client side: ITL per token and per chunk",
        "",
        "ms. ITL per token = each chunk's gap split evenly over its tokens (a 4-token chunk "
        "60 ms after the previous one gives four 15 ms values); chunk gap = the gap itself, one "
        "value per chunk: the time per step, which speculation lengthens while it shortens the "
        "time per token.",
        "",
        table(headers, rows),
        "",
    ]


def _chunk_table(details: SpecDecodeDetails) -> list[str]:
    rows = []
    for r in details.rows:
        c = r.client
        rows.append(
            [r.case, r.phase, f(c.chunks), f(c.tokens_per_chunk, 3), f(r.tau, 3),
             f(r.tau_all_steps, 3),
             f"{r.chunk_vs_tau_all_steps:+.1%}" if r.chunk_vs_tau_all_steps is not None else "–",
             f(r.steps_without_drafts, 0), f"{c.over_step} (> {c.step_max})",
             f"{c.over_step_scrape}/{c.over_step}" if c.over_step else "–",
             pct(c.other_scrape_share)]
        )  # fmt: skip
    headers = ["case", "phase", "decode chunks", "tokens per chunk", "τ", "τ over every step",
               "tokens per chunk vs τ over every step", "steps without proposals",
               "merged chunks (tokens)", "merged with a scrape in the gap",
               "other chunks with a scrape in the gap %"]  # fmt: skip
    return [
        "### Client tokens per chunk against the server's τ",
        "",
        "τ over every step = decode tokens ÷ decode steps from the server's counters: "
        "(Δgeneration tokens − requests) ÷ (that − Δaccepted), at least Δdrafts steps; steps "
        "without proposals (n-gram found no match) deliver one token and are not in τ. Merged "
        "chunks carry more tokens than one step delivers: several steps arrived in one network "
        "read; the last two columns say how often a /metrics scrape started during their gap "
        "and during the other chunks' gaps.",
        "",
        table(headers, rows),
        "",
    ]


def _merge_lines(details: SpecDecodeDetails) -> list[str]:
    out = []
    for r in details.rows:
        c = r.client
        if r.kind is not None or c.merged_token_share is None:
            continue
        if not c.over_step:
            out.append(
                f"- {r.case} {r.phase}: none of the {c.chunks} decode chunks carried more than "
                "one token."
            )
            continue
        out.append(
            f"- {r.case} {r.phase}: {c.over_step} of {c.chunks} decode chunks carried more than "
            f"one token: {pct(c.merged_token_share)} % of the steps arrived in another step's "
            f"read, and tokens per chunk read {fmt(c.tokens_per_chunk)} instead of 1.000. "
            f"{c.over_step_scrape} of the {c.over_step} had a /metrics scrape start in their gap, "
            f"against {pct(c.other_scrape_share)} % of the other chunks."
        )
    if not out:
        return []
    return [
        "Merged reads, measured where every step delivers exactly one token (no speculation): "
        "a merge raises tokens per chunk above τ by the share of steps merged; a longer step "
        "(higher concurrency, or speculation) leaves less room for it.",
        "",
        *out,
        "",
    ]


def _cost_lines(details: SpecDecodeDetails) -> list[str]:
    rows = [
        [r.case, r.phase, f(r.c, 3), r.c_source or "–", f(r.c_implied, 3)]
        for r in details.rows
        if r.kind is not None
    ]
    return [
        "### Draft cost c",
        "",
        "c = (TPOT_case × s ÷ TPOT_baseline − 1) ÷ k, s = the case's tokens per decode step "
        "(τ over every step): a step delivers s tokens in TPOT × s, against TPOT_baseline for "
        "one token without speculation, and the model's step is k draft steps + one target "
        "step. Measured on draft-random (acceptance ≈ 0, s ≈ 1) it is the draft's own cost, "
        "used for every draft of that size; 'implied c' is the same formula on each case's own "
        "figures: the cost that would make the model match its TPOT exactly (for n-gram: "
        "verifying k + 1 tokens per step, which the model counts as free).",
        "",
        table(["case", "phase", "c used", "from", "implied c"], rows),
        "",
    ]


def _hysteresis_table(details: SpecDecodeDetails) -> list[str]:
    h = details.hysteresis
    rows = [
        [r.case, r.phase, f(r.measured_speedup, 2), r.outcome or "–", fmt(r.alpha),
         fmt(r.alpha_off), fmt(r.break_even_alpha), fmt(r.alpha_on)]
        for r in details.rows
        if r.kind is not None
    ]  # fmt: skip
    headers = ["case", "phase", "measured ×", "outcome", "α", "α_off", "break-even α", "α_on"]
    return [
        "### Keep or disable (hysteresis)",
        "",
        f"Band h = {h}: pays when the measured speedup ≥ {1 + h:.2f}, does not pay when ≤ "
        f"{1 - h:.2f}, break-even in between (keep whatever is configured: no flapping). A "
        "live switch on the measured acceptance: disable below α_off (predicted speedup "
        f"{1 - h:.2f}), enable again only above α_on (predicted speedup {1 + h:.2f}).",
        "",
        table(headers, rows),
        "",
    ]


def spec_markdown(details: SpecDecodeDetails) -> list[str]:
    """The scenario's sections after the cases (see the module docstrings for definitions)."""
    capacities = ", ".join(f"{n} {f(t)}" for n, t in details.capacities.items())
    out = _main_table(details) + _position_table(details) + _latency_table(details)
    out += _chunk_table(details)
    out += _merge_lines(details) + _cost_lines(details)
    out += [f"KV capacity per case (tokens; a draft's layers keep their KV in the same cache): "
            f"{capacities}.", ""]  # fmt: skip
    if details.notes:
        out += ["### Where the model's assumptions do not hold", ""]
        out += [f"- {n}" for n in details.notes] + [""]
    out += _hysteresis_table(details)
    return out


# --- plots ------------------------------------------------------------------------------


def _phases(details: SpecDecodeDetails) -> list[str]:
    return list(dict.fromkeys(r.phase for r in details.rows))


def _cases(details: SpecDecodeDetails) -> list[str]:
    return list(dict.fromkeys(r.case for r in details.rows))


def _per_position_plot(details: SpecDecodeDetails, out: Path) -> Path:
    """Per-position acceptance per case, one panel per phase; dotted: α^i (independence)."""
    phases = _phases(details)
    fig, axes = plt.subplots(1, len(phases), figsize=(5 * len(phases), 3.8), squeeze=False)
    for ax, phase in zip(axes[0], phases, strict=True):
        for r in details.rows:
            if r.phase != phase or not r.per_position:
                continue
            x = np.arange(1, len(r.per_position) + 1)
            (line,) = ax.plot(x, r.per_position, marker="o", label=f"{r.case} (α {fmt(r.alpha)})")
            if r.alpha is not None and 0 < r.alpha < 1:
                ax.plot(x, [r.alpha**i for i in x], linestyle=":", color=line.get_color())
        ax.set_xlabel("proposal position")
        ax.set_ylabel("accepted ÷ drafts")
        ax.set_ylim(-0.02, 1.02)
        ax.set_title(phase)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.suptitle("Per-position acceptance (dotted: α^i, what independent acceptance would give)")
    return save(fig, out)


def _grouped(ax: Any, details: SpecDecodeDetails, value: Any, label: str) -> None:
    phases, cases = _phases(details), _cases(details)
    width = 0.8 / max(len(cases), 1)
    for i, case in enumerate(cases):
        ys = [value(details.row(case, ph)) for ph in phases]
        xs = np.arange(len(phases)) + i * width
        ax.bar(xs, [y if y is not None else 0 for y in ys], width, label=case)
    ax.set_xticks(np.arange(len(phases)) + width * (len(cases) - 1) / 2, phases)
    ax.set_ylabel(label)
    ax.grid(axis="y", alpha=0.3)
    ax.legend(fontsize=7)


def _tpot_plot(details: SpecDecodeDetails, out: Path) -> Path:
    """TPOT mean per case, grouped by phase (concurrency)."""
    fig, ax = plt.subplots(figsize=(8, 4))
    _grouped(ax, details, lambda r: r.tpot_mean_ms if r else None, "TPOT mean (ms)")
    ax.set_title("TPOT per case and concurrency")
    return save(fig, out)


def _speedup_plot(details: SpecDecodeDetails, out: Path) -> Path:
    """Predicted (from α) and measured speedup per speculating case and phase."""
    rows = [r for r in details.rows if r.kind is not None]
    fig, ax = plt.subplots(figsize=(max(6, 1.2 * len(rows)), 4))
    x = np.arange(len(rows))
    predicted = [r.predicted_speedup or 0 for r in rows]
    from_tau = [r.predicted_from_steps or 0 for r in rows]
    measured = [r.measured_speedup or 0 for r in rows]
    ax.bar(x - 0.27, predicted, 0.27, label="predicted, E(α) ÷ (kc + 1)")
    ax.bar(x, from_tau, 0.27, label="predicted, measured tokens per step ÷ (kc + 1)")
    ax.bar(x + 0.27, measured, 0.27, label="measured, TPOT ratio")
    ax.axhline(1.0, color="black", linewidth=1)
    ax.set_xticks(x, [f"{r.case}\n{r.phase}" for r in rows], fontsize=7)
    ax.set_ylabel("speedup over baseline (×)")
    ax.set_title("Predicted vs measured speedup")
    ax.grid(axis="y", alpha=0.3)
    ax.legend(fontsize=7)
    return save(fig, out)


class SpecDecodeReport(ScenarioReport[SpecDecodeDetails]):
    evaluators: ClassVar[dict[type, Evaluator]] = {
        SpeedupDirection: _speedup,
        PerPositionNonIncreasing: _non_increasing,
        PerPositionSumsToAccepted: _sums,
        ChunkTokensMatchAcceptanceLength: _chunks,
    }

    def details(self, run: RunData, cases: dict[str, CaseSummary]) -> SpecDecodeDetails:
        return spec_decode_details(run, cases)

    def phase_columns(self, details: SpecDecodeDetails | None) -> list[PhaseColumn]:
        if details is None:
            return []

        def cell(attr: str, digits: int = 3) -> Any:
            def get(case: str, phase: str) -> str:
                row = details.row(case, phase)
                return f(getattr(row, attr), digits) if row is not None else "–"

            return get

        return [
            PhaseColumn("α", "TPOT mean", cell("alpha")),
            PhaseColumn("τ", "TPOT mean", cell("tau", 2)),
            PhaseColumn("speedup ×", "TPOT mean", cell("measured_speedup", 2)),
        ]

    def markdown(self, details: SpecDecodeDetails | None) -> list[str]:
        if details is None or not details.rows:
            return []
        return spec_markdown(details)

    def closing(self, details: SpecDecodeDetails | None) -> list[str]:
        if details is None or not details.answers:
            return []
        return ["## Is speculation paying off?", "", *(f"- {a}" for a in details.answers), ""]

    def plots(
        self,
        run: RunData,
        cases: dict[str, CaseSummary],
        details: SpecDecodeDetails | None,
        out_dir: Path,
    ) -> list[Path]:
        if details is None or not details.rows:
            return []
        return [
            _per_position_plot(details, out_dir / "spec_per_position.png"),
            _tpot_plot(details, out_dir / "spec_tpot.png"),
            _speedup_plot(details, out_dir / "spec_speedup.png"),
        ]


REPORT = SpecDecodeReport()
