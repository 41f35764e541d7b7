"""slo-goodput's verdicts: each of its check kinds (``scenarios.slo_goodput``) judged."""

from __future__ import annotations

from typing import Any

from analysis.markdown import f, pct
from analysis.models import CaseSummary, Verdict
from analysis.reports import Evaluator
from analysis.reports.slo_goodput.details import top_shares
from analysis.reports.slo_goodput.models import SLOGoodputDetails, SweepPoint
from scenarios.slo_goodput import (
    ClientKeptUp,
    LateFiguresAgree,
    LowestRateAttains,
    MaxRateBracketed,
    OverloadCollapse,
    RatesOrdered,
)


def _points(details: SLOGoodputDetails | None) -> list[SweepPoint]:
    return details.points if details is not None else []


def _missing(check: Any, name: str) -> Verdict:
    return Verdict(case=check.case, check=name, passed=None, detail="no sweep rate ran")


def completed_bound(point: SweepPoint, tolerance: float) -> float:
    """The most completed req/s a rate may show: offered × (1 + tolerance), plus the requests
    already in flight when its window opened ÷ the window (they may complete inside it)."""
    return point.offered_rps * (1 + tolerance) + point.carried_in / point.window_s


def _ordered(check: RatesOrdered, _: CaseSummary, d: SLOGoodputDetails | None) -> Verdict:
    name = (
        f"goodput ≤ completed ≤ offered × (1 + {check.tolerance:g}) + carried-in ÷ window "
        "at every rate"
    )
    points = _points(d)
    if not points:
        return _missing(check, name)
    bad = [
        p for p in points
        if not p.goodput_rps <= p.completed_rps <= completed_bound(p, check.tolerance)
    ]  # fmt: skip
    detail = "; ".join(
        f"{p.phase}: {f(p.goodput_rps, 2)} ≤ {f(p.completed_rps, 2)} ≤ {f(p.offered_rps, 2)} "
        f"(bound {f(completed_bound(p, check.tolerance), 2)})"
        for p in (bad or points)
    )
    return Verdict(case=check.case, check=name, passed=not bad, detail=detail)


def _normal_priority_note(case: CaseSummary) -> str:
    """Why the sending thread was not real-time, when it was not (``loadgen.placement``)."""
    for c in case.client:
        if c is not None and not str(c.get("policy", "")).startswith("SCHED_FIFO"):
            why = c.get("problem") or c.get("reason")
            return f"; the load generator's sending thread ran at {c.get('policy')} ({why})"
    return ""


def _client(check: ClientKeptUp, case: CaseSummary, d: SLOGoodputDetails | None) -> Verdict:
    name = (
        f"client kept up at every rate: achieved within {pct(check.max_rate_error)} % of "
        f"offered, send lateness p99 < {check.max_lateness_p99_ms:g} ms"
    )
    points = _points(d)
    if not points:
        return _missing(check, name)
    problems = []
    short = False  # a rate the client did not reach, as against one it reached with late sends
    for p in points:
        late = p.lateness_ms["p99"]
        off = client_shortfall(p, check.max_rate_error) is not None
        short = short or off
        if off or late is None or late >= check.max_lateness_p99_ms:
            why = f"achieved {f(p.achieved_rps, 2)} of {f(p.offered_rps, 2)} req/s, " \
                  f"lateness p99 {f(late, 2)} ms"  # fmt: skip
            if p.slot_wait_ms and (p.slot_wait_ms["p99"] or 0) >= check.max_lateness_p99_ms:
                why += f" (the --max-concurrency cap held requests: wait p99 " \
                       f"{f(p.slot_wait_ms['p99'], 0)} ms)"  # fmt: skip
            problems.append(f"{p.phase}: {why}")
    if problems:
        cause = (
            "the client, not the server, limited the load: "
            if short
            else "the client sent late (rates reached, but arrivals burstier than scheduled; "
            "figures at these rates carry the client's stalls): "
        )
        detail = cause + "; ".join(problems) + _normal_priority_note(case)
    else:
        worst = max(points, key=lambda p: p.lateness_ms["p99"] or 0.0)
        ratios = [p.achieved_rps / p.offered_rps for p in points]
        detail = (
            f"worst lateness p99 {f(worst.lateness_ms['p99'], 2)} ms ({worst.phase}); "
            f"achieved/offered {min(ratios):.3f}–{max(ratios):.3f}"
        )
    return Verdict(case=check.case, check=name, passed=not problems, detail=detail)


def client_shortfall(point: SweepPoint, max_rate_error: float) -> str | None:
    """Why the client did not deliver ``point``'s offered rate (achieved more than
    ``max_rate_error`` short of or over it), or ``None`` when it did."""
    if abs(point.achieved_rps - point.offered_rps) <= max_rate_error * point.offered_rps:
        return None
    return (
        f"the client sent {f(point.achieved_rps, 2)} of the offered "
        f"{f(point.offered_rps, 2)} req/s at {point.phase} (more than "
        f"{pct(max_rate_error)} % off)"
    )


def _undecided_unless_delivered(verdict: Verdict, why_not: str | None) -> Verdict:
    """A failed verdict about the server becomes undecided when the load it judges was not
    delivered as scheduled (``why_not``): the server was not offered what it is judged on."""
    if verdict.passed is not False or why_not is None:
        return verdict
    detail = (
        f"undecided: {why_not}, so the server was not offered this load as scheduled; "
        f"{verdict.detail}"
    )
    return Verdict(case=verdict.case, check=verdict.check, passed=None, detail=detail)


def _lowest(check: LowestRateAttains, _: CaseSummary, d: SLOGoodputDetails | None) -> Verdict:
    name = f"attainment at the lowest rate ≥ {pct(check.target)} %"
    points = _points(d)
    if not points or points[0].attainment is None:
        return _missing(check, name)
    low = points[0]
    assert low.attainment is not None
    detail = f"{low.phase}: {pct(low.attainment)} % ({low.good}/{low.counted} good)"
    why_not = client_shortfall(low, check.max_rate_error)
    late = low.lateness_ms["p99"]
    if why_not is None and (late is None or late >= check.max_lateness_p99_ms):
        why_not = (
            f"the client sent late at {low.phase} (lateness p99 {f(late, 2)} ms ≥ "
            f"{check.max_lateness_p99_ms:g} ms: burstier arrivals than scheduled, tokens "
            "stamped late)"
        )
    verdict = Verdict(
        case=check.case, check=name, passed=low.attainment >= check.target, detail=detail
    )
    return _undecided_unless_delivered(verdict, why_not)


def _collapse(check: OverloadCollapse, _: CaseSummary, d: SLOGoodputDetails | None) -> Verdict:
    name = (
        f"collapse at the top rate: goodput ≤ {pct(check.max_goodput_share)} % of completed, "
        f"completed ≥ {pct(check.min_completed_share)} % of saturation"
    )
    points = _points(d)
    sat = d.saturation.closed_loop_rps if d is not None and d.saturation else None
    if not points or sat is None:
        return _missing(check, name)
    top = points[-1]
    share, busy = top_shares(top, sat)
    passed = share is not None and share <= check.max_goodput_share
    passed = passed and busy is not None and busy >= check.min_completed_share
    detail = (
        f"{top.phase}: goodput {f(top.goodput_rps, 2)} of completed {f(top.completed_rps, 2)} "
        f"req/s ({pct(share)} %); completed pro rata {f(top.completed_prorata_rps, 2)} req/s "
        f"= {pct(busy)} % of saturation {f(sat, 2)} req/s; waiting peak "
        f"{f(top.waiting_peak, 0)}"
    )
    verdict = Verdict(case=check.case, check=name, passed=passed, detail=detail)
    return _undecided_unless_delivered(verdict, client_shortfall(top, check.max_rate_error))


def _bracketed(check: MaxRateBracketed, _: CaseSummary, d: SLOGoodputDetails | None) -> Verdict:
    name = f"maximum sustainable rate (≥ {pct(check.target)} % attainment) bracketed"
    if d is None or not d.points:
        return _missing(check, name)
    return Verdict(
        case=check.case, check=name, passed=d.answer.bracketed, detail=d.answer.statement
    )


def _late(check: LateFiguresAgree, _: CaseSummary, d: SLOGoodputDetails | None) -> Verdict:
    name = "figures resolved at run time agree with their recomputation from the raw files"
    if d is None or not d.late_figures:
        return Verdict(case=check.case, check=name, passed=True, detail="none to check")
    # Disagreement is evidence; a figure the run did not record or the raw files cannot give
    # again (agrees is None) decides nothing, so it leaves the check undecided, not failed.
    bad = [x for x in d.late_figures if x.agrees is False]
    unknown = [x for x in d.late_figures if x.agrees is None]
    shown = bad or unknown or d.late_figures[:3]
    detail = "; ".join(f"{x.name}: used {f(x.used, 4)}, recomputed {f(x.recomputed, 4)}"
                       for x in shown)  # fmt: skip
    if bad:
        return Verdict(case=check.case, check=name, passed=False, detail=detail)
    if unknown:
        detail = f"cannot decide: {len(unknown)} figure(s) without both values: {detail}"
        return Verdict(case=check.case, check=name, passed=None, detail=detail)
    detail = f"all {len(d.late_figures)} agree, e.g. {detail}"
    return Verdict(case=check.case, check=name, passed=True, detail=detail)


#: Check kind → its evaluator.
EVALUATORS: dict[type, Evaluator] = {
    RatesOrdered: _ordered,
    ClientKeptUp: _client,
    LowestRateAttains: _lowest,
    OverloadCollapse: _collapse,
    MaxRateBracketed: _bracketed,
    LateFiguresAgree: _late,
}
