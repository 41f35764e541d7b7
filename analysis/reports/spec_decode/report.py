"""spec-decode's report: acceptance per position and phase, predicted vs measured speedup, the
break-even acceptance, a keep/disable recommendation with hysteresis, and its verdicts.

The figures and their definitions are ``figures`` here (client chunks, τ over
every decode step, merged reads, the draft cost c, the model) and ``acceptance`` here
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
from analysis.reports.spec_decode.figures import SpecDecodeDetails, SpecRow, spec_decode_details
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


def _conc(r: SpecRow) -> str:
    """The row's concurrency (its phase name when the plan does not say)."""
    return str(r.concurrency) if r.concurrency is not None else r.phase


def _main_table(details: SpecDecodeDetails) -> list[str]:
    headers = ["case", "concurrency", "α", "τ", "per-position rate", "out tok/s",
               "TPOT mean ms", "ITL per token mean ms", "chunk gap mean ms", "measured ×",
               "predicted ×", "measured ÷ predicted"]  # fmt: skip
    rows = [
        [r.case, _conc(r), f(r.alpha, 3), f(r.tau, 2), _rates(r.per_position),
         f(r.output_tok_s), f(r.tpot_mean_ms, 2), f(r.client.itl_token_ms.mean, 2),
         f(r.client.chunk_gap_ms.mean, 2), f(r.measured_speedup, 2),
         f(r.predicted_speedup, 2), f(r.measured_over_predicted, 2)]
        for r in details.rows
    ]  # fmt: skip
    return [
        "## Speculative decoding per case and concurrency",
        "",
        "α = accepted ÷ draft tokens, τ = 1 + accepted ÷ drafts, per-position rate = accepted "
        "at position i ÷ drafts (counter deltas over the phase, summed over engines); ITL per "
        "token = each chunk's gap split evenly over its tokens, chunk gap = the gap itself "
        "(time per step); measured × = baseline TPOT mean ÷ case TPOT mean in the same phase; "
        "predicted × = E(α) ÷ (k·c + 1) (Leviathan et al., 2023; c and the model below).",
        "",
        table(headers, rows),
        "",
    ]


def _model_table(details: SpecDecodeDetails) -> list[str]:
    spec = [r for r in details.rows if r.kind is not None]
    headers = ["case", "concurrency", "k", "c used", "E(α)", "predicted ×",
               "predicted from steps ×", "measured ×", "break-even α (τ)", "implied c",
               "break-even α at implied c"]  # fmt: skip
    rows = [
        [r.case, _conc(r), f(r.k), f(r.c, 3), f(r.expected_tokens, 2),
         f(r.predicted_speedup, 2), f(r.predicted_from_steps, 2), f(r.measured_speedup, 2),
         f"{fmt(r.break_even_alpha)} ({fmt(r.break_even_tau, 2)})"
         if r.break_even_tau is not None else "–",
         f(r.c_implied, 3), f(r.break_even_alpha_implied, 3)]
        for r in spec
    ]  # fmt: skip
    sources: dict[str, list[str]] = {}
    for r in spec:
        if r.c_source and r.case not in sources.setdefault(r.c_source, []):
            sources[r.c_source].append(r.case)
    return [
        "### The speedup model",
        "",
        "E(α) = (1 − α^(k+1)) ÷ (1 − α) tokens per target step; predicted × = E(α) ÷ (k·c + "
        "1); predicted from steps × = the measured tokens per decode step (τ over every step) "
        "÷ (k·c + 1), which isolates the cost model from the independence assumption; "
        "break-even α solves E(α) = k·c + 1 (τ = k·c + 1 tokens per step). c = (TPOT_case × s "
        "÷ TPOT_baseline − 1) ÷ k with s = the case's tokens per decode step: a step delivers "
        "s tokens in TPOT × s, against TPOT_baseline for one token without speculation, and "
        "the model's step is k draft steps + one target step. Measured on draft-random "
        "(acceptance ≈ 0, s ≈ 1) it is the draft's own cost, used for every draft of that "
        "size; implied c is the same formula on each case's own figures: the cost that would "
        "make the model match its TPOT exactly (for n-gram: verifying k + 1 tokens per step, "
        "which the model counts as free).",
        "",
        table(headers, rows),
        "",
        "c used, from:",
        "",
        *(f"- {', '.join(cases)}: {source}" for source, cases in sources.items()),
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
            [r.case, _conc(r), f(r.drafts, 0), f(r.draft_tokens, 0), f(r.accepted, 0),
             " + ".join(f(a, 0) for a in r.accepted_per_position or []) or "–",
             _rates(r.per_position), _rates(r.conditional), _rates(independent)]
        )  # fmt: skip
    headers = ["case", "concurrency", "drafts", "draft tokens", "accepted",
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
        [r.case, _conc(r), f(r.ttft_mean_ms), f(r.tpot_mean_ms, 2), f(r.tpot_p95_ms, 2),
         f(r.client.itl_token_ms.mean, 2), f(r.client.itl_token_ms.p50, 2),
         f(r.client.itl_token_ms.p95, 2), f(r.client.chunk_gap_ms.mean, 2),
         f(r.client.chunk_gap_ms.p50, 2), f(r.client.chunk_gap_ms.p95, 2)]
        for r in details.rows
    ]  # fmt: skip
    headers = ["case", "concurrency", "TTFT mean", "TPOT mean", "TPOT p95",
               "ITL per token mean", "ITL per token p50", "ITL per token p95",
               "chunk gap mean", "chunk gap p50", "chunk gap p95"]  # fmt: skip
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
    rows = [
        [r.case, _conc(r), f(r.client.chunks), f(r.client.tokens_per_chunk, 3), f(r.tau, 3),
         f"{r.chunk_vs_tau:+.1%}" if r.chunk_vs_tau is not None else "–",
         f(r.tau_all_steps, 3),
         f"{r.chunk_vs_tau_all_steps:+.1%}" if r.chunk_vs_tau_all_steps is not None else "–",
         f(r.steps_without_drafts, 0)]
        for r in details.rows
    ]  # fmt: skip
    headers = ["case", "concurrency", "decode chunks", "tokens per chunk", "τ",
               "tokens per chunk vs τ", "τ over every step",
               "tokens per chunk vs τ over every step", "steps without proposals"]  # fmt: skip
    return [
        "### Client tokens per chunk against the server's τ",
        "",
        "A step that accepts j proposals delivers j + 1 tokens in one chunk. τ counts only "
        "the steps that carried proposals; τ over every step = decode tokens ÷ decode steps "
        "from the server's counters: (Δgeneration tokens − requests) ÷ (that − Δaccepted), at "
        "least Δdrafts steps; steps without proposals (n-gram found no match) deliver one "
        "token. The check compares the client with τ over every step.",
        "",
        table(headers, rows),
        "",
    ]


def _merge_section(details: SpecDecodeDetails) -> list[str]:
    rows = [
        [r.case, _conc(r), f(r.client.step_max), f(r.client.over_step),
         f"{r.client.over_step_scrape}/{r.client.over_step}" if r.client.over_step else "–",
         pct(r.client.other_scrape_share)]
        for r in details.rows
    ]  # fmt: skip
    headers = [
        "case",
        "concurrency",
        "most tokens per step",
        "merged chunks",
        "merged with a scrape in the gap",
        "other chunks with a scrape in the gap %",
    ]
    lines = []
    for r in details.rows:
        c = r.client
        if r.kind is not None or c.merged_token_share is None:
            continue
        if not c.over_step:
            lines.append(
                f"- {r.case} at {_conc(r)}: none of the {c.chunks} decode chunks carried more "
                "than one token."
            )
            continue
        lines.append(
            f"- {r.case} at {_conc(r)}: {c.over_step} of {c.chunks} decode chunks carried more "
            f"than one token: {pct(c.merged_token_share)} % of the steps arrived in another "
            f"step's read, and tokens per chunk read {fmt(c.tokens_per_chunk)} instead of "
            f"1.000. {c.over_step_scrape} of the {c.over_step} had a /metrics scrape start in "
            f"their gap, against {pct(c.other_scrape_share)} % of the other chunks."
        )
    return [
        "### Merged reads",
        "",
        "The client stamps one entry per network read, so steps whose events arrive in one "
        "read count as one chunk. A chunk carrying more tokens than one step can deliver (1 "
        "without speculation, k + 1 with) is such a merge; the last two columns say how often "
        "a /metrics scrape started during its gap and during the other chunks' gaps. Without "
        "speculation every step delivers one token, so the baseline measures how much merges "
        "raise tokens per chunk; a longer step (higher concurrency, or speculation) leaves "
        "less room for them.",
        "",
        table(headers, rows),
        "",
        *lines,
        *([""] if lines else []),
    ]


def _hysteresis_table(details: SpecDecodeDetails) -> list[str]:
    h = details.hysteresis
    rows = [
        [r.case, _conc(r), f(r.measured_speedup, 2), r.outcome or "–", fmt(r.alpha),
         fmt(r.alpha_off), fmt(r.break_even_alpha), fmt(r.alpha_on)]
        for r in details.rows
        if r.kind is not None
    ]  # fmt: skip
    headers = ["case", "concurrency", "measured ×", "outcome", "α", "α_off", "break-even α",
               "α_on"]  # fmt: skip
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
    """The scenario's sections after the cases (see the module docstrings for definitions):
    the case × concurrency table first, then the model, acceptance per position, the client's
    latency and chunks, merged reads, capacities, the model's limits and keep/disable."""
    capacities = ", ".join(f"{n} {f(t)}" for n, t in details.capacities.items())
    out = _main_table(details) + _model_table(details) + _position_table(details)
    out += _latency_table(details) + _chunk_table(details) + _merge_section(details)
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


def _phase_label(details: SpecDecodeDetails, phase: str) -> str:
    """``concurrency N`` for a phase (its name when the plan does not say)."""
    row = next(r for r in details.rows if r.phase == phase)
    return f"concurrency {row.concurrency}" if row.concurrency is not None else phase


def _per_position_plot(details: SpecDecodeDetails, out: Path) -> Path:
    """Per-position acceptance per case, one panel per phase; dotted: α^i (independence)."""
    phases = _phases(details)
    fig, axes = plt.subplots(1, len(phases), figsize=(5 * len(phases), 3.8), squeeze=False)
    for ax, phase in zip(axes[0], phases, strict=True):
        most = 1
        for r in details.rows:
            if r.phase != phase or not r.per_position:
                continue
            x = np.arange(1, len(r.per_position) + 1)
            most = max(most, len(x))
            (line,) = ax.plot(x, r.per_position, marker="o", label=f"{r.case} (α {fmt(r.alpha)})")
            if r.alpha is not None and 0 < r.alpha < 1:
                ax.plot(x, [r.alpha**i for i in x], linestyle=":", color=line.get_color())
        ax.set_xticks(np.arange(1, most + 1))
        ax.set_xlabel("proposal position")
        ax.set_ylabel("accepted ÷ drafts")
        ax.set_ylim(-0.02, 1.02)
        ax.set_title(_phase_label(details, phase))
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
    labels = [_phase_label(details, ph) for ph in phases]
    ax.set_xticks(np.arange(len(phases)) + width * (len(cases) - 1) / 2, labels)
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
    ax.set_xticks(x, [f"{r.case}\n{_conc(r)}" for r in rows], fontsize=7)
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
