"""slo-goodput: how many requests per second does the server sustain within its latency SLOs?

An open-loop rate sweep, goodput under SLOs, and the capacity-planning answer. One case, one
server; phases in order:

1. ``unloaded`` — one request at a time (closed loop, C = 1): the unloaded TTFT and TPOT. When
   no SLO is given, the SLOs are derived from it: ``slo_factor`` (3) × its TTFT p50 and TPOT
   p50 (``Plan.derived``, resolved and printed right after it; the report re-derives them).
2. ``saturation`` — a closed loop at a concurrency that fills the batch
   (:func:`saturation_concurrency`: twice the batch limit, never more than the KV cache holds
   at full length; the senders start spread over the warm-up, ``ramp_s``) for
   ``saturation_duration``: the server's maximum completed requests/s with this workload
   (``closed_loop_rps``, ``loadgen.measure``).
3. ``rate-…`` — open-loop phases at increasing offered rates, each sending for ``duration``
   (the first ``warmup`` seconds sent and recorded but not counted; the request count is the
   number of arrivals of its seeded schedule in that time). With ``--rates auto`` each rate is
   a fraction of the saturation throughput (a late-bound figure, ``scenarios.late``), default
   0.25, 0.5, 0.75, 0.9, 1.0, 1.5, 2.0: from a quarter to twice the saturation.

The started server runs with ``max_num_seqs`` 16, so an overload shows as a waiting queue that
grows without bound rather than as every request decoding slower. Why these defaults (batch
limit, saturation concurrency, ramp, durations, workload), with the measurements behind them:
see docs/scenarios/slo-goodput.md.

Definitions (measurement window, good request, goodput, attainment) are stated in
``analysis.goodput``; the checks below are evaluated in ``analysis.reports.slo_goodput``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Annotated, Any, ClassVar, Literal

from pydantic import AfterValidator, Field, model_validator

from scenarios.arrivals import ClosedLoop, OpenLoop
from scenarios.base import Scenario
from scenarios.checks import CheckSpec
from scenarios.common import (
    MAX_BURSTINESS,
    MAX_CONCURRENCY,
    MAX_RATE_RPS,
    MAX_REQUESTS,
    MAX_TOKENS,
    MIN_BURSTINESS,
    HttpUrlText,
    RunParams,
    SizeText,
)
from scenarios.late import Measured
from scenarios.plan import CaseSpec, PhaseSpec, Plan
from scenarios.values import (
    DurationText,
    RateFractionsText,
    SLOText,
    exact_label,
    parse_duration,
    parse_rate_fractions,
    parse_rates,
    parse_slo,
)
from scenarios.workloads import UniquePrompts
from server.capacity import KVCapacity
from server.frozen import FrozenModel
from server.sizes import format_size, parse_size

UNLOADED = "unloaded"
SATURATION = "saturation"
#: A duration-bounded closed loop still needs an upper bound on its request count; this many
#: requests per second is beyond any single server this testbed drives (the duration ends it).
SATURATION_MAX_RPS = 1000
DEFAULT_FRACTIONS = "0.25,0.5,0.75,0.9,1.0,1.5,2.0"
#: Ceiling of ``--slo-factor``: at 1000 × the unloaded latency every request that completes
#: at all is good, so the SLO no longer tells rates apart.
MAX_SLO_FACTOR = 1000.0


def given_rates(text: str) -> list[float] | None:
    """``--rates``: ``"auto"`` → ``None``; ``"6,2,4.5"`` → [2.0, 4.5, 6.0] (req/s, increasing;
    ``scenarios.values.parse_rates``)."""
    if text.strip().lower() == "auto":
        return None
    return sorted(parse_rates(text))


def _rates_text(value: str) -> str:
    given_rates(value)
    return value


class SLOGoodputParams(RunParams):
    """Knobs of slo-goodput (each becomes a ``--flag``)."""

    cache: SizeText = Field(default="1GiB", description="KV cache size (1GiB = 2^30 bytes).")
    url: HttpUrlText | None = Field(
        default=None, description="Attach to this running server (no server is started)."
    )
    slo: SLOText | None = Field(
        default=None,
        description="SLOs a good request meets (≤), e.g. ttft=200ms,tpot=50ms[,e2el=5s]; "
        "default: --slo-factor × the unloaded TTFT and TPOT p50.",
    )
    slo_factor: float = Field(
        default=3.0,
        gt=1,
        le=MAX_SLO_FACTOR,
        description="Default SLOs: this × the unloaded TTFT/TPOT p50.",
    )
    rates: Annotated[str, AfterValidator(_rates_text)] = Field(
        default="auto",
        description="Offered rates in req/s (e.g. 2,4,6), or auto: --rate-fractions × the "
        "measured saturation throughput.",
    )
    rate_fractions: RateFractionsText = Field(
        default=DEFAULT_FRACTIONS, description="With --rates auto: fractions of saturation."
    )
    arrival_pattern: Literal["gamma", "constant"] = Field(
        default="gamma", description="gamma (Poisson at --burstiness 1) or constant gaps."
    )
    burstiness: float = Field(
        default=1.0,
        ge=MIN_BURSTINESS,
        le=MAX_BURSTINESS,
        description="Gamma shape of the gaps: 1 = Poisson, < 1 burstier.",
    )
    duration: DurationText = Field(
        default="40s", description="Sending time of each rate (e.g. 40s)."
    )
    warmup: DurationText = Field(
        default="5s", description="Start of each rate (and of saturation) left out of stats."
    )
    attainment: float = Field(
        default=0.9, gt=0, le=1, description="SLO attainment a sustainable rate reaches."
    )
    target_rps: float | None = Field(
        default=None,
        gt=0,
        le=MAX_RATE_RPS,
        description="Planned load (req/s): how many replicas it needs.",
    )
    max_concurrency: int | None = Field(
        default=None,
        gt=0,
        le=MAX_CONCURRENCY,
        description="Client cap on requests in flight (as vLLM bench).",
    )
    prompt_tokens: int = Field(
        default=128, gt=0, le=MAX_TOKENS, description="Prompt length (tokens), unique."
    )
    output_tokens: int = Field(
        default=32, gt=0, le=MAX_TOKENS, description="Output length (tokens), exact."
    )
    length_spread: float = Field(
        default=0.0, ge=0, lt=1, description="Draw lengths in L·(1 ± spread); 0 = fixed."
    )
    max_num_seqs: int = Field(
        default=16,
        gt=0,
        le=MAX_CONCURRENCY,
        description="Server batch limit (attached: give the server's).",
    )
    saturation_concurrency: int | None = Field(
        default=None,
        gt=0,
        le=MAX_CONCURRENCY,
        description="Closed-loop concurrency of saturation; default: sized.",
    )
    saturation_duration: DurationText = Field(
        default="30s", description="Sending time of the saturation phase."
    )
    unloaded_requests: int = Field(
        default=12,
        gt=1,
        le=MAX_REQUESTS,
        description="Requests of the unloaded probe (one at a time).",
    )
    # The first request after a server start may take a cold path (first use of buffers and
    # caches); a second leaves out at least that one (here: the first two of 0.75 s each).
    unloaded_warmup: DurationText = Field(
        default="1s", description="Start of the unloaded probe left out of its statistics."
    )

    @model_validator(mode="after")
    def _consistent(self) -> SLOGoodputParams:
        spread = UniquePrompts(
            prompt_tokens=self.prompt_tokens,
            output_tokens=self.output_tokens,
            requests=1,
            length_spread=self.length_spread,
        )
        self.check_fits(
            spread.length_bounds(self.prompt_tokens)[1],
            spread.length_bounds(self.output_tokens)[1],
        )
        if self.warmup_s >= self.duration_s:
            raise ValueError("warmup must be shorter than duration")
        if self.warmup_s >= self.saturation_duration_s:
            raise ValueError("warmup must be shorter than saturation_duration")
        rates = given_rates(self.rates)
        if rates is not None and rates[-1] * self.duration_s > MAX_REQUESTS:
            raise ValueError(
                f"rate {rates[-1]:g} req/s over duration {self.duration_s:g} s is "
                f"{rates[-1] * self.duration_s:g} requests, more than {MAX_REQUESTS} in a phase"
            )
        return self

    @property
    def duration_s(self) -> float:
        return parse_duration(self.duration)

    @property
    def warmup_s(self) -> float:
        return parse_duration(self.warmup)

    @property
    def saturation_duration_s(self) -> float:
        return parse_duration(self.saturation_duration)

    def workload(self, requests: int | None) -> UniquePrompts:
        """The requests every phase sends (``None``: as many as a duration's arrivals)."""
        return UniquePrompts(
            prompt_tokens=self.prompt_tokens,
            output_tokens=self.output_tokens,
            requests=requests,
            length_spread=self.length_spread,
        )


# --- Checks (evaluated in analysis.reports.slo_goodput) ------------------------------------


class RatesOrdered(CheckSpec):
    """At every rate: goodput ≤ completed ≤ offered × (1 + ``tolerance``) + carried-in ÷
    window. Completions inside the window can exceed arrivals inside it by the requests that
    were in the server when the window opened (carried in from the warm-up) minus those still
    there when it closed; the first term allows sampling noise, the second the carried-in
    requests themselves (it matters only for short windows)."""

    kind: Literal["goodput_rates_ordered"] = "goodput_rates_ordered"
    tolerance: float = Field(default=0.05, ge=0)


class ClientKeptUp(CheckSpec):
    """At every rate the client sent what was offered: achieved send rate within
    ``max_rate_error`` of offered (sends late enough to leave the window, or to spill into it
    from the warm-up, move it either way), and send lateness p99 below
    ``max_lateness_p99_ms``; otherwise the client, not the server, limited the load (a rate
    not reached) or shaped it (late sends: burstier arrivals than scheduled)."""

    kind: Literal["goodput_client_kept_up"] = "goodput_client_kept_up"
    max_rate_error: float = Field(default=0.05, ge=0)
    max_lateness_p99_ms: float = Field(default=5.0, gt=0)


class LowestRateAttains(CheckSpec):
    """At the lowest rate the SLO attainment reaches ``target`` (else nothing is sustainable).

    A miss is blamed on the server only when the client sent that rate as scheduled (the
    premise of :class:`ClientKeptUp`, with its limits here): late sends arrive in bursts and
    the client stamps its tokens late, so a miss then is undecided, not failed."""

    kind: Literal["goodput_lowest_rate_attains"] = "goodput_lowest_rate_attains"
    target: float = Field(gt=0, le=1)
    max_rate_error: float = Field(default=0.05, ge=0)
    max_lateness_p99_ms: float = Field(default=5.0, gt=0)


class OverloadCollapse(CheckSpec):
    """At the highest rate goodput ≤ ``max_goodput_share`` of completed, while completed (pro
    rata to tokens, ``analysis.goodput``) stays ≥ ``min_completed_share`` of the measured
    saturation throughput: the server is busy at its maximum and almost none of its answers
    are useful.

    A miss is blamed on the server only when the client delivered the rate (achieved within
    ``max_rate_error`` of offered): a client that stalled for seconds leaves the server idle
    between bursts, and its completions then say nothing about overload (undecided)."""

    kind: Literal["goodput_overload_collapse"] = "goodput_overload_collapse"
    max_goodput_share: float = Field(default=0.25, ge=0, le=1)
    min_completed_share: float = Field(default=0.8, ge=0)
    max_rate_error: float = Field(default=0.05, ge=0)


class MaxRateBracketed(CheckSpec):
    """The maximum sustainable rate (attainment ≥ ``target``) lies between two measured rates:
    one that attains it and the next one, which does not."""

    kind: Literal["goodput_max_rate_bracketed"] = "goodput_max_rate_bracketed"
    target: float = Field(gt=0, le=1)


class LateFiguresAgree(CheckSpec):
    """Every figure the run resolved at run time (rates, derived SLOs) is re-derived from the
    raw records by the analysis, with its own metric definitions, within ``rel_tolerance``."""

    kind: Literal["late_figures_agree"] = "late_figures_agree"
    rel_tolerance: float = Field(default=1e-6, ge=0)


# --- Sizing ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class ConcurrencyChoice:
    """How the saturation concurrency was chosen (all counts in requests or blocks)."""

    blocks_per_request: int | None
    kv_limit: int
    batch_limit: int
    concurrency: int
    reason: str


def saturation_concurrency(
    capacity: KVCapacity, prompt_tokens: int, output_tokens: int, max_num_seqs: int
) -> ConcurrencyChoice:
    """The closed-loop concurrency that keeps the batch full (see the module docstring).

    KV limit = requests that fit at full length (prompt + output): (blocks − 1) //
    ceil(tokens / block size), one block being vLLM's reserved null block (tokens //
    (prompt + output) when the block size is unknown). Batch limit = min(max_num_seqs, KV
    limit). Concurrency = min(2 × batch limit, KV limit).
    """
    per_request = prompt_tokens + output_tokens
    if capacity.block_size and capacity.num_blocks:
        blocks = math.ceil(per_request / capacity.block_size)
        kv_limit = (capacity.num_blocks - 1) // blocks
    else:
        blocks = None
        kv_limit = capacity.tokens // per_request
    kv_limit = max(1, kv_limit)
    batch = min(max_num_seqs, kv_limit)
    concurrency = min(2 * batch, kv_limit)
    binding = "max_num_seqs" if max_num_seqs <= kv_limit else "the KV cache"
    reason = (
        f"batch limit {batch} (set by {binding}: max_num_seqs {max_num_seqs}, KV cache holds "
        f"{kv_limit} requests of {per_request} tokens); {concurrency} in flight keep it full: "
        "the requests beyond it wait in vLLM's queue and refill freed slots at the next step"
    )
    return ConcurrencyChoice(blocks, kv_limit, batch, concurrency, reason)


# --- The plan -------------------------------------------------------------------------------


class SweepSpec(FrozenModel):
    """What the report needs to know about a plan of this scenario (see :func:`sweep_spec`).

    ``slo`` maps ttft/tpot/e2el to a limit in ms, or to the name of the plan's derived figure
    that gives it.
    """

    case: str
    unloaded: str
    saturation: str
    sweep: tuple[str, ...]
    slo: dict[str, float | str]
    slo_factor: float
    attainment: float
    target_rps: float | None
    auto_rates: bool


def _rate_phase_name(value: float, auto: bool) -> str:
    """``rate-0.50x`` (a fraction of saturation) or ``rate-2rps``; two values never share a
    name (``scenarios.values.exact_label``)."""
    return f"rate-{exact_label(value, '.2f')}x" if auto else f"rate-{exact_label(value)}rps"


def sweep_values(p: SLOGoodputParams) -> tuple[list[float], bool]:
    """The sweep's values in increasing order, and whether they are fractions of the measured
    saturation (``--rates auto``) rather than rates in req/s."""
    rates = given_rates(p.rates)
    if rates is None:
        return parse_rate_fractions(p.rate_fractions), True
    return rates, False


def sweep_spec(plan: Plan) -> SweepSpec:
    """The spec of an slo-goodput plan, from its parameters and phases."""
    p = SLOGoodputParams.model_validate(plan.params)
    values, auto = sweep_values(p)
    if p.slo is not None:
        slo: dict[str, float | str] = dict(parse_slo(p.slo))
    else:
        slo = {k: f"slo_{k}_ms" for k in ("ttft", "tpot") if f"slo_{k}_ms" in plan.derived}
    return SweepSpec(
        case=plan.cases[0].name,
        unloaded=UNLOADED,
        saturation=SATURATION,
        sweep=tuple(_rate_phase_name(v, auto) for v in values),
        slo=slo,
        slo_factor=p.slo_factor,
        attainment=p.attainment,
        target_rps=p.target_rps,
        auto_rates=auto,
    )


class SLOGoodput(Scenario[SLOGoodputParams]):
    name: ClassVar[str] = "slo-goodput"
    summary: ClassVar[str] = (
        "Open-loop rate sweep up to twice the measured saturation: goodput under SLOs, the "
        "overload collapse, and the highest rate that meets the SLOs (replicas for a load)."
    )
    Params = SLOGoodputParams
    single_process_reason: ClassVar[str | None] = (
        "its sweep rates and default SLOs are measured at run time from the records of its "
        "earlier phases, which only the process that sends them holds; and its saturation "
        "closed loop staggers its senders' starts, which a split across workers would not keep"
    )

    def _case(self, p: SLOGoodputParams, phases: tuple[PhaseSpec, ...] = ()) -> CaseSpec:
        if p.url:
            return CaseSpec(name="attached", url=p.url, label="attached server", phases=phases)
        cache = parse_size(p.cache)
        return CaseSpec(
            name=format_size(cache),
            server=p.server(cache, max_num_seqs=p.max_num_seqs),
            label=f"cache {format_size(cache)}, max_num_seqs {p.max_num_seqs}",
            phases=phases,
        )

    def sizing_case(self, p: SLOGoodputParams) -> CaseSpec:
        return self._case(p)

    def _sweep(self, p: SLOGoodputParams) -> list[PhaseSpec]:
        values, auto = sweep_values(p)
        phases = []
        for i, value in enumerate(values):
            rate: float | Measured = (
                Measured(phase=SATURATION, statistic="closed_loop_rps", factor=value)
                if auto
                else value
            )
            phases.append(
                PhaseSpec(
                    name=_rate_phase_name(value, auto),
                    workload=p.workload(None),
                    arrival=OpenLoop(
                        rate_rps=rate,
                        burstiness=p.burstiness,
                        pattern=p.arrival_pattern,
                        seed=p.seed + 1 + i,
                        max_concurrency=p.max_concurrency,
                        duration_s=p.duration_s,
                    ),
                    settle_s=p.settle_s,
                    warmup_s=p.warmup_s,
                )
            )
        return phases

    def plan(self, p: SLOGoodputParams, capacity: KVCapacity) -> Plan:
        lengths = p.workload(1)
        prompt_max = lengths.length_bounds(p.prompt_tokens)[1]
        output_max = lengths.length_bounds(p.output_tokens)[1]
        choice = saturation_concurrency(capacity, prompt_max, output_max, p.max_num_seqs)
        concurrency = p.saturation_concurrency or choice.concurrency
        phases = (
            PhaseSpec(
                name=UNLOADED,
                workload=p.workload(p.unloaded_requests),
                arrival=ClosedLoop(concurrency=1),
                settle_s=p.settle_s,
                warmup_s=parse_duration(p.unloaded_warmup),
            ),
            PhaseSpec(
                name=SATURATION,
                workload=p.workload(math.ceil(p.saturation_duration_s * SATURATION_MAX_RPS)),
                arrival=ClosedLoop(
                    concurrency=concurrency,
                    duration_s=p.saturation_duration_s,
                    ramp_s=p.warmup_s,
                ),
                settle_s=p.settle_s,
                warmup_s=p.warmup_s,
            ),
            *self._sweep(p),
        )
        derived: dict[str, Measured] = {}
        if p.slo is None:
            derived["slo_ttft_ms"] = Measured(
                phase=UNLOADED, statistic="ttft_p50_ms", factor=p.slo_factor
            )
            if p.output_tokens >= 2:  # TPOT exists only for outputs of 2+ tokens
                derived["slo_tpot_ms"] = Measured(
                    phase=UNLOADED, statistic="tpot_p50_ms", factor=p.slo_factor
                )
        case = self._case(p)
        checks = (
            RatesOrdered(case=case.name),
            ClientKeptUp(case=case.name),
            LowestRateAttains(case=case.name, target=p.attainment),
            OverloadCollapse(case=case.name),
            MaxRateBracketed(case=case.name, target=p.attainment),
            LateFiguresAgree(case=case.name),
        )
        sizing: dict[str, Any] = {
            "capacity_tokens": capacity.tokens,
            "blocks_per_request": choice.blocks_per_request,
            "kv_limit_requests": choice.kv_limit,
            "max_num_seqs": p.max_num_seqs,
            "batch_limit": choice.batch_limit,
            "saturation_concurrency": concurrency,
            "saturation_concurrency_reason": (
                choice.reason if p.saturation_concurrency is None else "given"
            ),
            "rates": p.rates if given_rates(p.rates) else f"auto: {p.rate_fractions} × saturation",
            "slo": p.slo or f"{p.slo_factor:g} × unloaded TTFT and TPOT p50",
            "duration_s": p.duration_s,
            "warmup_s": p.warmup_s,
        }
        return Plan(
            scenario=self.name,
            description=self.summary,
            params=p.model_dump(),
            sizing=sizing,
            cases=(case,),
            phases=phases,
            checks=checks,
            derived=derived,
            **p.plan_fields(),
        )
