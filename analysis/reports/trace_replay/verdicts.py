"""trace-replay's verdicts: the hit rate against the model, the trace rate kept, send lateness.

Each is decided from the scenario's details (``details.py``) and the generic phase summary;
a figure that could not be computed (no counters, no capacity numbers, nothing sent) leaves
its verdict undecided and says which figure is missing, never a FAIL or a PASS.
"""

from __future__ import annotations

from analysis.checks import fmt
from analysis.models import CaseSummary, Verdict
from analysis.reports.trace_replay.details import PhaseFigures, TraceReplayDetails
from scenarios.trace_replay import TraceHitRatePredicted, TraceRateKept, TraceSendLateness


def _figures(details: TraceReplayDetails | None, case: str, phase: str) -> PhaseFigures | None:
    if details is None or case not in details.cases:
        return None
    return details.cases[case].phases.get(phase)


def hit_rate_verdict(
    check: TraceHitRatePredicted, _: CaseSummary, details: TraceReplayDetails | None
) -> Verdict:
    """PASS when |counter hit rate − predicted| ≤ tolerance; for a fleet case whose policy
    the model brackets, when the counter hit rate lies in [low − tolerance, high +
    tolerance]."""
    name = f"{check.phase} hit rate within {check.tolerance:g} of the prediction"
    p = _figures(details, check.case, check.phase)
    if p is not None and p.fleet is not None and p.fleet.predicted is None:
        return _bracket_verdict(check, name, p)
    if p is None or p.hit_rate_counters is None or p.predicted_hit_rate is None:
        missing = (
            "the phase's figures"
            if p is None
            else "the prefix-cache counters"
            if p.hit_rate_counters is None
            else "the prediction (no capacity numbers, or nothing sent)"
        )
        return Verdict(case=check.case, check=name, passed=None, detail=f"no {missing}")
    gap = p.hit_rate_counters - p.predicted_hit_rate
    detail = (
        f"measured {p.hit_rate_counters:.4f} (Δhits {fmt(p.hits_counters, 0)} / Δqueries "
        f"{fmt(p.queries_counters, 0)}{_summed(p)}) vs predicted {p.predicted_hit_rate:.4f} "
        f"({fmt(p.predicted_hit_tokens, 0)} / {fmt(p.predicted_query_tokens, 0)} tokens); "
        f"gap {gap:+.4f}, tolerance {check.tolerance:g}; per request {fmt(p.hit_rate_requests, 4)}"
        f", maximum {fmt(p.max_hit_rate, 4)}"
    )
    if p.predicted_short_requests:
        detail += (
            f"; {p.predicted_short_requests} request(s) started when the modelled pool was full "
            "(vLLM queues or preempts those)"
        )
    return Verdict(case=check.case, check=name, passed=abs(gap) <= check.tolerance, detail=detail)


def rate_verdict(
    check: TraceRateKept, _: CaseSummary, details: TraceReplayDetails | None
) -> Verdict:
    """PASS when the achieved rate of the timed requests is within the allowed error."""
    name = f"{check.phase} achieved rate within {check.max_rate_error:.0%} of the trace's"
    p = _figures(details, check.case, check.phase)
    if p is None or p.rate_error is None:
        return Verdict(
            case=check.case,
            check=name,
            passed=None,
            detail="fewer than two timed requests sent (or a zero span): no rate",
        )
    return Verdict(
        case=check.case,
        check=name,
        passed=abs(p.rate_error) <= check.max_rate_error,
        detail=f"achieved {p.achieved_rate_rps:.4f} req/s vs scheduled "
        f"{p.scheduled_rate_rps:.4f} req/s ({p.rate_error:+.4%}); {p.sent}/{p.planned} sent",
    )


def lateness_verdict(
    check: TraceSendLateness, case: CaseSummary, _: TraceReplayDetails | None
) -> Verdict:
    """PASS when the send lateness p99 of the phase is below the limit."""
    name = f"{check.phase} send lateness p99 < {check.max_p99_ms:g} ms"
    phase = case.phases.get(check.phase)
    p99 = phase.send_lateness_ms.p99 if phase else None
    if p99 is None:
        return Verdict(case=check.case, check=name, passed=None, detail="no request was sent")
    assert phase is not None
    return Verdict(
        case=check.case,
        check=name,
        passed=p99 < check.max_p99_ms,
        detail=f"p99 {p99:.3f} ms over {phase.send_lateness_ms.count} sends; late sends "
        f"(> 10 ms after their time) {phase.late_sends if phase.late_sends is not None else 'n/a'}",
    )


def _bracket_verdict(check: TraceHitRatePredicted, name: str, p: PhaseFigures) -> Verdict:
    """A fleet policy the model brackets (``analysis.fleet``): inside [low, high] ± tolerance."""
    assert p.fleet is not None
    f, tol = p.fleet, check.tolerance
    if p.hit_rate_counters is None:
        return Verdict(case=check.case, check=name, passed=None,
                       detail="no prefix-cache counters from every replica")  # fmt: skip
    inside = f.predicted_low - tol <= p.hit_rate_counters <= f.predicted_high + tol
    detail = (
        f"measured {p.hit_rate_counters:.4f} (Δhits {fmt(p.hits_counters, 0)} / Δqueries "
        f"{fmt(p.queries_counters, 0)}, {f.replicas} replicas summed) vs {f.policy} bracketed "
        f"[{f.predicted_low:.4f}, {f.predicted_high:.4f}] ({f.basis}); tolerance {tol:g}"
    )
    return Verdict(case=check.case, check=name, passed=inside, detail=detail)


def _summed(p: PhaseFigures) -> str:
    """How a fleet's counters were read: ``, 2 replicas summed, prefix-hash``."""
    return "" if p.fleet is None else f", {p.fleet.replicas} replicas summed, {p.fleet.policy}"
