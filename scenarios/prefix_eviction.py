"""prefix-eviction: does the prefix cache keep the prefixes you care about under pollution?

Phases: cold, warm (anchors), pollution (fresh prefixes, a working set
several times the KV capacity), revisit, rewarm (anchors again). Within a phase only the first
request per anchor (the *probe*) can miss, so the signal is in the probes and the TTFT p95.
Cases: the requested cache and a control large enough to hold anchors and pollution.
See docs/scenarios/prefix-eviction.md.
"""

from __future__ import annotations

import math
from typing import ClassVar, Literal

from pydantic import Field, field_validator, model_validator

from scenarios.arrivals import ClosedLoop
from scenarios.base import Scenario
from scenarios.checks import CapacityAtLeast, Check, CheckSpec, LatencyRatio
from scenarios.common import (
    MAX_CONCURRENCY,
    MAX_RATIO,
    MAX_REQUESTS,
    MAX_TOKENS,
    HttpUrlText,
    RunParams,
    SizeText,
    same_server,
)
from scenarios.plan import CaseSpec, PhaseSpec, Plan
from scenarios.workloads import AnchoredPrompts, UniquePrompts
from server.capacity import KVCapacity
from server.sizes import format_size, parse_size

PHASES = ("cold", "warm", "pollution", "revisit", "rewarm")
_GiB = 2**30


class ProbeCache(CheckSpec):
    """The probe requests (first request per prefix group) of a phase hit or miss the cache.

    ``hit``: every probe has ``cached_tokens >= min_cached_tokens``.
    ``miss``: every probe has ``cached_tokens <= max_cached_tokens``.
    """

    kind: Literal["probe_cache"] = "probe_cache"
    phase: str
    expect: Literal["hit", "miss"]
    min_cached_tokens: int = 1
    max_cached_tokens: int = 0
    #: What a failure means, shown with it (e.g. how to fix the set-up).
    why: str = ""


class HitRateCompare(CheckSpec):
    """Prefix-cache hit rate (from counter deltas) of ``phase`` against ``other`` phase.

    ``below``: rate(phase) < rate(other) − tolerance.
    ``close``: |rate(phase) − rate(other)| ≤ tolerance.
    """

    kind: Literal["hit_rate_compare"] = "hit_rate_compare"
    families: ClassVar[tuple[str, ...]] = ("prefix_cache_hits", "prefix_cache_queries")
    phase: str
    other: str
    relation: Literal["below", "close"]
    tolerance: float = Field(default=0.02, ge=0)


#: Ceiling of --pollution-factor: 100 × the KV capacity in fresh prompts is already hours of
#: prefill on the CPU vLLM; the pollution count is also capped at MAX_REQUESTS in the plan.
MAX_POLLUTION_FACTOR = 100.0


class PrefixEvictionParams(RunParams):
    """Knobs of prefix-eviction (each becomes a ``--flag``)."""

    cache: SizeText = Field(
        default="1GiB", description="KV cache size of the tested case (bytes: 1GiB = 2^30)."
    )
    control: str = Field(
        default="auto",
        description="Control case cache: a size, 'auto' (holds anchors + pollution), or 'none'.",
    )
    url: HttpUrlText | None = Field(
        default=None, description="Attach to this running server instead of starting one."
    )
    control_url: HttpUrlText | None = Field(
        default=None, description="Running server for the control case."
    )
    anchors: int = Field(
        default=4,
        gt=0,
        le=MAX_REQUESTS,
        description="Distinct anchor prefixes (at most --requests).",
    )
    prefix_tokens: int = Field(
        default=1024, gt=0, le=MAX_TOKENS, description="Anchor prefix length (tokens)."
    )
    suffix_tokens: int = Field(
        default=32, ge=1, le=MAX_TOKENS, description="Unique suffix per request (tokens)."
    )
    requests: int = Field(
        default=48, gt=0, le=MAX_REQUESTS, description="Requests per anchor phase."
    )
    pollution_requests: int = Field(
        default=48,
        gt=0,
        le=MAX_REQUESTS,
        description="Minimum fresh-prefix requests in pollution (scaled up to --pollution-factor).",
    )
    pollution_factor: float = Field(
        default=2.5,
        gt=1.0,
        le=MAX_POLLUTION_FACTOR,
        description="Pollution working set as a multiple of the KV capacity.",
    )
    concurrency: int = Field(
        default=4, gt=0, le=MAX_CONCURRENCY, description="Closed-loop concurrency."
    )
    output_tokens: int = Field(
        default=16, ge=2, le=MAX_TOKENS, description="Output tokens per request (exact)."
    )
    ttft_p95_min_ratio: float = Field(
        default=1.2,
        gt=0,
        le=MAX_RATIO,
        description="Revisit/warm TTFT p95 needed to call eviction visible.",
    )
    hit_rate_tolerance: float = Field(
        default=0.02, ge=0, le=1, description="'Close' for hit-rate comparisons (0-1)."
    )

    @field_validator("control")
    @classmethod
    def _control_size(cls, value: str) -> str:
        if value not in ("auto", "none"):
            parse_size(value)
        return value

    @model_validator(mode="after")
    def _fits(self) -> PrefixEvictionParams:
        self.check_fits(self.prefix_tokens + self.suffix_tokens, self.output_tokens)
        if self.anchors > self.requests:
            # Request i uses anchor i % anchors: anchors past the requests are never probed.
            raise ValueError(
                f"anchors ({self.anchors}) must not exceed requests ({self.requests}): request "
                f"i of a phase probes anchor prefix i mod {self.anchors}, so anchor prefixes "
                f"{self.requests} to {self.anchors - 1} would never be probed"
            )
        if self.url and self.control_url and same_server(self.url, self.control_url):
            raise ValueError(
                "control_url must name another server than url: the control case needs a "
                "cache of its own (the test case's pollution would evict its anchors)"
            )
        return self


def control_blocks_needed(p: PrefixEvictionParams, pollution: int, block_size: int) -> int:
    """KV blocks a control cache needs so that nothing is evicted before *revisit*.

    Every block allocated from the start of *cold* to the end of *pollution* must fit without
    reusing a cached block; then no eviction policy can drop an anchor. Allocations: each
    anchor's full prefix blocks once; per anchor request (cold and warm) its blocks beyond
    the prefix (suffix + output, at least the partial last block); per pollution request all
    its blocks; plus vLLM's reserved null block.
    """
    per_request = math.ceil((p.prefix_tokens + p.suffix_tokens + p.output_tokens) / block_size)
    prefix_blocks = p.prefix_tokens // block_size
    return (
        p.anchors * prefix_blocks
        + 2 * p.requests * (per_request - prefix_blocks)
        + pollution * per_request
        + 1
    )


class PrefixEviction(Scenario[PrefixEvictionParams]):
    name: ClassVar[str] = "prefix-eviction"
    summary: ClassVar[str] = (
        "Anchor prefixes, then a flood of fresh prefixes: are the anchors evicted, and what do "
        "the probe requests pay? (cold/warm/pollution/revisit/rewarm)"
    )
    Params = PrefixEvictionParams

    def sizing_case(self, p: PrefixEvictionParams) -> CaseSpec:
        if p.url:
            return CaseSpec(name="cache", role="test", url=p.url, label=f"attached {p.url}")
        cache = parse_size(p.cache)
        return CaseSpec(
            name=format_size(cache),
            role="test",
            server=p.server(cache),
            label=f"cache {p.cache}",
        )

    def plan(self, p: PrefixEvictionParams, capacity: KVCapacity) -> Plan:
        prompt = p.prefix_tokens + p.suffix_tokens
        pollution = _pollution_requests(p, capacity)
        # Unknown block size (capacity read from the log): 128, the CPU backend's, is the
        # conservative guess (bigger blocks waste more on partial blocks).
        block = capacity.block_size or 128
        needed_blocks = control_blocks_needed(p, pollution, block)
        needed_tokens = needed_blocks * block
        test = self.sizing_case(p)
        control, control_bytes = _control_case(p, capacity, needed_tokens)
        cases = [test] if control is None else [test, control]
        hit_min = p.prefix_tokens // 2
        return Plan(
            scenario=self.name,
            description=self.summary,
            params=p.model_dump(),
            sizing={
                "capacity_tokens": capacity.tokens,
                "block_size": capacity.block_size,
                "capacity_source": capacity.source,
                "prompt_tokens": prompt,
                "pollution_requests": pollution,
                "pollution_working_set_tokens": pollution * prompt,
                "pollution_over_capacity": round(pollution * prompt / capacity.tokens, 2),
                "anchor_tokens": p.anchors * p.prefix_tokens,
                "control_needs_blocks": needed_blocks,
                "control_needs_tokens": needed_tokens,
                "control_cache_bytes": control_bytes,
                "probe_hit_min_cached_tokens": hit_min,
            },
            cases=tuple(cases),
            phases=_phases(p, pollution),
            checks=tuple(_checks(p, test, cases[1:], needed_tokens, hit_min)),
            **p.plan_fields(),
        )


def _pollution_requests(p: PrefixEvictionParams, capacity: KVCapacity) -> int:
    """Unique prompts enough to cover ``pollution_factor`` × the KV capacity (at least
    ``pollution_requests``).

    Raises:
        ValueError: more than ``MAX_REQUESTS`` would be needed.
    """
    prompt = p.prefix_tokens + p.suffix_tokens
    pollution = max(p.pollution_requests, math.ceil(p.pollution_factor * capacity.tokens / prompt))
    if pollution > MAX_REQUESTS:
        raise ValueError(
            f"pollution needs {pollution} requests of {prompt} tokens to cover "
            f"{p.pollution_factor:g} × {capacity.tokens} KV tokens, more than "
            f"{MAX_REQUESTS}: lower --pollution-factor or raise --prefix-tokens"
        )
    return pollution


def _control_case(
    p: PrefixEvictionParams, capacity: KVCapacity, needed_tokens: int
) -> tuple[CaseSpec | None, int | None]:
    """(the control case, or ``None``; its cache in bytes when it is started here): an
    attached control URL, or a server whose cache holds ``needed_tokens`` (``auto``: 10 %
    headroom, rounded up to whole GiB). An attached test server gets no local control."""
    if p.control_url:
        attached = CaseSpec(
            name="control", role="control", url=p.control_url, label=f"attached {p.control_url}"
        )
        return attached, None
    if p.control == "none" or p.url:
        return None, None
    if p.control == "auto":
        bytes_per_token = (capacity.memory_bytes or parse_size(p.cache)) / capacity.tokens
        control_bytes = math.ceil(1.1 * needed_tokens * bytes_per_token / _GiB) * _GiB
    else:
        control_bytes = parse_size(p.control)
    case = CaseSpec(
        name=f"control-{format_size(control_bytes)}",
        role="control",
        server=p.server(control_bytes),
        label=f"control cache {format_size(control_bytes)}",
    )
    return case, control_bytes


def _phases(p: PrefixEvictionParams, pollution: int) -> tuple[PhaseSpec, ...]:
    """The phases in order: the anchored prompts each time, unique ones for the pollution."""
    anchored = AnchoredPrompts(
        anchors=p.anchors,
        prefix_tokens=p.prefix_tokens,
        suffix_tokens=p.suffix_tokens,
        requests=p.requests,
        output_tokens=p.output_tokens,
    )
    fresh = UniquePrompts(
        prompt_tokens=p.prefix_tokens + p.suffix_tokens,
        requests=pollution,
        output_tokens=p.output_tokens,
    )
    arrival = ClosedLoop(concurrency=p.concurrency)
    return tuple(
        PhaseSpec(
            name=name,
            workload=fresh if name == "pollution" else anchored,
            arrival=arrival,
            settle_s=p.settle_s,
        )
        for name in PHASES
    )


def _checks(
    p: PrefixEvictionParams,
    test: CaseSpec,
    controls: list[CaseSpec],
    needed_tokens: int,
    hit_min: int,
) -> list[Check]:
    """The test case evicts (revisit misses like cold, below warm, slower); each control
    keeps the prefixes (revisit hits like warm) and holds every block allocated before it."""
    cold_start = (
        "the cold phase must start cold: the server already held these prefixes "
        "(an attached server reused?); run with another --seed"
    )
    tolerance = p.hit_rate_tolerance
    checks: list[Check] = [
        ProbeCache(case=test.name, phase="cold", expect="miss", why=cold_start),
        ProbeCache(case=test.name, phase="warm", expect="hit", min_cached_tokens=hit_min),
        ProbeCache(case=test.name, phase="revisit", expect="miss", max_cached_tokens=0),
        ProbeCache(case=test.name, phase="rewarm", expect="hit", min_cached_tokens=hit_min),
        HitRateCompare(case=test.name, phase="revisit", other="warm", relation="below",
                       tolerance=tolerance),
        HitRateCompare(case=test.name, phase="revisit", other="cold", relation="close",
                       tolerance=tolerance),
        LatencyRatio(case=test.name, phase="revisit", other="warm", metric="ttft_ms",
                     stat="p95", min_ratio=p.ttft_p95_min_ratio),
    ]  # fmt: skip
    for case in controls:
        checks += [
            ProbeCache(case=case.name, phase="cold", expect="miss", why=cold_start),
            CapacityAtLeast(case=case.name, tokens=needed_tokens,
                            why="the control must hold every block allocated before revisit"),
            ProbeCache(case=case.name, phase="revisit", expect="hit", min_cached_tokens=hit_min),
            HitRateCompare(case=case.name, phase="revisit", other="warm", relation="close",
                           tolerance=tolerance),
        ]  # fmt: skip
    return checks
