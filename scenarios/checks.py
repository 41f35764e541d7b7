"""Declared expectations (verdict checks) of a scenario, as data; ``analysis`` evaluates them.

Each check names the case and phase(s) it is about; the effect a scenario is supposed to cause
is written down before the run, and the report says PASS or FAIL for each from recorded data.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field


class ProbeCache(BaseModel):
    """The probe requests (first request per prefix group) of a phase hit or miss the cache.

    ``hit``: every probe has ``cached_tokens >= min_cached_tokens``.
    ``miss``: every probe has ``cached_tokens <= max_cached_tokens``.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")
    kind: Literal["probe_cache"] = "probe_cache"
    case: str
    phase: str
    expect: Literal["hit", "miss"]
    min_cached_tokens: int = 1
    max_cached_tokens: int = 0
    #: What a failure means, shown with it (e.g. how to fix the set-up).
    why: str = ""


class HitRateCompare(BaseModel):
    """Prefix-cache hit rate (from counter deltas) of ``phase`` against ``other`` phase.

    ``below``: rate(phase) < rate(other) − tolerance.
    ``close``: |rate(phase) − rate(other)| ≤ tolerance.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")
    kind: Literal["hit_rate_compare"] = "hit_rate_compare"
    case: str
    phase: str
    other: str
    relation: Literal["below", "close"]
    tolerance: float = Field(default=0.02, ge=0)


class LatencyRatio(BaseModel):
    """stat(metric, phase) / stat(metric, other) ≥ ``min_ratio`` (revisit TTFT p95 vs warm)."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    kind: Literal["latency_ratio"] = "latency_ratio"
    case: str
    phase: str
    other: str
    metric: Literal["ttft_ms", "tpot_ms", "e2el_ms"] = "ttft_ms"
    stat: Literal["mean", "p50", "p90", "p95", "p99"] = "p95"
    min_ratio: float = Field(gt=0)


class CapacityAtLeast(BaseModel):
    """The case's real KV capacity is at least ``tokens`` (e.g. a control that must hold all)."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    kind: Literal["capacity_at_least"] = "capacity_at_least"
    case: str
    tokens: int = Field(gt=0)
    why: str = ""


class PreemptionAsPredicted(BaseModel):
    """Preemptions happen in ``phase`` exactly when the hand calculation predicts them.

    With the case's real capacity (N blocks of B tokens), C requests of ``prompt_tokens`` +
    ``output_tokens`` need C × ceil((prompt + output) / B) blocks at the end of decode;
    predicted = that exceeds N. Passes when (Δ``num_preemptions`` > 0) == predicted.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")
    kind: Literal["preemption_as_predicted"] = "preemption_as_predicted"
    case: str
    phase: str
    concurrency: int = Field(gt=0)
    prompt_tokens: int = Field(gt=0)
    output_tokens: int = Field(gt=0)


class KVPeakMatchesWorkingSet(BaseModel):
    """Where no preemption is predicted, the sampled KV-usage peak is within ``tolerance``
    (a fraction, 0.05 = 5 points) of the final working set / capacity, in blocks."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    kind: Literal["kv_peak_matches_working_set"] = "kv_peak_matches_working_set"
    case: str
    phase: str
    concurrency: int = Field(gt=0)
    prompt_tokens: int = Field(gt=0)
    output_tokens: int = Field(gt=0)
    tolerance: float = Field(default=0.05, gt=0)


class DisconnectFreesServer(BaseModel):
    """After the last client disconnect, the server drops the abandoned requests.

    Passes when ``num_requests_running`` is back to (baseline + requests still open at the
    client) within ``within_s`` seconds of the last disconnect, and the generation tokens no
    client received are at most ``max_wasted_fraction`` of what the abandoned requests would
    have generated had they run to completion.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")
    kind: Literal["disconnect_frees_server"] = "disconnect_frees_server"
    case: str
    phase: str
    within_s: float = Field(default=1.0, gt=0)
    max_wasted_fraction: float = Field(default=0.1, ge=0)


class OrphansRunOn(BaseModel):
    """The abandoned requests keep running (a proxy that swallows disconnects): at least
    ``min_wasted_fraction`` of their remaining tokens are generated for nobody."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    kind: Literal["orphans_run_on"] = "orphans_run_on"
    case: str
    phase: str
    min_wasted_fraction: float = Field(default=0.8, ge=0)


class BreakerEpisode(BaseModel):
    """The gateway's breaker for the killed replica goes closed → open after the kill, tries
    half-open probes, and closes again after the replica is back; meanwhile traffic moves to
    the healthy replica so at least ``min_success_ratio`` of the phase's requests succeed."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    kind: Literal["breaker_episode"] = "breaker_episode"
    case: str
    phase: str
    replica: int = Field(ge=1)
    min_success_ratio: float = Field(default=0.9, ge=0, le=1)


Check = Annotated[
    ProbeCache
    | HitRateCompare
    | LatencyRatio
    | CapacityAtLeast
    | PreemptionAsPredicted
    | KVPeakMatchesWorkingSet
    | DisconnectFreesServer
    | OrphansRunOn
    | BreakerEpisode,
    Field(discriminator="kind"),
]
