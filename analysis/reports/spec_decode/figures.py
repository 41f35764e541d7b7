"""spec-decode's figures: per case and phase, acceptance, client chunks, and the speedup model.

Pure computations from the run's raw data and generic summaries into typed rows
(:class:`SpecRow`); ``report`` here renders them and decides the verdicts.

Server side (``acceptance`` here): per phase, α = accepted ÷ draft tokens, τ = 1 +
accepted ÷ drafts, per-position rates = accepted at position i ÷ drafts, from counter deltas
summed over engines; the per-position counts must add up to the accepted total.

Client side, per phase over successful requests (``analysis.latency``): a step that accepts j
proposals delivers j + 1 tokens in one chunk, so

- **tokens per decode chunk** = decode tokens ÷ decode chunks, each request's first chunk
  (the prefill's one token) left out;
- **ITL per token** (a chunk's gap split evenly over its tokens) and **chunk gap** (time per
  step), both shown, labelled;
- TPOT and output tokens/s.

Comparing tokens per chunk with τ: τ counts only steps that carried proposals, the client
sees every step. Steps without proposals (the n-gram proposer found no match, typically the
first tokens of an output) deliver one token, so the comparison is made with **τ over every
decode step** = decode tokens ÷ decode steps, where the server's counters give decode tokens
= Δgeneration_tokens − requests (one token per request comes from its prefill) and decode
steps = decode tokens − Δaccepted (each step delivers its accepted tokens plus one), at
least Δdrafts; steps without proposals = decode steps − Δdrafts. It equals τ when every step
proposed. What is
left between it and the client's figure: the last step of a request may accept proposals
beyond ``max_tokens`` that are never delivered (≤ k tokens per request, counted by the
server, not sent), and **merged reads**: the client stamps one entry per network read, so
steps whose events arrive in one read count as one chunk. Merges are measured, not assumed:
a decode chunk carrying more tokens than one step can deliver (1 without speculation, k + 1
with) must be several steps; the baseline (one token per step) shows how often it happens
at each concurrency, and each such chunk is matched against the ``/metrics`` scrapes that
started during its gap (the server's API process, which shares a core with the client here,
renders the page meanwhile).

Speedup (``acceptance`` here): measured = baseline TPOT mean ÷ case TPOT mean in the same
phase (same requests, same concurrency); predicted = E(α) ÷ (k·c + 1) (Leviathan et al., 2023)
with c = the draft cost per step in target steps: for draft models, measured from the
``draft-random`` case of the same phase (same draft size; it accepts ≈ nothing, so its step
time TPOT × τ against the baseline's TPOT is k draft steps + one verification); for n-gram,
0 (a lookup); an attached server without a random draft has no measured c: 0 is used, so its
prediction is an upper bound. ``predicted from τ`` = τ ÷ (k·c + 1) uses the measured tokens
per step instead of E(α), so it isolates the cost model; the implied c is the cost that would
make the model match the case's TPOT exactly. Break-even: α* with E(α*) = k·c + 1, i.e.
τ* = k·c + 1 tokens per step.

Keep or disable, with hysteresis (docs/scenarios/spec-decode.md): with a band h
(``--hysteresis``) around a speedup of 1, a case **pays** when the measured speedup ≥ 1 + h,
**does not pay** when ≤ 1 − h, and is **break-even** in between (keep the current setting: no
flapping). For a live switch on the acceptance: disable below α_off (predicted speedup 1 − h),
enable above α_on (predicted speedup 1 + h).
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from typing import Any, Literal

import numpy as np

from analysis.checks import fmt
from analysis.latency import describe
from analysis.load import CaseData, RunData
from analysis.models import CaseSummary, Stats
from analysis.reports.spec_decode.acceptance import (
    SpecCounters,
    alpha_for_speedup,
    break_even_alpha,
    expected_tokens_per_step,
    implied_draft_cost,
    predicted_speedup,
    spec_counters,
)
from scenarios.plan import CaseSpec
from scenarios.spec_decode import BASELINE
from server.frozen import FrozenModel

RANDOM_DRAFT = "draft-random"

Outcome = Literal["pays", "does not pay", "break-even"]


class ClientChunks(FrozenModel):
    """Decode chunks of a phase (each successful request's first chunk left out).

    Attributes:
        chunks / tokens: decode chunks and the tokens they carried.
        tokens_per_chunk: tokens ÷ chunks.
        over_step: chunks carrying more tokens than one step delivers (``step_max``): each is
            several steps that arrived in one read.
        over_step_scrape: how many of those had a ``/metrics`` scrape start inside their gap.
        other_scrape_share: the same share among the other chunks (for comparison).
        merged_token_share: (tokens − chunks) ÷ tokens; without speculation (one token per
            step) the share of steps that arrived merged into another's read.
    """

    chunks: int
    tokens: int
    tokens_per_chunk: float | None
    step_max: int
    over_step: int
    over_step_scrape: int
    other_scrape_share: float | None
    merged_token_share: float | None
    itl_token_ms: Stats
    chunk_gap_ms: Stats


class SpecRow(FrozenModel):
    """One case in one phase: client figures, acceptance, and the speedup model.

    Speedups are baseline ÷ case TPOT means (``None`` without a baseline); α, τ, rates are
    fractions / tokens per step; c in target steps per draft step.
    """

    case: str
    kind: str | None
    phase: str
    concurrency: int | None
    k: int | None
    requests_ok: int
    tpot_mean_ms: float | None
    tpot_p50_ms: float | None
    tpot_p95_ms: float | None
    ttft_mean_ms: float | None
    output_tok_s: float | None
    client: ClientChunks
    preemptions: float | None
    drafts: float | None = None
    draft_tokens: float | None = None
    accepted: float | None = None
    accepted_per_position: list[float] | None = None
    per_position_excess: float | None = None
    alpha: float | None = None
    tau: float | None = None
    per_position: list[float] | None = None
    conditional: list[float | None] | None = None
    decode_steps: float | None = None
    steps_without_drafts: float | None = None
    tau_all_steps: float | None = None
    chunk_vs_tau: float | None = None
    chunk_vs_tau_all_steps: float | None = None
    c: float | None = None
    c_source: str | None = None
    c_implied: float | None = None
    expected_tokens: float | None = None
    predicted_speedup: float | None = None
    predicted_from_steps: float | None = None
    measured_speedup: float | None = None
    measured_over_predicted: float | None = None
    break_even_alpha: float | None = None
    break_even_tau: float | None = None
    break_even_alpha_implied: float | None = None
    alpha_off: float | None = None
    alpha_on: float | None = None
    outcome: Outcome | None = None


class SpecDecodeDetails(FrozenModel):
    """Rows per case and phase, capacities, notes, and one answer line per case."""

    hysteresis: float
    baseline: str | None
    capacities: dict[str, int | None]
    rows: list[SpecRow]
    notes: list[str]
    answers: list[str]

    def row(self, case: str, phase: str) -> SpecRow | None:
        return next((r for r in self.rows if r.case == case and r.phase == phase), None)


# --- client side ------------------------------------------------------------------------


def client_chunks(case: CaseData, phase: str, step_max: int) -> ClientChunks:
    """Decode-chunk figures of ``phase`` (see :class:`ClientChunks`); ``step_max`` is the most
    tokens one step delivers (1 without speculation, k + 1 with)."""
    scrapes = sorted(int(s.start_ns) for s in case.scrapes if s.start_ns is not None)
    tokens: list[int] = []
    gaps_ms: list[float] = []
    scraped: list[bool] = []
    for r in case.records:
        if r.phase != phase or r.status != "ok":
            continue
        stamps, counts = list(r.chunk_ns or []), list(r.chunk_tokens or [])
        for i in range(1, min(len(stamps), len(counts))):
            tokens.append(int(counts[i]))
            gaps_ms.append((stamps[i] - stamps[i - 1]) / 1e6)
            j = bisect.bisect_left(scrapes, stamps[i - 1])
            scraped.append(j < len(scrapes) and scrapes[j] <= stamps[i])
    toks = np.asarray(tokens, dtype=int)
    gaps = np.asarray(gaps_ms, dtype=float)
    over = toks > step_max
    scraped_arr = np.asarray(scraped, dtype=bool)
    others = scraped_arr[~over]
    total = int(toks.sum())
    keep = toks > 0
    return ClientChunks(
        chunks=len(tokens),
        tokens=total,
        tokens_per_chunk=total / len(tokens) if tokens else None,
        step_max=step_max,
        over_step=int(over.sum()),
        over_step_scrape=int(scraped_arr[over].sum()),
        other_scrape_share=float(others.mean()) if others.size else None,
        merged_token_share=(total - len(tokens)) / total if total else None,
        itl_token_ms=Stats.model_validate(describe(np.repeat(gaps[keep] / toks[keep], toks[keep]))),
        chunk_gap_ms=Stats.model_validate(describe(gaps)),
    )


# --- per case and phase -----------------------------------------------------------------


def case_kind(spec: CaseSpec | None) -> str | None:
    """``ngram``, ``random``/``echo``/``truncated`` (embedded drafts), another speculative
    method's name, ``attached`` (unknown), or ``None`` (no speculation)."""
    if spec is None or spec.server is None:
        return None if spec is not None and spec.name == BASELINE else "attached"
    server = spec.server
    if server.draft is not None:
        return server.draft.kind
    if server.speculative_config is not None:
        return str(server.speculative_config.get("method", "speculative"))
    return None


def proposals_k(spec: CaseSpec | None, counters: SpecCounters | None) -> int | None:
    """k of a case: from its server configuration, else the positions its counters have."""
    server = spec.server if spec is not None else None
    if server is not None and server.draft is not None:
        return server.draft.num_speculative_tokens
    if server is not None and server.speculative_config is not None:
        value = server.speculative_config.get("num_speculative_tokens")
        if isinstance(value, int):
            return value
    if counters is not None and counters.accepted_per_position:
        return len(counters.accepted_per_position)
    return None


def _conditional(per_pos: Sequence[float], drafts: float) -> list[float | None]:
    """P(position i accepted | position i − 1 accepted): a_i ÷ a_(i−1), a_(−1) = drafts.
    Under the model's independence every entry is the same α."""
    out: list[float | None] = []
    previous = drafts
    for a in per_pos:
        out.append(a / previous if previous > 0 else None)
        previous = a
    return out


def _relative(a: float | None, b: float | None) -> float | None:
    return a / b - 1 if a is not None and b else None


def _outcome(speedup: float | None, band: float) -> Outcome | None:
    if speedup is None:
        return None
    if speedup >= 1 + band:
        return "pays"
    if speedup <= 1 - band:
        return "does not pay"
    return "break-even"


def _acceptance(row: dict[str, Any], counters: SpecCounters, generation: float | None) -> None:
    """Fill ``row`` with the server's acceptance figures and the decode-step accounting."""
    row.update(
        drafts=counters.drafts,
        draft_tokens=counters.draft_tokens,
        accepted=counters.accepted,
        accepted_per_position=(
            list(counters.accepted_per_position)
            if counters.accepted_per_position is not None
            else None
        ),
        per_position_excess=counters.per_position_excess,
        alpha=counters.acceptance_rate,
        tau=counters.mean_acceptance_length,
        per_position=list(counters.per_position_rates or ()) if counters.drafts else None,
        conditional=_conditional(counters.accepted_per_position, counters.drafts)
        if counters.drafts and counters.accepted_per_position is not None
        else None,
    )
    if generation is not None:
        decode_tokens = generation - row["requests_ok"]
        # Every step that proposed is a step; accepted proposals cut off by max_tokens are
        # counted but never delivered, which can push the estimate below the drafts.
        steps = max(decode_tokens - counters.accepted, counters.drafts)
        if steps > 0:
            row.update(
                decode_steps=steps,
                steps_without_drafts=steps - counters.drafts,
                tau_all_steps=decode_tokens / steps,
            )


def _model(row: dict[str, Any], base_tpot: float | None) -> None:
    """Fill ``row`` with the speedup model's figures (needs α, k, c).

    Tokens per step for the implied cost and the prediction from measured figures is τ over
    every decode step where known (steps without proposals deliver one token), else τ.
    """
    alpha, k, c = row.get("alpha"), row.get("k"), row.get("c")
    step_tokens = row.get("tau_all_steps") or row.get("tau")
    tpot = row.get("tpot_mean_ms")
    if base_tpot and tpot:
        row["measured_speedup"] = base_tpot / tpot
        if step_tokens is not None and k:
            implied = implied_draft_cost(tpot, step_tokens, base_tpot, k)
            row["c_implied"] = implied
            row["break_even_alpha_implied"] = break_even_alpha(k, max(implied, 0.0))
    if alpha is None or not k or c is None:
        return
    cost = max(c, 0.0)
    row["expected_tokens"] = expected_tokens_per_step(alpha, k)
    row["predicted_speedup"] = predicted_speedup(alpha, k, cost)
    if step_tokens is not None:
        row["predicted_from_steps"] = step_tokens / (k * cost + 1)
    if row.get("measured_speedup") is not None:
        row["measured_over_predicted"] = row["measured_speedup"] / row["predicted_speedup"]
    row["break_even_alpha"] = break_even_alpha(k, cost)
    row["break_even_tau"] = k * cost + 1


def _row(
    run: RunData,
    data: CaseData,
    summary: CaseSummary,
    phase: str,
    base_tpot: float | None,
    cost: tuple[float | None, str | None],
    band: float,
) -> SpecRow | None:
    p = summary.phases.get(phase)
    window = next((w for w in data.phases if w.phase == phase), None)
    if p is None or window is None:
        return None
    counters = spec_counters(data.samples, int(window.start_ns), int(window.end_ns))
    kind = case_kind(data.spec)
    k = proposals_k(data.spec, counters)
    planned = run.plan.phases_of(data.spec) if data.spec is not None else ()
    spec_phase = next((s for s in planned if s.name == phase), None)
    arrival = spec_phase.arrival if spec_phase is not None else None
    row: dict[str, Any] = {
        "case": data.name,
        "kind": kind,
        "phase": phase,
        "concurrency": getattr(arrival, "concurrency", None),
        "k": k if kind is not None else None,
        "requests_ok": p.ok,
        "tpot_mean_ms": p.tpot_ms.mean,
        "tpot_p50_ms": p.tpot_ms.p50,
        "tpot_p95_ms": p.tpot_ms.p95,
        "ttft_mean_ms": p.ttft_ms.mean,
        "output_tok_s": p.output_throughput_tok_s,
        "client": client_chunks(data, phase, (k or 0) + 1 if kind is not None else 1),
        "preemptions": p.counter_deltas.get("num_preemptions"),
    }
    if kind is not None and counters is not None:
        _acceptance(row, counters, p.counter_deltas.get("generation_tokens"))
        row["c"], row["c_source"] = cost
    per_chunk = row["client"].tokens_per_chunk
    row["chunk_vs_tau"] = _relative(per_chunk, row.get("tau"))
    row["chunk_vs_tau_all_steps"] = _relative(per_chunk, row.get("tau_all_steps"))
    if kind is not None:
        _model(row, base_tpot)
        k_, c_ = row.get("k"), row.get("c")
        if k_ and c_ is not None:
            row["alpha_off"] = alpha_for_speedup(k_, max(c_, 0.0), 1 - band)
            row["alpha_on"] = alpha_for_speedup(k_, max(c_, 0.0), 1 + band)
        row["outcome"] = _outcome(row.get("measured_speedup"), band)
    return SpecRow(**row)


def _random_draft_cost(
    run: RunData, cases: dict[str, CaseSummary], phase: str, base_tpot: float | None
) -> float | None:
    """c from the random draft's own figures in ``phase`` (its implied cost: τ ≈ 1)."""
    data = next((c for c in run.cases if c.name == RANDOM_DRAFT), None)
    summary = cases.get(RANDOM_DRAFT)
    if data is None or summary is None or not base_tpot:
        return None
    p = summary.phases.get(phase)
    window = next((w for w in data.phases if w.phase == phase), None)
    if p is None or window is None or p.tpot_ms.mean is None:
        return None
    counters = spec_counters(data.samples, int(window.start_ns), int(window.end_ns))
    k = proposals_k(data.spec, counters)
    tau = counters.mean_acceptance_length if counters is not None else None
    if tau is None or not k:
        return None
    return implied_draft_cost(p.tpot_ms.mean, tau, base_tpot, k)


def _cost(kind: str | None, random_c: float | None) -> tuple[float | None, str | None]:
    """(c, where it came from) for a case of ``kind`` in a phase where draft-random's figures
    give ``random_c`` (``None``: no such case)."""
    if kind == "ngram":
        return 0.0, "n-gram: a lookup in the request's own tokens, c ≈ 0"
    if kind in ("random", "echo", "truncated"):
        if random_c is None:
            return None, "no draft-random case in the phase to measure c"
        return random_c, "draft-random in the same phase (same draft size, accepts ≈ nothing)"
    if random_c is not None:
        return random_c, "draft-random in the same phase"
    return 0.0, "not measured (no draft-random case): c = 0, so the prediction is an upper bound"


def answer_line(case: str, rows: Sequence[SpecRow]) -> str:
    """``case: speculation pays at concurrency 1: measured speedup ×2.56, acceptance α 0.949
    (τ 3.74), break-even α 0.000 (τ 1.00); …`` — one line per case, every phase.

    The break-even is at the c the prediction used; where that c is 0 by assumption (n-gram)
    the break-even at the case's implied cost is added (the model's "any acceptance pays" is
    not what was measured), and where no c was measured (no draft-random case) it is given at
    the implied cost alone.
    """
    parts = []
    for r in rows:
        where = f"concurrency {r.concurrency}" if r.concurrency else r.phase
        if r.measured_speedup is None or r.outcome is None:
            parts.append(f"no baseline at {where}: speedup not measured")
            continue
        verb = {"pays": "pays", "does not pay": "does not pay", "break-even": "breaks even"}
        text = (
            f"speculation {verb[r.outcome]} at {where}: measured speedup "
            f"×{r.measured_speedup:.2f}, acceptance α {fmt(r.alpha)} (τ {fmt(r.tau, 2)}), "
        )
        implied = (
            f"at its measured step cost (implied c {fmt(r.c_implied)})"
            if r.c_implied is not None
            else ""
        )
        if r.break_even_tau is None and r.c_implied is not None and r.k:
            tau = r.k * max(r.c_implied, 0.0) + 1
            text += f"break-even α {fmt(r.break_even_alpha_implied)} (τ {tau:.2f}) {implied}"
        else:
            text += f"break-even α {fmt(r.break_even_alpha)} (τ {fmt(r.break_even_tau, 2)})"
            if r.c == 0 and r.c_implied is not None and r.c_implied > 0:
                text += f", {fmt(r.break_even_alpha_implied)} {implied}"
        parts.append(text)
    return f"{case}: " + "; ".join(parts)


def _tpot(cases: dict[str, CaseSummary], name: str | None, phase: str) -> float | None:
    if name is None or name not in cases:
        return None
    p = cases[name].phases.get(phase)
    return p.tpot_ms.mean if p is not None else None


def _notes(rows: list[SpecRow], baseline: str | None) -> list[str]:
    """Where the model's assumptions do not hold, said with this run's figures."""
    out = []
    if baseline is None:
        out.append(
            "No baseline case: measured speedups, implied costs and the keep/disable outcome "
            "are not available (attach one with --baseline-url)."
        )
    spec = [r for r in rows if r.kind is not None]
    off = [
        r
        for r in spec
        if r.tau is not None and r.expected_tokens and abs(r.tau / r.expected_tokens - 1) > 0.1
    ]
    if off:
        out.append(
            "Independent acceptance per position: "
            + "; ".join(
                f"{r.case} {r.phase}: E(α = {fmt(r.alpha)}) = {fmt(r.expected_tokens, 2)} "
                f"tokens per step, τ = {fmt(r.tau, 2)} measured, conditional rates "
                + " / ".join(fmt(x) for x in (r.conditional or []))
                for r in off
            )
            + ". A draft that is right in runs (once it is right, it stays right) makes the "
            "conditional rates rise instead of staying one α; and vLLM's α (accepted ÷ draft "
            "tokens) is the mean of the per-position rates, lower than the per-token "
            "probability the model's α stands for, so E(α) underestimates τ."
        )
    by_case: dict[str, list[SpecRow]] = {}
    for r in spec:
        if r.measured_speedup is not None:
            by_case.setdefault(r.case, []).append(r)
    changes = [
        f"{case} "
        + " → ".join(f"×{r.measured_speedup:.2f} ({r.phase})" for r in rs if r.measured_speedup)
        + " (implied c "
        + " → ".join(fmt(r.c_implied) for r in rs)
        + ")"
        for case, rs in by_case.items()
        if len(rs) > 1
    ]
    if changes:
        out.append(
            "Batch size 1: the model has one request; with a batch each step verifies k + 1 "
            "tokens of every request, so the target step's own cost and the draft's relative "
            "cost change with concurrency. Measured speedup by concurrency: "
            + "; ".join(changes)
            + "."
        )
    ngram = [r for r in spec if r.c == 0 and r.c_implied is not None]
    if ngram:
        out.append(
            "Free proposals: the model takes c = 0 for n-gram, but a step that verifies k + 1 "
            "tokens costs more than one that decodes 1; the cost implied by the measured TPOT: "
            + ", ".join(f"{r.case} {r.phase} c = {fmt(r.c_implied)}" for r in ngram)
            + "."
        )
    return out


def spec_decode_details(run: RunData, cases: dict[str, CaseSummary]) -> SpecDecodeDetails:
    """Every row of the run (cases in plan order, phases in run order), notes and answers."""
    band = float(str(run.plan.params.get("hysteresis", 0.05)))
    baseline = BASELINE if BASELINE in cases and cases[BASELINE].phases else None
    rows: list[SpecRow] = []
    phases = run.plan.phase_names()
    for phase in phases:
        base_tpot = _tpot(cases, baseline, phase)
        random_c = _random_draft_cost(run, cases, phase, base_tpot)
        for data in run.cases:
            if data.name not in cases:
                continue
            cost = _cost(case_kind(data.spec), random_c)
            row = _row(run, data, cases[data.name], phase, base_tpot, cost, band)
            if row is not None:
                rows.append(row)
    order = {c.name: i for i, c in enumerate(run.plan.cases)}
    rows.sort(key=lambda r: (order.get(r.case, 99), phases.index(r.phase)))
    answers = [
        answer_line(name, [r for r in rows if r.case == name])
        for name in order
        if any(r.case == name and r.kind is not None for r in rows)
    ]
    return SpecDecodeDetails(
        hysteresis=band,
        baseline=baseline,
        capacities={n: (c.server.get("capacity") or {}).get("tokens") for n, c in cases.items()},
        rows=rows,
        notes=_notes(rows, baseline),
        answers=answers,
    )
