"""Evaluating a plan's declared checks against the case summaries → PASS/FAIL verdicts."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

from scenarios.checks import CapacityAtLeast, Check, HitRateCompare, LatencyRatio, ProbeCache


@dataclass(frozen=True)
class Verdict:
    """Outcome of one check: ``passed`` is None when the data to decide was missing."""

    case: str
    check: str
    passed: bool | None
    detail: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _fmt(x: float | None, digits: int = 3) -> str:
    return "n/a" if x is None else f"{x:.{digits}f}"


def _probe(check: ProbeCache, case: dict[str, Any]) -> Verdict:
    probes = [p for p in case["probes"] if p["phase"] == check.phase]
    name = f"{check.phase} probes {check.expect}"
    if not probes:
        return Verdict(check.case, name, None, f"no probe requests recorded in {check.phase}")
    cached = [p["cached_tokens"] for p in probes]
    if check.expect == "hit":
        good = [c is not None and c >= check.min_cached_tokens for c in cached]
        rule = f"cached tokens ≥ {check.min_cached_tokens}"
    else:
        good = [c is not None and c <= check.max_cached_tokens for c in cached]
        rule = f"cached tokens ≤ {check.max_cached_tokens}"
    detail = f"{sum(good)}/{len(good)} probes {check.expect} ({rule}); cached tokens: {cached}"
    return Verdict(check.case, name, all(good), detail)


def _hit_rate(check: HitRateCompare, case: dict[str, Any]) -> Verdict:
    phases = case["phases"]
    a = phases.get(check.phase, {}).get("hit_rate_counters")
    b = phases.get(check.other, {}).get("hit_rate_counters")
    if check.relation == "below":
        name = f"{check.phase} hit rate below {check.other}"
        passed = None if a is None or b is None else a < b - check.tolerance
    else:
        name = f"{check.phase} hit rate close to {check.other}"
        passed = None if a is None or b is None else abs(a - b) <= check.tolerance
    detail = f"{check.phase} {_fmt(a)} vs {check.other} {_fmt(b)} (tolerance {check.tolerance})"
    return Verdict(check.case, name, passed, detail)


def _latency(check: LatencyRatio, case: dict[str, Any]) -> Verdict:
    phases = case["phases"]
    a = phases.get(check.phase, {}).get(check.metric, {}).get(check.stat)
    b = phases.get(check.other, {}).get(check.metric, {}).get(check.stat)
    ratio = a / b if a is not None and b else None
    name = f"{check.phase}/{check.other} {check.metric} {check.stat} ≥ {check.min_ratio}×"
    passed = None if ratio is None else ratio >= check.min_ratio
    detail = f"{_fmt(a, 1)} ms / {_fmt(b, 1)} ms = {_fmt(ratio, 2)}×"
    return Verdict(check.case, name, passed, detail)


def _capacity(check: CapacityAtLeast, case: dict[str, Any]) -> Verdict:
    capacity = ((case.get("server") or {}).get("capacity") or {}).get("tokens")
    name = f"KV capacity ≥ {check.tokens} tokens"
    passed = None if capacity is None else capacity >= check.tokens
    return Verdict(check.case, name, passed, f"capacity {capacity} tokens; {check.why}".strip("; "))


_EVALUATORS: dict[type, Callable[[Any, dict[str, Any]], Verdict]] = {
    ProbeCache: _probe,
    HitRateCompare: _hit_rate,
    LatencyRatio: _latency,
    CapacityAtLeast: _capacity,
}


def evaluate(checks: tuple[Check, ...], cases: dict[str, dict[str, Any]]) -> list[Verdict]:
    """One verdict per check; a check on a case that did not run is undecided (``None``)."""
    verdicts = []
    for check in checks:
        case = cases.get(check.case)
        if case is None or (not case["phases"] and not isinstance(check, CapacityAtLeast)):
            verdicts.append(Verdict(check.case, check.kind, None, "case has no completed phase"))
        else:
            verdicts.append(_EVALUATORS[type(check)](check, case))
    return verdicts
