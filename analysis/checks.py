"""Evaluating a plan's declared checks against the case summaries → PASS/FAIL verdicts."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

from analysis.preemption import hand_calculation
from scenarios.checks import (
    BreakerEpisode,
    CapacityAtLeast,
    Check,
    DisconnectFreesServer,
    HitRateCompare,
    KVPeakMatchesWorkingSet,
    LatencyRatio,
    OrphansRunOn,
    PreemptionAsPredicted,
    ProbeCache,
)


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
    if not all(good) and check.why:
        detail += f" — {check.why}"
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


def _shape_calc(check: Any, case: dict[str, Any]) -> dict[str, Any] | None:
    capacity = (case.get("server") or {}).get("capacity")
    if not capacity:
        return None
    return hand_calculation(capacity, check.concurrency, check.prompt_tokens, check.output_tokens)


def _preemption(check: PreemptionAsPredicted, case: dict[str, Any]) -> Verdict:
    calc = _shape_calc(check, case)
    delta = case["phases"].get(check.phase, {}).get("counter_deltas", {}).get("num_preemptions")
    name = f"preemptions as predicted in {check.phase}"
    if calc is None or delta is None:
        return Verdict(check.case, name, None, "capacity or preemption counter missing")
    predicted = calc["predicted_preemption"]
    detail = (
        f"final working set {calc['final_working_set_blocks']} blocks vs "
        f"{calc['usable_blocks']} usable → {'preempts' if predicted else 'fits'}; "
        f"measured Δnum_preemptions = {delta:.0f}"
    )
    return Verdict(check.case, name, (delta > 0) == predicted, detail)


def _kv_peak(check: KVPeakMatchesWorkingSet, case: dict[str, Any]) -> Verdict:
    calc = _shape_calc(check, case)
    peak = case["phases"].get(check.phase, {}).get("gauge_peaks", {}).get("kv_cache_usage_perc")
    name = f"KV peak matches the working set in {check.phase}"
    if calc is None or peak is None:
        return Verdict(check.case, name, None, "capacity or KV-usage samples missing")
    expected = calc["predicted_kv_peak"]
    detail = (
        f"sampled peak {peak:.3f} (a lower bound) vs expected {expected:.3f} "
        f"= min(1, {calc['final_working_set_blocks']}/{calc['usable_blocks']} blocks), "
        f"tolerance {check.tolerance}"
    )
    return Verdict(check.case, name, abs(peak - expected) <= check.tolerance, detail)


def _disconnect_row(check: Any, case: dict[str, Any]) -> dict[str, Any] | None:
    rows = [r for r in case.get("disconnects", []) if r["phase"] == check.phase]
    return rows[0] if rows else None


def _frees(check: DisconnectFreesServer, case: dict[str, Any]) -> Verdict:
    row = _disconnect_row(check, case)
    name = f"server freed within {check.within_s} s of the last disconnect"
    if row is None or row["time_to_free_s"] is None or row["wasted_fraction"] is None:
        detail = "no disconnect recorded" if row is None else "server never seen free"
        return Verdict(check.case, name, None if row is None else False, detail)
    ok = (
        row["time_to_free_s"] <= check.within_s
        and row["wasted_fraction"] <= check.max_wasted_fraction
    )
    detail = (
        f"running back after {row['time_to_free_s']:.2f} s (sampled); wasted "
        f"{row['wasted_tokens']:.0f} of a {row['orphan_budget_tokens']} token orphan budget "
        f"({row['wasted_fraction']:.1%}, limit {check.max_wasted_fraction:.0%})"
    )
    return Verdict(check.case, name, ok, detail)


def _orphans(check: OrphansRunOn, case: dict[str, Any]) -> Verdict:
    row = _disconnect_row(check, case)
    name = "orphaned requests run on after the disconnect"
    if row is None or row["wasted_fraction"] is None:
        return Verdict(check.case, name, None, "no disconnect recorded")
    detail = (
        f"wasted {row['wasted_tokens']:.0f} of a {row['orphan_budget_tokens']} token orphan "
        f"budget ({row['wasted_fraction']:.1%}, expected ≥ {check.min_wasted_fraction:.0%}); "
        f"zombie time {row['zombie_s']:.1f} s"
    )
    return Verdict(check.case, name, row["wasted_fraction"] >= check.min_wasted_fraction, detail)


def _at(t: dict[str, Any] | None, key: str = "t_s") -> str:
    return "never" if t is None else f"{t[key]:.2f} s"


def _breaker(check: BreakerEpisode, case: dict[str, Any]) -> Verdict:
    ep = next((e for e in case.get("breaker", []) if e["phase"] == check.phase), None)
    name = f"breaker opens, probes and closes around replica {check.replica}'s outage"
    if ep is None:
        return Verdict(check.case, name, None, "no breaker episode recorded")
    mine = [f for f in ep["faults"] if f.get("replica") == check.replica]
    kill = next((f for f in mine if "killed_s" in f), None)
    back = next((f for f in mine if "healthy_s" in f), None)
    if kill is None:
        return Verdict(check.case, name, None, "the fault was not injected")
    # *_s times are seconds from the phase start (see analysis.breaker).
    seq = [
        t
        for t in ep["transitions"]
        if t["upstream"] == kill["url"] and t["t_s"] >= kill["killed_s"]
    ]
    opened = next((t for t in seq if t["to"] == "open"), None)
    probed = next(
        (t for t in seq if t["to"] == "half_open" and opened and t["t_s"] > opened["t_s"]), None
    )
    closed = None
    if back is not None:
        closed = next(
            (t for t in seq if t["to"] == "closed" and t["t_s"] >= back["healthy_s"]), None
        )
    ratio = ep["success_ratio"] or 0.0
    recovered = closed is not None or back is None
    ok = (
        opened is not None and probed is not None and recovered and ratio >= check.min_success_ratio
    )
    detail = (
        f"killed at {_at(kill, 'killed_s')}, back at {_at(back, 'healthy_s')}; open "
        f"{_at(opened)}, first half-open {_at(probed)}, closed {_at(closed)}; "
        f"{ep['ok']}/{ep['requests']} requests ok ({ratio:.1%}, need ≥ "
        f"{check.min_success_ratio:.0%})"
    )
    last_send = ep.get("last_send_s")
    if (
        back is not None
        and closed is None
        and last_send is not None
        and back["healthy_s"] > last_send
    ):
        detail += "; the replica came back after the last request was sent: lengthen the episode"
    return Verdict(check.case, name, ok, detail)


_EVALUATORS: dict[type, Callable[[Any, dict[str, Any]], Verdict]] = {
    ProbeCache: _probe,
    HitRateCompare: _hit_rate,
    LatencyRatio: _latency,
    CapacityAtLeast: _capacity,
    PreemptionAsPredicted: _preemption,
    KVPeakMatchesWorkingSet: _kv_peak,
    DisconnectFreesServer: _frees,
    OrphansRunOn: _orphans,
    BreakerEpisode: _breaker,
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
