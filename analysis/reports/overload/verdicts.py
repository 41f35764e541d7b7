"""overload's verdicts: each of its check kinds (``scenarios.overload``) judged."""

from __future__ import annotations

from analysis.markdown import f, pct
from analysis.models import CaseSummary, Verdict
from analysis.reports import Evaluator
from analysis.reports.overload.models import LoadPoint, OverloadDetails
from scenarios.overload import (
    NONE_ARM,
    AdmissionKeepsGoodput,
    NoAdmissionCollapses,
    OverloadAccounted,
    RejectionsFast,
)


def _at(d: OverloadDetails, arm: str | None, load: float) -> LoadPoint | None:
    return next((p for p in d.points if p.arm == arm and p.load == load), None)


def _accounted(check: OverloadAccounted, _: CaseSummary, d: OverloadDetails | None) -> Verdict:
    name = "every planned request ended once: completion, rejection or failure with a reason"
    if d is None or not d.accounting:
        return Verdict(case=check.case, check=name, passed=None, detail="no load ran")
    bad = [a for a in d.accounting if not a.whole]
    total = sum(a.records for a in d.accounting)
    detail = (
        "; ".join(
            f"{a.arm} {a.phase}: {a.records}/{a.planned} records, {a.duplicates} twice, "
            f"{a.unsent} unsent, {a.unexplained} without a reason"
            for a in bad
        )
        or f"{total} records for {sum(a.planned for a in d.accounting)} planned requests"
    )
    return Verdict(case=check.case, check=name, passed=not bad, detail=detail)


def _keeps(check: AdmissionKeepsGoodput, _: CaseSummary, d: OverloadDetails | None) -> Verdict:
    name = (
        f"at {check.load:g}× the recommended limit keeps attainment ≥ {pct(check.attainment)} "
        f"of admitted requests and goodput ≥ {pct(check.goodput_share)} of the peak"
    )
    rec = next((r for r in (d.recommendations if d else []) if r.load == check.load), None)
    point = _at(d, rec.arm, check.load) if d and rec else None
    if d is None or point is None or not d.peak_goodput_rps:
        return Verdict(case=check.case, check=name, passed=None,
                       detail=f"no limited arm ran at {check.load:g}×")  # fmt: skip
    share = point.goodput_rps / d.peak_goodput_rps
    ok = (point.attainment or 0) >= check.attainment and share >= check.goodput_share
    detail = (
        f"{point.arm}: attainment {pct(point.attainment)}, goodput {f(point.goodput_rps, 2)} "
        f"req/s = {pct(share)} of the peak {f(d.peak_goodput_rps, 2)} ({d.peak_at})"
    )
    return Verdict(case=check.case, check=name, passed=ok, detail=detail)


def _fast(check: RejectionsFast, _: CaseSummary, d: OverloadDetails | None) -> Verdict:
    name = (
        f"the recommended limit's rejections answered with p99 < {check.max_p99_ms:g} ms "
        "from the scheduled time"
    )
    chosen = {(r.arm, r.load) for r in (d.recommendations if d else [])}
    points = [
        p for p in (d.points if d else [])
        if (p.arm, p.load) in chosen and p.rejected and p.rejection_p99_ms is not None
    ]  # fmt: skip
    if not points:
        return Verdict(case=check.case, check=name, passed=None, detail="no rejection seen")
    slow = [p for p in points if (p.rejection_p99_ms or 0) >= check.max_p99_ms]
    worst = max(points, key=lambda p: p.rejection_p99_ms or 0)
    detail = "; ".join(f"{p.arm} {p.load:g}×: p99 {f(p.rejection_p99_ms, 1)} ms" for p in slow)
    detail = detail or (
        f"{sum(p.rejected for p in points)} rejections; slowest p99 "
        f"{f(worst.rejection_p99_ms, 1)} ms ({worst.arm} at {worst.load:g}×)"
    )
    return Verdict(case=check.case, check=name, passed=not slow, detail=detail)


def _collapses(check: NoAdmissionCollapses, _: CaseSummary, d: OverloadDetails | None) -> Verdict:
    name = f"without admission, goodput at {check.load:g}× < {pct(check.max_share)} of the peak"
    point = _at(d, NONE_ARM, check.load) if d else None
    if d is None or point is None or not d.peak_goodput_rps:
        return Verdict(case=check.case, check=name, passed=None,
                       detail=f"arm none did not run at {check.load:g}×")  # fmt: skip
    share = point.goodput_rps / d.peak_goodput_rps
    detail = (
        f"none: goodput {f(point.goodput_rps, 2)} req/s = {pct(share)} of the peak "
        f"{f(d.peak_goodput_rps, 2)}; completed {f(point.completed_rps, 2)} req/s"
    )
    return Verdict(case=check.case, check=name, passed=share < check.max_share, detail=detail)


EVALUATORS: dict[type, Evaluator] = {
    OverloadAccounted: _accounted,
    AdmissionKeepsGoodput: _keeps,
    RejectionsFast: _fast,
    NoAdmissionCollapses: _collapses,
}
