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


Check = Annotated[
    ProbeCache | HitRateCompare | LatencyRatio | CapacityAtLeast, Field(discriminator="kind")
]
