"""overload's figures, computed from the raw records and samples of one run.

Every request of a load is one of three things: a **completion** (status ``ok``), a
**rejection** (an answer of 429 or 503, or vLLM's admission refusal as an error event inside a
200 stream: the server or gateway refused it) or a **failure**
(anything else, with its error). A completion is **good** when its TTFT and TPOT meet the SLOs,
its TTFT counted from the request's *scheduled* time (``scheduled_ns``), not its dispatch: a
request the client sent late is late (``loadgen.measure`` windows: requests scheduled inside
[t0 + warm-up, t0 + duration) count). Goodput = good ÷ window (req/s); attainment = good ÷
admitted (completions + failures); the rejected share = rejections ÷ counted.

The rules of thumb are re-derived from the probe's records with ``loadgen.measure``'s own
statistics (the very function the run resolved them with), the SLOs likewise (``slo_factor``
× the unloaded TTFT/TPOT p50) unless the run was given them.
"""

from __future__ import annotations

from collections import Counter
from email.utils import parsedate_to_datetime
from typing import Any

import numpy as np

from analysis.load import CaseData, RunData
from analysis.reports.overload.models import (
    Accounting,
    ArmLimit,
    LoadPoint,
    OverloadDetails,
    Recommendation,
)
from loadgen.measure import RequestFacts, measure_phase, window_of
from loadgen.runformat import ReadRecord
from metrics.samples import counter_delta, gauge_peak, series, series_by
from scenarios.late import Measured
from scenarios.overload import NONE_ARM, PREFILL, Overload, OverloadParams
from scenarios.overload_arms import ARM_FLAGS, parse_arms, rule_of_thumb, whole_limit
from scenarios.plan import PhaseSpec
from scenarios.slo_goodput import SATURATION, UNLOADED
from scenarios.values import parse_slo

#: HTTP statuses that refuse a request: the gateway's 429, vLLM's 503.
REJECTION_STATUSES = frozenset({429, 503})

#: What a rejection's body says → its reason (vLLM 0.32's messages, the gateway's type).
_REASONS = (
    ("prefill token backlog", "max_num_queued_tokens"),
    ("cannot accept new requests", "max_num_queued_reqs"),
    ('"overloaded"', "gateway_queue_full"),
)


def is_rejection(record: ReadRecord) -> bool:
    """Refused: an answer of 429 or 503, or an admission refusal sent as an error event
    inside a 200 stream (vLLM checks its limits once the stream may have begun)."""
    if record.status != "error":
        return False
    if record.http_status in REJECTION_STATUSES:
        return True
    text = record.error or ""
    return any(needle in text for needle, reason in _REASONS if reason.startswith("max_num"))


def rejection_reason(record: ReadRecord) -> str:
    """``HTTP 503 max_num_queued_tokens``: the status and what its body names."""
    text = record.error or ""
    for needle, reason in _REASONS:
        if needle in text:
            return f"HTTP {record.http_status} {reason}"
    return f"HTTP {record.http_status} other"


def failure_reason(record: ReadRecord) -> str:
    """A failure's reason: its status and the first words of its error."""
    words = " ".join((record.error or "no reason recorded").split()[:6])
    return f"{record.status}: {words}"


def valid_retry_after(value: str) -> bool:
    """RFC 9110 section 10.2.3: delay-seconds (``1*DIGIT``) or an HTTP-date."""
    text = value.strip()
    if text.isascii() and text.isdigit():
        return True
    if not text or text[0] in "+-" or text[0].isdigit():
        return False
    try:
        parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError, OverflowError):
        return False
    return True


def _pct(values: list[float], q: float) -> float | None:
    return float(np.percentile(values, q)) if values else None


def _good(r: ReadRecord, slo_ttft_ms: float | None, slo_tpot_ms: float | None) -> bool:
    if r.status != "ok" or not r.chunk_ns:
        return False
    ttft_ms = (r.chunk_ns[0] - r.scheduled_ns) / 1e6
    n = sum(r.chunk_tokens)
    tpot_ms = (r.chunk_ns[-1] - r.chunk_ns[0]) / 1e6 / (n - 1) if n >= 2 else 0.0
    return (slo_ttft_ms is None or ttft_ms <= slo_ttft_ms) and (
        slo_tpot_ms is None or tpot_ms <= slo_tpot_ms
    )


def _server(case: CaseData, start_ns: int, end_ns: int) -> dict[str, Any]:
    def peak(name: str) -> float | None:
        peaks = [gauge_peak(p, start_ns, end_ns) for p in series_by(case.samples, name).values()]
        return max((p for p in peaks if p is not None), default=None)

    reasons = {dict(s.labels).get("reason", "") for s in case.samples
               if s.name == "admission_rejections"}  # fmt: skip
    rejections: dict[str, float] | None = None
    if reasons:
        rejections = {}
        for reason in sorted(reasons):
            delta = counter_delta(series(case.samples, "admission_rejections", reason=reason),
                                  start_ns, end_ns)  # fmt: skip
            rejections[reason] = delta or 0.0
    return {
        "kv_usage_peak": peak("kv_cache_usage_perc"),
        "waiting_peak": peak("num_requests_waiting"),
        "running_peak": peak("num_requests_running"),
        "vllm_rejections": rejections,
    }


def load_point(
    arm: str, load: float, spec: PhaseSpec, case: CaseData, slo: tuple[float | None, float | None]
) -> tuple[LoadPoint, Accounting] | None:
    """The figures of ``arm`` at ``load`` (its phase ``spec``), or ``None`` if it never ran."""
    records = [r for r in case.records if r.phase == spec.name]
    row = next((p for p in case.phases if p.phase == spec.name), None)
    window = window_of(spec, [RequestFacts.of(r) for r in records])
    if row is None or window is None or window.length_s <= 0:
        return None
    counted = [r for r in records if window.holds(r.scheduled_ns)]
    ok = [r for r in counted if r.status == "ok"]
    rejected = [r for r in counted if is_rejection(r)]
    failed = [r for r in counted if r.status != "ok" and not is_rejection(r)]
    good = [r for r in ok if _good(r, *slo)]
    admitted = len(ok) + len(failed)
    ttft = [(r.chunk_ns[0] - r.scheduled_ns) / 1e6 for r in ok if r.chunk_ns]
    answered = [(r.end_ns - r.scheduled_ns) / 1e6 for r in rejected if r.end_ns is not None]
    lateness = [(r.sent_ns - r.scheduled_ns) / 1e6 for r in counted if r.sent_ns is not None]
    hints = [r.retry_after for r in rejected if r.retry_after is not None]
    resolved = row.resolved or {}
    rate = resolved.get("rate_rps", getattr(spec.arrival, "rate_rps", None))
    point = LoadPoint(
        arm=arm, phase=spec.name, load=load,
        offered_rps=rate if isinstance(rate, int | float) else None,
        window_s=window.length_s, planned=row.requests or len(records), counted=len(counted),
        completed=len(ok), rejected=len(rejected), failed=len(failed), good=len(good),
        goodput_rps=len(good) / window.length_s, completed_rps=len(ok) / window.length_s,
        attainment=len(good) / admitted if admitted else None,
        rejected_share=len(rejected) / len(counted) if counted else 0.0,
        reasons=dict(Counter(rejection_reason(r) for r in rejected)),
        failures=dict(Counter(failure_reason(r) for r in failed)),
        rejection_p50_ms=_pct(answered, 50), rejection_p99_ms=_pct(answered, 99),
        retry_after=len(hints), retry_after_valid=sum(valid_retry_after(h) for h in hints),
        ttft_p50_ms=_pct(ttft, 50), ttft_p99_ms=_pct(ttft, 99),
        send_lateness_p99_ms=_pct(lateness, 99),
        **_server(case, row.start_ns, row.end_ns),
    )  # fmt: skip
    ids = Counter(r.request_id for r in records)
    accounting = Accounting(
        arm=arm, phase=spec.name, planned=row.requests or 0, records=len(records),
        duplicates=sum(n - 1 for n in ids.values()),
        unsent=sum(r.status in ("not_sent", "interrupted") for r in records),
        unexplained=sum(r.status == "error" and not r.error for r in records),
    )  # fmt: skip
    return point, accounting


def probe_measurements(run: RunData) -> dict[str, dict[str, Any]]:
    """The probe phases' statistics, recomputed from the first case's records."""
    if not run.cases:
        return {}
    case = run.cases[0]
    specs = {p.name: p for p in run.plan.phases_of(run.plan.cases[0])}
    out: dict[str, dict[str, Any]] = {}
    for name in (UNLOADED, PREFILL, SATURATION):
        if name in specs:
            facts = [RequestFacts.of(r) for r in case.records if r.phase == name]
            out[name] = measure_phase(specs[name], facts)
    return out


def _figure(figure: Measured | float, measured: dict[str, dict[str, Any]]) -> int | None:
    if not isinstance(figure, Measured):
        return whole_limit(figure)
    try:
        return whole_limit(figure.resolve(measured))
    except ValueError:
        return None


def arm_limits(
    run: RunData, p: OverloadParams, measured: dict[str, dict[str, Any]]
) -> list[ArmLimit]:
    """Each arm's limit as its server or gateway ran with it, beside the rule of thumb's."""
    sizing = Overload().sizing(p)
    out = []
    for arm in parse_arms(p.admission):
        if arm.kind == "none":
            out.append(
                ArmLimit(arm=arm.name, kind=arm.kind, flag=None, used=None, rule_of_thumb=None)
            )
            continue
        target, flag = ARM_FLAGS[arm.kind]
        case = next((c for c in run.cases if c.name == arm.name), None)
        used = None
        if case is not None and isinstance(case.info.case, dict):
            part = case.info.case.get(target) or {}
            args = list(part.get("extra_args") or [])
            used = int(args[args.index(flag) + 1]) if flag in args[:-1] else None
        rule = _figure(rule_of_thumb(arm.kind, sizing, 1.0), measured)
        out.append(ArmLimit(arm=arm.name, kind=arm.kind, flag=flag, used=used, rule_of_thumb=rule))
    return out


def recommendations(
    points: list[LoadPoint], limits: list[ArmLimit], attainment: float
) -> list[Recommendation]:
    """Per load: the limited arm with the highest goodput among those whose admitted requests
    reach ``attainment`` (all limited arms when none does; fewer rejections break a tie),
    beside the arm of that kind whose limit is nearest the rule of thumb's."""
    by_arm = {a.arm: a for a in limits}
    out = []
    for load in sorted({p.load for p in points}):
        here = [p for p in points if p.load == load and p.arm != NONE_ARM]
        meeting = [p for p in here if (p.attainment or 0) >= attainment]
        best = max(meeting or here, key=lambda p: (p.goodput_rps, -p.rejected_share), default=None)
        rule = None
        if best is not None:
            kind = by_arm[best.arm].kind
            rule_limit = by_arm[best.arm].rule_of_thumb
            same = [p for p in here if by_arm[p.arm].kind == kind and by_arm[p.arm].used]
            if rule_limit is not None and same:
                rule = min(same, key=lambda p: abs((by_arm[p.arm].used or 0) - rule_limit))
        out.append(
            Recommendation(
                load=load,
                arm=best.arm if best else None,
                limit=by_arm[best.arm].used if best else None,
                goodput_rps=best.goodput_rps if best else None,
                rule_arm=rule.arm if rule else None,
                rule_limit=by_arm[best.arm].rule_of_thumb if best else None,
                rule_goodput_rps=rule.goodput_rps if rule else None,
            )
        )
    return out


def overload_details(run: RunData) -> OverloadDetails | None:
    """Every figure of the report, from the run's raw files."""
    p = OverloadParams.model_validate(run.plan.params)
    measured = probe_measurements(run)
    unloaded = measured.get(UNLOADED, {})
    if p.slo is not None:
        given = parse_slo(p.slo)
        slo_ttft, slo_tpot = given.get("ttft"), given.get("tpot")
    else:
        ttft, tpot = unloaded.get("ttft_p50_ms"), unloaded.get("tpot_p50_ms")
        slo_ttft = p.slo_factor * ttft if ttft else None
        slo_tpot = p.slo_factor * tpot if tpot else None
    points: list[LoadPoint] = []
    accounting: list[Accounting] = []
    loads = dict(zip([ph.name for ph in Overload().load_phases(p)], p.loads, strict=True))
    for spec_case, case in zip(run.plan.cases, run.cases, strict=True):
        for spec in run.plan.phases_of(spec_case):
            if spec.name not in loads:
                continue
            got = load_point(case.name, loads[spec.name], spec, case, (slo_ttft, slo_tpot))
            if got is not None:
                points.append(got[0])
                accounting.append(got[1])
    limits = arm_limits(run, p, measured)
    peak = max(points, key=lambda q: q.goodput_rps, default=None)
    rate = p.sustainable_rate or measured.get(SATURATION, {}).get("closed_loop_rps")
    return OverloadDetails(
        slo_ttft_ms=slo_ttft, slo_tpot_ms=slo_tpot, sustainable_rps=rate,
        prefill_tokens_per_s=measured.get(PREFILL, {}).get("prefill_tokens_per_s"),
        unloaded_ttft_p50_ms=unloaded.get("ttft_p50_ms"),
        unloaded_e2el_p50_ms=unloaded.get("e2el_p50_ms"),
        unloaded_tpot_p50_ms=unloaded.get("tpot_p50_ms"),
        saturation_tpot_p50_ms=measured.get(SATURATION, {}).get("tpot_p50_ms"),
        limits=limits, points=points, accounting=accounting,
        peak_goodput_rps=peak.goodput_rps if peak else None,
        peak_at=f"{peak.arm} at {peak.load:g}×" if peak else None,
        recommendations=recommendations(points, limits, p.attainment),
    )  # fmt: skip
