"""overload's typed report section (dumped as ``report.json``'s ``details``)."""

from __future__ import annotations

from pydantic import BaseModel


class LoadPoint(BaseModel):
    """One arm at one load: what was offered and what came of it, all inside the load's
    measurement window (requests *scheduled* in it), every latency from the scheduled time.

    Counts: ``counted`` = ``completed`` + ``rejected`` + ``failed``. Rates are per second of
    the window (``window_s``). ``attainment`` = good ÷ admitted (completed + failed: every
    request the server took); ``None`` when none was admitted. ``reasons``: rejections by
    ``HTTP <status> <reason>``; ``failures``: failures by their error's first words.
    ``rejection_p50_ms`` / ``rejection_p99_ms``: scheduled time → the rejection's answer.
    ``retry_after``: rejections whose answer had a ``Retry-After`` (``valid`` of them by RFC
    9110). ``vllm_rejections``: vLLM's ``admission_rejections_total`` delta over the phase by
    reason (``None``: not exposed). Server gauges are sampled peaks (lower bounds).
    """

    arm: str
    phase: str
    load: float
    offered_rps: float | None
    window_s: float
    planned: int
    counted: int
    completed: int
    rejected: int
    failed: int
    good: int
    goodput_rps: float
    completed_rps: float
    attainment: float | None
    rejected_share: float
    reasons: dict[str, int]
    failures: dict[str, int]
    rejection_p50_ms: float | None
    rejection_p99_ms: float | None
    retry_after: int
    retry_after_valid: int
    ttft_p50_ms: float | None
    ttft_p99_ms: float | None
    send_lateness_p99_ms: float | None
    kv_usage_peak: float | None
    waiting_peak: float | None
    running_peak: float | None
    vllm_rejections: dict[str, float] | None


class Accounting(BaseModel):
    """One arm at one load: planned requests against records (``loadgen`` writes one per
    planned request): ``records`` written, ``duplicates`` (ids seen twice), ``unsent``
    (``not_sent`` or ``interrupted``), ``unexplained`` (failures without a reason)."""

    arm: str
    phase: str
    planned: int
    records: int
    duplicates: int
    unsent: int
    unexplained: int

    @property
    def whole(self) -> bool:
        """Every planned request ended once, as a completion, rejection or failure."""
        return (
            self.records == self.planned
            and self.duplicates == 0
            and self.unsent == 0
            and self.unexplained == 0
        )


class ArmLimit(BaseModel):
    """An arm's limit: ``used`` (what its server or gateway ran with, from ``case.json``),
    ``rule_of_thumb`` (1 × the rule, re-derived from the probe's records), ``flag``."""

    arm: str
    kind: str
    flag: str | None
    used: int | None
    rule_of_thumb: int | None


class Recommendation(BaseModel):
    """At one load: the limited arm with the highest goodput, its limit, the rule of thumb's
    limit of that kind, and the goodputs of both arms."""

    load: float
    arm: str | None
    limit: int | None
    goodput_rps: float | None
    rule_arm: str | None
    rule_limit: int | None
    rule_goodput_rps: float | None


class OverloadDetails(BaseModel):
    """The figures of an overload run (``analysis.reports.overload.details``)."""

    slo_ttft_ms: float | None
    slo_tpot_ms: float | None
    sustainable_rps: float | None
    prefill_tokens_per_s: float | None
    unloaded_ttft_p50_ms: float | None
    unloaded_e2el_p50_ms: float | None
    unloaded_tpot_p50_ms: float | None = None
    saturation_tpot_p50_ms: float | None = None
    limits: list[ArmLimit]
    points: list[LoadPoint]
    accounting: list[Accounting]
    peak_goodput_rps: float | None
    peak_at: str | None
    recommendations: list[Recommendation]
