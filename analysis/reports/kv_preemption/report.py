"""kv-preemption's report: the hand calculation from each case's real capacity, the cases side
by side, trade-offs, and its verdicts.

Hand calculation (docs/scenarios/kv-preemption.md), from a case's real capacity of N blocks
of B tokens (T = N·B tokens) and C requests of P prompt + O output tokens:

- initial working set = C·P tokens; headroom = T − C·P tokens; average growth per request
  before the cache is full = headroom / C tokens;
- final working set = C·(P + O) tokens, of which the cache holds C·(P + O − 1): vLLM never
  writes a request's last output token (the step that samples it finishes the request), so a
  request ends holding ceil((P + O − 1)/B) blocks (block rounding: a request holds whole
  blocks, so a partly filled last block counts in full). Seen on vLLM 0.32 CPU: 6 × (256 +
  129) tokens in 21 usable blocks of 128 peaked at 18 blocks with no preemption, where
  ceil((P + O)/B) would predict 24 blocks and preemption;
- vLLM reserves one block (the null block), so N − 1 blocks are usable, and
  ``kv_cache_usage_perc`` = used / (N − 1) (vLLM ``BlockPool.get_usage``);
- prediction: preemption iff the final working set in blocks exceeds N − 1; the expected
  KV-usage peak is min(1, final blocks / (N − 1)).

The prediction is about C requests that all run to their end: when fewer than C succeeded
(failed, aborted or never sent), the load was not the one predicted and both checks are
undecided, saying so, never failed. The KV-peak check is also undecided when no scrape looked
at the server while the predicted peak was there (``kv_blocks`` here): a sampled peak is a
lower bound, and one from scrapes that all fell before or after the peak says nothing of it.
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

from analysis.load import CaseData, RunData
from analysis.markdown import f, table
from analysis.models import CaseSummary, PhaseSummary, Verdict
from analysis.reports import Evaluator, ScenarioReport
from analysis.reports.kv_preemption.kv_blocks import peak_window, scrapes_inside
from scenarios.kv_preemption import KVPeakMatchesWorkingSet, PreemptionAsPredicted
from server.frozen import FrozenModel


class HandCalculation(FrozenModel):
    """The hand calculation of the module docstring; tokens and blocks."""

    capacity_tokens: int
    block_size: int
    block_size_assumed: bool
    capacity_blocks: int
    concurrency: int
    initial_working_set_tokens: int
    headroom_tokens: int
    growth_per_request_tokens: float
    output_tokens_per_request: int
    final_working_set_tokens: int
    cached_tokens_per_request_at_end: int
    final_working_set_blocks: int
    usable_blocks: int
    predicted_preemption: bool
    predicted_kv_peak: float


def hand_calculation(
    capacity: dict[str, Any], concurrency: int, prompt_tokens: int, output_tokens: int
) -> HandCalculation:
    """The hand calculation for one case (see the module docstring).

    ``capacity`` is the case's ``KVCapacity`` as a dict (``tokens``, ``block_size``,
    ``num_blocks``); a missing block size is taken as 16 (vLLM's GPU default) and said so.
    """
    block = capacity.get("block_size") or 16
    tokens = int(capacity["tokens"])
    blocks = capacity.get("num_blocks") or tokens // block
    cached_at_end = prompt_tokens + output_tokens - 1  # the last token is never written
    per_request_blocks = math.ceil(cached_at_end / block)
    initial = concurrency * prompt_tokens
    final_blocks = concurrency * per_request_blocks
    headroom = tokens - initial
    return HandCalculation(
        capacity_tokens=tokens,
        block_size=block,
        block_size_assumed=capacity.get("block_size") is None,
        capacity_blocks=blocks,
        concurrency=concurrency,
        initial_working_set_tokens=initial,
        headroom_tokens=headroom,
        growth_per_request_tokens=headroom / concurrency,
        output_tokens_per_request=output_tokens,
        final_working_set_tokens=concurrency * (prompt_tokens + output_tokens),
        cached_tokens_per_request_at_end=cached_at_end,
        final_working_set_blocks=final_blocks,
        usable_blocks=blocks - 1,
        predicted_preemption=final_blocks > blocks - 1,
        predicted_kv_peak=min(1.0, final_blocks / (blocks - 1)),
    )


class PeakCoverage(FrozenModel):
    """Whether any scrape looked while the predicted KV peak was there (``kv_blocks`` here).

    ``level_blocks`` = the predicted peak in blocks, min(usable, final working set);
    ``window_ms`` = how long the requests' received tokens put the demand at that level (ms,
    summed over the window's intervals); ``scrapes`` = successful scrapes wholly inside it;
    ``peak_inside`` = the largest KV usage those scrapes read (fraction), ``None`` if none.
    """

    level_blocks: int
    window_ms: float
    scrapes: int
    peak_inside: float | None


class PreemptionRow(FrozenModel):
    """One case's prediction and what was measured in its phase."""

    case: str
    hand_calculation: HandCalculation
    peak_coverage: PeakCoverage | None = None
    kv_peak: float | None
    preemptions: float | None
    running_peak: float | None
    waiting_peak: float | None
    ttft_mean_ms: float | None
    ttft_p95_ms: float | None
    tpot_mean_ms: float | None
    itl_p95_ms: float | None
    e2el_p95_ms: float | None
    output_throughput_tok_s: float | None
    wall_s: float | None
    failed: int


class KVPreemptionDetails(FrozenModel):
    rows: list[PreemptionRow]
    tradeoffs: list[str]


def tradeoffs(rows: list[PreemptionRow]) -> list[str]:
    """Sentences comparing each preempting case with each non-preempting one.

    Never a verdict from one metric: TTFT, TPOT and throughput are stated side by side.
    """
    out = []
    preempting = [r for r in rows if r.preemptions]
    calm = [r for r in rows if r.preemptions == 0]
    for a in preempting:
        for b in calm:
            parts = []
            for key, label, unit, better_low in (
                ("ttft_mean_ms", "TTFT mean", "ms", True),
                ("tpot_mean_ms", "TPOT mean", "ms", True),
                ("output_throughput_tok_s", "output throughput", "tok/s", False),
            ):
                x, y = getattr(a, key), getattr(b, key)
                if x is None or y is None:
                    continue
                worse = (x > y) if better_low else (x < y)
                parts.append(
                    f"{label} {x:.1f} vs {y:.1f} {unit} ({'worse' if worse else 'better'})"
                )
            if parts:
                out.append(
                    f"{a.case} ({a.preemptions:.0f} preemptions) vs {b.case} (none): "
                    + "; ".join(parts)
                    + ". Judge on all of them, not on one."
                )
    return out


def _calc(check: Any, case: CaseSummary) -> HandCalculation | None:
    capacity = case.server.get("capacity")
    if not capacity:
        return None
    return hand_calculation(capacity, check.concurrency, check.prompt_tokens, check.output_tokens)


def load_differs(concurrency: int, phase: PhaseSummary | None) -> str | None:
    """Why ``phase`` did not carry the predicted load of ``concurrency`` requests run to their
    end (fewer succeeded), or ``None`` when it did (module docstring)."""
    if phase is None or phase.ok >= concurrency:
        return None
    return (
        f"cannot decide: {phase.ok} of the {concurrency} requests the prediction assumes "
        f"succeeded ({phase.failed} failed, {phase.aborted} aborted, {phase.not_sent} not sent"
        + (f", {phase.interrupted} interrupted" if phase.interrupted else "")
        + "), "
        "so the load was not the one predicted"
    )


def _preemption(check: PreemptionAsPredicted, case: CaseSummary, _: Any) -> Verdict:
    calc = _calc(check, case)
    phase = case.phases.get(check.phase)
    delta = phase.counter_deltas.get("num_preemptions") if phase else None
    name = f"preemptions as predicted in {check.phase}"
    if (why := load_differs(check.concurrency, phase)) is not None:
        return Verdict(case=check.case, check=name, passed=None, detail=why)
    if calc is None or delta is None:
        if calc is None:
            why = f"KV capacity unknown ({case.server.get('capacity_error') or 'not recorded'})"
        else:
            why = (
                f"Δnum_preemptions unknown in {check.phase}: the counter was not read inside "
                "its window (see data quality)"
            )
        return Verdict(case=check.case, check=name, passed=None, detail=why)
    predicted = calc.predicted_preemption
    detail = (
        f"final working set {calc.final_working_set_blocks} blocks vs "
        f"{calc.usable_blocks} usable → {'preempts' if predicted else 'fits'}; "
        f"measured Δnum_preemptions = {delta:.0f}"
    )
    return Verdict(case=check.case, check=name, passed=(delta > 0) == predicted, detail=detail)


def _coverage(details: KVPreemptionDetails | None, case: str) -> PeakCoverage | None:
    rows = [r for r in details.rows if r.case == case] if details is not None else []
    return rows[0].peak_coverage if rows else None


def _kv_peak(
    check: KVPeakMatchesWorkingSet, case: CaseSummary, details: KVPreemptionDetails | None
) -> Verdict:
    calc = _calc(check, case)
    phase = case.phases.get(check.phase)
    peak = phase.gauge_peaks.get("kv_cache_usage_perc") if phase else None
    name = f"KV peak matches the working set in {check.phase}"
    if (why := load_differs(check.concurrency, phase)) is not None:
        return Verdict(case=check.case, check=name, passed=None, detail=why)
    if calc is None or peak is None:
        return Verdict(
            case=check.case, check=name, passed=None, detail="capacity or KV-usage samples missing"
        )
    expected = calc.predicted_kv_peak
    detail = (
        f"sampled peak {peak:.3f} (a lower bound) vs expected {expected:.3f} "
        f"= min(1, {calc.final_working_set_blocks}/{calc.usable_blocks} blocks), "
        f"tolerance {check.tolerance}"
    )
    coverage = _coverage(details, check.case)
    if coverage is not None:
        seen = (
            f"; {coverage.scrapes} scrape(s) inside the {coverage.window_ms:.0f} ms in which "
            f"the requests' tokens put the demand at {coverage.level_blocks} blocks"
        )
        if coverage.scrapes == 0:
            return Verdict(
                case=check.case, check=name, passed=None,
                detail=f"cannot decide: {detail}{seen}, so no sample could see the peak",
            )  # fmt: skip
        detail += seen
    return Verdict(
        case=check.case, check=name, passed=abs(peak - expected) <= check.tolerance, detail=detail
    )


def _coverage_cell(c: PeakCoverage | None) -> str:
    if c is None:
        return "–"
    seen = f", read {f(c.peak_inside * 100)} %" if c.peak_inside is not None else ""
    return f"{c.scrapes} of {c.window_ms:.0f} ms{seen}"


def peak_coverage(data: CaseData, phase: str, calc: HandCalculation) -> PeakCoverage:
    """The :class:`PeakCoverage` of ``phase`` in ``data`` for the hand calculation ``calc``."""
    level = min(calc.usable_blocks, calc.final_working_set_blocks)
    records = [r for r in data.records if r.phase == phase]
    window = peak_window(records, calc.block_size, level) if level > 0 else []
    inside = set(scrapes_inside(data.scrapes, window))
    # A sample is stamped with its scrape's answer time (``metrics.samples.Sample``).
    answered = {s.end_ns for s in data.scrapes if s.outcome == "ok" and s.scrape in inside}
    values = [
        s.value for s in data.samples if s.name == "kv_cache_usage_perc" and s.t_ns in answered
    ]
    return PeakCoverage(
        level_blocks=level,
        window_ms=sum(b - a for a, b in window) / 1e6,
        scrapes=len(inside),
        peak_inside=max(values) if values else None,
    )


class KVPreemptionReport(ScenarioReport[KVPreemptionDetails]):
    evaluators: ClassVar[dict[type, Evaluator]] = {
        PreemptionAsPredicted: _preemption,
        KVPeakMatchesWorkingSet: _kv_peak,
    }

    def details(self, run: RunData, cases: dict[str, CaseSummary]) -> KVPreemptionDetails:
        shapes = {c.case: c for c in run.plan.checks if isinstance(c, PreemptionAsPredicted)}
        rows = []
        raw = {c.name: c for c in run.cases}
        for name, case in cases.items():
            phase = next(iter(case.phases.values()), None)
            capacity = case.server.get("capacity")
            shape = shapes.get(name)
            if phase is None or capacity is None or shape is None:
                continue
            calc = hand_calculation(
                capacity, shape.concurrency, shape.prompt_tokens, shape.output_tokens
            )
            peaks, deltas = phase.gauge_peaks, phase.counter_deltas
            rows.append(
                PreemptionRow(
                    case=name,
                    hand_calculation=calc,
                    peak_coverage=peak_coverage(raw[name], phase.phase, calc),
                    kv_peak=peaks.get("kv_cache_usage_perc"),
                    preemptions=deltas.get("num_preemptions"),
                    running_peak=peaks.get("num_requests_running"),
                    waiting_peak=peaks.get("num_requests_waiting"),
                    ttft_mean_ms=phase.ttft_ms.mean,
                    ttft_p95_ms=phase.ttft_ms.p95,
                    tpot_mean_ms=phase.tpot_ms.mean,
                    itl_p95_ms=phase.itl_ms.p95,
                    e2el_p95_ms=phase.e2el_ms.p95,
                    output_throughput_tok_s=phase.output_throughput_tok_s,
                    wall_s=phase.duration_s,
                    failed=phase.failed,
                )
            )
        return KVPreemptionDetails(rows=rows, tradeoffs=tradeoffs(rows))

    def markdown(self, details: KVPreemptionDetails | None) -> list[str]:
        if details is None or not details.rows:
            return []
        calc_rows = []
        for r in details.rows:
            c = r.hand_calculation
            calc_rows.append(
                [
                    r.case,
                    f"{c.capacity_tokens} ({c.capacity_blocks}×{c.block_size})",
                    str(c.concurrency),
                    str(c.initial_working_set_tokens),
                    str(c.headroom_tokens),
                    f(c.growth_per_request_tokens),
                    f"{c.final_working_set_tokens} ({c.final_working_set_blocks} blocks)",
                    "preempts" if c.predicted_preemption else "fits",
                    f(c.predicted_kv_peak * 100),
                ]
            )
        out = ["## Hand calculation (from each case's real capacity)", ""]
        calc_headers = ["case", "capacity tokens (blocks×B)", "C", "initial C×P", "headroom",
                        "growth/request", "final C×(P+O)", "prediction",
                        "expected KV peak %"]  # fmt: skip
        out += [
            table(calc_headers, calc_rows),
            "",
            "## Comparison across cases",
            "",
        ]
        rows = [
            [
                r.case, f(r.kv_peak * 100 if r.kv_peak is not None else None),
                _coverage_cell(r.peak_coverage),
                f(r.preemptions, 0), f(r.running_peak, 0), f(r.waiting_peak, 0),
                f(r.ttft_mean_ms), f(r.ttft_p95_ms), f(r.tpot_mean_ms), f(r.itl_p95_ms),
                f(r.e2el_p95_ms), f(r.output_throughput_tok_s), f(r.wall_s), str(r.failed),
            ]
            for r in details.rows
        ]  # fmt: skip
        headers = ["case", "KV peak % (sampled)", "scrapes in peak window", "preemptions",
                   "running peak", "waiting peak", "TTFT mean", "TTFT p95", "TPOT mean",
                   "ITL p95", "E2EL p95", "out tok/s", "wall s", "failed"]  # fmt: skip
        out += [
            table(headers, rows),
            "",
            "A request holds ceil((P + O − 1)/B) blocks at its end: vLLM never writes its last "
            "output token to the cache. *Scrapes in peak window*: successful scrapes sent and "
            "answered while the requests' received tokens put the demand at the predicted peak "
            "(that window's length in ms, the KV usage they read): with none, no sample could "
            "see the peak and the KV-peak check is undecided.",
            "",
        ]
        if details.tradeoffs:
            out += ["Trade-offs:", ""] + [f"- {t}" for t in details.tradeoffs] + [""]
        return out


REPORT = KVPreemptionReport()
