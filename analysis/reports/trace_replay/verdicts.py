"""trace-replay's verdicts: the hit rate against the model, the trace rate kept, send lateness,
and a fleet run's prefix-hash against round-robin (hit rate gained, TTFT p50 lower).

Each is decided from the scenario's details (``details.py``) and the generic phase summary;
a figure that could not be computed (no counters, no capacity numbers, nothing sent) leaves
its verdict undecided and says which figure is missing, never a FAIL or a PASS.
"""

from __future__ import annotations

from analysis.checks import fmt
from analysis.fleet_kv import kv_verdict
from analysis.models import CaseSummary, Verdict
from analysis.reports.trace_replay.details import PhaseFigures, TraceReplayDetails
from analysis.timing_trust import no_core_for_the_client
from scenarios.fleet_cases import (
    FleetHitRateGain,
    FleetKillAccounted,
    FleetKvEventsMatch,
    FleetTtftLower,
)
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
            f"; {p.predicted_short_requests} request(s) would start when the modelled pool was "
            "full if admitted when sent: vLLM kept them waiting, so the prediction admits "
            "every request at its first token"
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
    """PASS when the send lateness p99 of the phase is below the limit; above it, FAIL, or
    undecided when the machine left the load generator no core of its own
    (:func:`analysis.timing_trust.no_core_for_the_client`): a limit this machine sets, which
    the report names rather than blaming the client."""
    name = f"{check.phase} send lateness p99 < {check.max_p99_ms:g} ms"
    phase = case.phases.get(check.phase)
    p99 = phase.send_lateness_ms.p99 if phase else None
    if p99 is None:
        return Verdict(case=check.case, check=name, passed=None, detail="no request was sent")
    assert phase is not None
    detail = (
        f"p99 {p99:.3f} ms over {phase.send_lateness_ms.count} sends; late sends "
        f"(> 10 ms after their time) {phase.late_sends if phase.late_sends is not None else 'n/a'}"
    )
    passed = p99 < check.max_p99_ms
    no_core = None if passed else no_core_for_the_client(case.client)
    if no_core is not None:
        lag = phase.loop_lag_max_ms
        detail = (
            "undecided, a limit of this machine: the load generator had no core of its own "
            f"({no_core}), so it ran at normal priority beside the replicas' busy engines and "
            "its timers woke late"
            + (f" (event loop up to {lag:.0f} ms late)" if lag is not None else "")
            + "; the arrivals were burstier than the trace's, which the hit-rate prediction "
            "follows (it replays the measured order); with a core to spare beyond the "
            f"replicas' the client runs real-time there and this is judged; {detail}"
        )
        return Verdict(case=check.case, check=name, passed=None, detail=detail)
    return Verdict(case=check.case, check=name, passed=passed, detail=detail)


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


def kv_events_verdict(
    check: FleetKvEventsMatch, _: CaseSummary, details: TraceReplayDetails | None
) -> Verdict:
    """The case's KV events beside the model (:func:`analysis.fleet_kv.kv_verdict`)."""
    figures = details.cases.get(check.case) if details is not None else None
    return kv_verdict(check.case, figures.kv_events if figures is not None else None)


def kill_verdict(
    check: FleetKillAccounted, _: CaseSummary, details: TraceReplayDetails | None
) -> Verdict:
    """PASS when every planned request of the phase ended exactly once (none lost, none
    counted twice) and, behind the gateway's prefix-hash, at least one key moved off the
    killed replica; undecided without a recorded kill, or when nothing was routed after it."""
    name = f"{check.phase}: a replica killed, no request lost, its keys moved"
    figures = details.cases.get(check.case) if details is not None else None
    k = figures.kill if figures is not None else None
    if k is None:
        return Verdict(case=check.case, check=name, passed=None, detail="no kill recorded")
    reasons = "; ".join(f"{n} × {why}" for why, n in k.failure_reasons.items())
    detail = (
        f"replica {k.replica} killed; {k.planned} planned: {k.completed} completed, "
        f"{k.failed} failed ({reasons or 'none'}), {k.not_sent} not sent; lost "
        f"{len(k.lost)}, counted twice {len(k.counted_twice)}; after the kill "
        f"{k.decisions_after_kill} routing decisions, {k.to_killed_after_kill} still to the "
        f"killed replica, {k.retries} retries, {len(k.remapped_keys)} keys remapped"
    )
    passed: bool | None = k.accounted
    if passed and check.case.endswith("prefix-hash"):
        # Nothing routed after the kill: no key could move, so that part is undecided.
        passed = True if k.remapped_keys else None if k.decisions_after_kill == 0 else False
    return Verdict(case=check.case, check=name, passed=passed, detail=detail)


def _pair(
    details: TraceReplayDetails | None, check: FleetHitRateGain | FleetTtftLower
) -> tuple[PhaseFigures | None, PhaseFigures | None]:
    return (
        _figures(details, check.case, check.phase),
        _figures(details, check.baseline, check.phase),
    )


def hit_rate_gain_verdict(
    check: FleetHitRateGain, _: CaseSummary, details: TraceReplayDetails | None
) -> Verdict:
    """PASS when the case's measured fleet hit rate ≥ the baseline's + ``min_gain``."""
    name = f"{check.phase} hit rate ≥ {check.baseline}'s + {check.min_gain:g}"
    mine, base = _pair(details, check)
    if mine is None or base is None:
        missing = f"{check.baseline} or {check.case} did not run the phase"
        return Verdict(case=check.case, check=name, passed=None, detail=missing)
    if mine.hit_rate_counters is None or base.hit_rate_counters is None:
        return Verdict(case=check.case, check=name, passed=None,
                       detail="no prefix-cache counters from every replica of both")  # fmt: skip
    gain = mine.hit_rate_counters - base.hit_rate_counters
    return Verdict(
        case=check.case, check=name, passed=gain >= check.min_gain,
        detail=f"measured {mine.hit_rate_counters:.4f} vs {check.baseline} "
        f"{base.hit_rate_counters:.4f} (each Σ Δhits ÷ Σ Δqueries over its replicas): "
        f"gain {gain:+.4f}, at least {check.min_gain:g} required",
    )  # fmt: skip


def ttft_lower_verdict(
    check: FleetTtftLower, _: CaseSummary, details: TraceReplayDetails | None
) -> Verdict:
    """PASS when the case's TTFT p50 is lower than the baseline's."""
    name = f"{check.phase} TTFT p50 lower than {check.baseline}'s"
    mine, base = _pair(details, check)
    ours = None if mine is None else mine.ttft_ms.p50
    theirs = None if base is None else base.ttft_ms.p50
    if ours is None or theirs is None:
        missing = f"no successful request in {check.case} or {check.baseline}"
        return Verdict(case=check.case, check=name, passed=None, detail=missing)
    return Verdict(
        case=check.case, check=name, passed=ours < theirs,
        detail=f"TTFT p50 {ours:.1f} ms vs {check.baseline} {theirs:.1f} ms "
        f"({ours / theirs:.2f}×)" if theirs > 0 else f"TTFT p50 {ours:.1f} ms vs {theirs:.1f} ms",
    )  # fmt: skip
