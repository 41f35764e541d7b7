"""Evaluating a plan's declared checks → PASS/FAIL/UNDECIDED verdicts.

The checks any scenario can use (``scenarios.checks``) are evaluated here; a scenario's own
check kinds by the evaluators its report module declares (``analysis.reports``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from analysis.models import CaseSummary, Verdict, VerdictSummary
from analysis.reports import Evaluator, ScenarioReport
from metrics.names import MissingFamilyError
from scenarios.checks import CapacityAtLeast, CheckSpec, LatencyRatio


def fmt(x: float | None, digits: int = 3) -> str:
    """``x`` with ``digits`` decimals, or ``n/a``."""
    return "n/a" if x is None else f"{x:.{digits}f}"


def _latency(check: LatencyRatio, case: CaseSummary, _: Any) -> Verdict:
    a_phase, b_phase = case.phases.get(check.phase), case.phases.get(check.other)
    a = getattr(getattr(a_phase, check.metric), check.stat) if a_phase else None
    b = getattr(getattr(b_phase, check.metric), check.stat) if b_phase else None
    ratio = a / b if a is not None and b else None
    name = f"{check.phase}/{check.other} {check.metric} {check.stat} ≥ {check.min_ratio}×"
    passed = None if ratio is None else ratio >= check.min_ratio
    detail = f"{fmt(a, 1)} ms / {fmt(b, 1)} ms = {fmt(ratio, 2)}×"
    return Verdict(case=check.case, check=name, passed=passed, detail=detail)


def _capacity(check: CapacityAtLeast, case: CaseSummary, _: Any) -> Verdict:
    capacity = (case.server.get("capacity") or {}).get("tokens")
    name = f"KV capacity ≥ {check.tokens} tokens"
    passed = None if capacity is None else capacity >= check.tokens
    if capacity is None:  # the server's facts keep why it could not be read
        why_unknown = case.server.get("capacity_error") or "not recorded"
        detail = f"capacity unknown ({why_unknown}); {check.why}".strip("; ")
    else:
        detail = f"capacity {capacity} tokens; {check.why}".strip("; ")
    return Verdict(case=check.case, check=name, passed=passed, detail=detail)


GENERIC_EVALUATORS: dict[type, Evaluator] = {LatencyRatio: _latency, CapacityAtLeast: _capacity}
#: Checks that can be decided without any phase having run.
_NEEDS_NO_PHASE: tuple[type, ...] = (CapacityAtLeast,)


def evaluate(
    checks: Sequence[CheckSpec],
    cases: dict[str, CaseSummary],
    report: ScenarioReport[Any],
    details: Any,
) -> list[Verdict]:
    """One verdict per check; a check on a case that did not run is undecided (``None``), and
    so is one whose server lacked a metric family it needs (``CheckSpec.families``). A check
    about a phase that is incomplete (``PhaseSummary.incomplete``) keeps its outcome, and its
    detail names the incomplete phase (the data quality list says why).

    Raises:
        KeyError: a check kind that neither the generic evaluators nor the scenario's
            report module can evaluate.
    """
    evaluators = {**GENERIC_EVALUATORS, **report.evaluators}
    verdicts = []
    for check in checks:
        case = cases.get(check.case)
        if case is None or (not case.phases and not isinstance(check, _NEEDS_NO_PHASE)):
            verdicts.append(
                Verdict(
                    case=check.case,
                    check=check.kind,
                    passed=None,
                    detail="case has no completed phase",
                )
            )
            continue
        evaluator = evaluators.get(type(check))
        if evaluator is None:
            raise KeyError(f"no evaluator for check kind {check.kind!r}")
        verdict = evaluator(check, case, details)
        lacking = [f for f in type(check).families if f in case.missing_families]
        if lacking:  # decided from a family this server never exposed: say so, do not guess
            version = case.server.get("version") or "unknown"
            reasons = "; ".join(str(MissingFamilyError(f)) for f in lacking)
            verdict = verdict.model_copy(
                update={"passed": None, "detail": f"cannot decide on vLLM {version}: {reasons}"}
            )
        partial = [
            name
            for name in dict.fromkeys(
                (getattr(check, "phase", None), getattr(check, "other", None))
            )
            if isinstance(name, str) and name in case.phases and case.phases[name].incomplete
        ]
        if partial:  # decided from part of a phase: keep the outcome, say so beside it
            names = ", ".join(partial)
            verdict = verdict.model_copy(
                update={"detail": f"{verdict.detail} [phase {names} incomplete: see data quality]"}
            )
        verdicts.append(verdict)
    return verdicts


def summary(verdicts: Sequence[Verdict]) -> VerdictSummary:
    """Passed, failed and undecided counts."""
    decided = [v for v in verdicts if v.passed is not None]
    return VerdictSummary(
        passed=sum(1 for v in decided if v.passed),
        failed=sum(1 for v in decided if not v.passed),
        undecided=len(verdicts) - len(decided),
    )
