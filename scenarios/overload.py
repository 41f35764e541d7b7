"""overload: does admission control keep goodput when traffic exceeds capacity, and which
limit should you set?

One case per admission arm (``scenarios.overload_arms``: ``none``, ``vllm-tokens:L``,
``vllm-reqs:L``, ``gateway:L``), each on its own server start, except that a gateway arm
fronts the first arm's server as it runs (``none`` by default; so they share one start).
The first case, ``none``, also measures what the rules of thumb need, before its own load:

1. ``unloaded`` — one request at a time: the unloaded TTFT, TPOT and E2EL; without ``--slo``
   the SLOs are ``--slo-factor`` × their p50 (``Plan.derived``, as slo-goodput);
2. ``prefill`` — a burst of ``2 × max_num_seqs`` prompts at once, one output token each: the
   server's prefill throughput (prompt tokens/s), for vLLM's token-limit rule;
3. ``saturation`` — slo-goodput's closed loop that keeps the batch full: the rate the server
   completes, the 1× of the overloads (left out when ``--sustainable-rate`` is given).

Then every arm runs the same open-loop phases ``load-<F>x`` at ``--overload`` F × that rate,
each ``--duration`` long (the first ``--warmup`` seconds sent but not counted). Every arm
sends exactly the same prompts (same phase names, same seed; prefix caching off, so no arm
profits from another's cache), and each limited arm's limit is resolved from the ``none``
case's measurements just before its server starts (``CaseSpec.late_flags``).

Every latency is counted from the request's *scheduled* time, not from its dispatch: a
request the client itself sent late is late, not fast. Figures, the recommended limit and
verdicts: ``analysis.reports.overload``; docs/scenarios/overload.md.
"""

from __future__ import annotations

import math
from typing import Annotated, Any, ClassVar, Literal

from pydantic import AfterValidator, Field, model_validator

from scenarios.arrivals import AllAtOnce, ClosedLoop, OpenLoop
from scenarios.base import Scenario
from scenarios.checks import CheckSpec
from scenarios.common import (
    MAX_CONCURRENCY,
    MAX_RATE_RPS,
    MAX_REQUESTS,
    MAX_TOKENS,
    HttpUrlText,
    RunParams,
    SizeText,
)
from scenarios.late import Measured
from scenarios.overload_arms import (
    ARM_FLAGS,
    DEFAULT_ARMS,
    Arm,
    Sizing,
    parse_arms,
    rule_of_thumb,
    whole_limit,
)
from scenarios.plan import CaseSpec, GatewaySpec, LateFlag, PhaseSpec, Plan
from scenarios.slo_goodput import SATURATION, SATURATION_MAX_RPS, UNLOADED, saturation_concurrency
from scenarios.values import (
    DurationText,
    RateFractionsText,
    SLOText,
    exact_label,
    parse_duration,
    parse_rate_fractions,
    parse_slo,
)
from scenarios.workloads import UniquePrompts
from server.capacity import KVCapacity
from server.sizes import format_size, parse_size

PREFILL = "prefill"
NONE_ARM = "none"


def _arms_text(value: str) -> str:
    parse_arms(value)
    return value


class OverloadParams(RunParams):
    """Knobs of overload (each becomes a ``--flag``)."""

    cache: SizeText = Field(default="1GiB", description="KV cache size (1GiB = 2^30 bytes).")
    url: HttpUrlText | None = Field(
        default=None,
        description="Attach to this running server (its admission is yours to set; name it "
        "with --admission, e.g. none or vllm-tokens:4096).",
    )
    admission: Annotated[str, AfterValidator(_arms_text)] = Field(
        default=DEFAULT_ARMS,
        description="Arms, none first: none, vllm-tokens:L, vllm-reqs:L, gateway:L; L a whole "
        "number or xF = F × the rule of thumb.",
    )
    overload: RateFractionsText = Field(
        default="1,1.5,2,3", description="Offered loads, multiples of the sustainable rate."
    )
    sustainable_rate: float | None = Field(
        default=None,
        gt=0,
        le=MAX_RATE_RPS,
        description="The 1× rate (req/s); default: the saturation phase's measured rate.",
    )
    slo: SLOText | None = Field(
        default=None,
        description="SLOs a good request meets (≤), e.g. ttft=200ms,tpot=50ms; default: "
        "--slo-factor × the unloaded TTFT and TPOT p50.",
    )
    slo_factor: float = Field(default=3.0, gt=1, le=1000, description="Default SLOs' factor.")
    attainment: float = Field(
        default=0.9, gt=0, le=1, description="SLO attainment the admitted requests keep."
    )
    duration: DurationText = Field(default="10s", description="Sending time of each load.")
    warmup: DurationText = Field(default="2s", description="Start of each load not counted.")
    prompt_tokens: int = Field(
        default=128, gt=0, le=MAX_TOKENS, description="Prompt length (tokens), unique."
    )
    output_tokens: int = Field(
        default=32, gt=1, le=MAX_TOKENS, description="Output length (tokens), exact."
    )
    max_num_seqs: int = Field(
        default=16, gt=0, le=MAX_CONCURRENCY, description="Server batch limit."
    )
    saturation_duration: DurationText = Field(
        default="10s", description="Sending time of the saturation phase."
    )
    unloaded_requests: int = Field(
        default=10, gt=1, le=MAX_REQUESTS, description="Requests of the unloaded probe."
    )

    @model_validator(mode="after")
    def _consistent(self) -> OverloadParams:
        self.check_fits(self.prompt_tokens, self.output_tokens)
        if self.warmup_s >= self.duration_s:
            raise ValueError("warmup must be shorter than duration")
        if self.warmup_s >= parse_duration(self.saturation_duration):
            raise ValueError("warmup must be shorter than saturation_duration")
        arms = self.arms
        relative = any(a.multiple is not None for a in arms)
        if self.url is None and relative and arms[0].kind != "none":
            raise ValueError(
                "the first admission arm must be none when a limit is xF: it measures the "
                "rules of thumb without a limit in the way"
            )
        if self.url is not None:
            servers = [a for a in arms if a.kind != "gateway"]
            if arms[0].kind == "gateway" or len(servers) != 1 or servers[0].multiple is not None:
                raise ValueError(
                    "with --url one server is measured: name its admission once, first (none, "
                    "or vllm-tokens:L / vllm-reqs:L with the limit it runs with), gateway arms "
                    "besides"
                )
        if self.sustainable_rate is not None:
            top = max(self.loads) * self.sustainable_rate * self.duration_s
            if top > MAX_REQUESTS:
                raise ValueError(f"the highest load sends {top:g} requests, over {MAX_REQUESTS}")
        return self

    @property
    def duration_s(self) -> float:
        return parse_duration(self.duration)

    @property
    def warmup_s(self) -> float:
        return parse_duration(self.warmup)

    @property
    def arms(self) -> list[Arm]:
        return parse_arms(self.admission)

    @property
    def loads(self) -> list[float]:
        return parse_rate_fractions(self.overload)

    def workload(self, requests: int | None, output_tokens: int | None = None) -> UniquePrompts:
        """The requests a phase sends (``None``: as many as a duration's arrivals)."""
        return UniquePrompts(
            prompt_tokens=self.prompt_tokens,
            output_tokens=output_tokens or self.output_tokens,
            requests=requests,
        )


class OverloadAccounted(CheckSpec):
    """Every planned request of every load ended once: a completion, a rejection (an HTTP
    answer that refused it: 429 or 503) or a failure with its reason; none lost (not sent,
    no record) and none counted twice (one record per planned request id)."""

    kind: Literal["overload_accounted"] = "overload_accounted"


class AdmissionKeepsGoodput(CheckSpec):
    """With the recommended arm (the limited arm with the highest goodput at ``load`` among
    those whose admitted requests reach ``attainment``, else among all), the
    admitted requests keep SLO attainment ≥ ``attainment`` and goodput stays ≥
    ``goodput_share`` of the peak goodput (the highest of any arm at any load)."""

    kind: Literal["overload_admission_keeps_goodput"] = "overload_admission_keeps_goodput"
    load: float = 2.0
    attainment: float = Field(default=0.9, gt=0, le=1)
    goodput_share: float = Field(default=0.8, gt=0, le=1)


class RejectionsFast(CheckSpec):
    """The recommended arm's rejections (at every load, ``AdmissionKeepsGoodput``'s choice)
    take p99 < ``max_p99_ms`` from the scheduled time to the answer: a rejection is useful
    only when it is quick. The other arms' are reported, not judged."""

    kind: Literal["overload_rejections_fast"] = "overload_rejections_fast"
    max_p99_ms: float = Field(default=50.0, gt=0)


class NoAdmissionCollapses(CheckSpec):
    """Without admission (arm ``none``), goodput at ``load`` is below ``max_share`` of the
    peak goodput: the collapse admission control exists to prevent."""

    kind: Literal["overload_no_admission_collapses"] = "overload_no_admission_collapses"
    load: float = 2.0
    max_share: float = Field(default=0.5, gt=0, le=1)


def load_phase_name(load: float) -> str:
    """``load-2.00x``; two loads never share a name (``scenarios.values.exact_label``)."""
    return f"load-{exact_label(load, '.2f')}x"


class Overload(Scenario[OverloadParams]):
    name: ClassVar[str] = "overload"
    summary: ClassVar[str] = (
        "Open loop at 1-3× the sustainable rate under each admission arm (none, vLLM's "
        "queue limits, the gateway's): goodput, rejections, and the limit to set."
    )
    Params = OverloadParams
    single_process_reason: ClassVar[str | None] = (
        "its rates, SLOs and admission limits are measured at run time from the records of "
        "its first case, which only the process that sends them holds"
    )

    def _server_case(self, p: OverloadParams, arm: Arm, phases: tuple[PhaseSpec, ...],
                     late: tuple[LateFlag, ...]) -> CaseSpec:  # fmt: skip
        gateway = None
        args: tuple[str, ...] = ()
        if arm.kind == "gateway":
            fixed = () if arm.limit is None else ("--max-in-flight", str(arm.limit))
            gateway = GatewaySpec(extra_args=("--max-queue", "0", *fixed))
            front = p.arms[0]  # a gateway fronts the first arm's server, as it runs
            if front.kind in ("vllm-tokens", "vllm-reqs") and front.limit is not None:
                args = (ARM_FLAGS[front.kind][1], str(front.limit))
        elif arm.kind != "none" and arm.limit is not None:
            args = (ARM_FLAGS[arm.kind][1], str(arm.limit))
        label = f"admission {arm.text}"
        if p.url:
            return CaseSpec(name=arm.name, url=p.url, label=f"attached server, {label}",
                            phases=phases, gateway=gateway, late_flags=late)  # fmt: skip
        cache = parse_size(p.cache)
        server = p.server(cache, max_num_seqs=p.max_num_seqs, enable_prefix_caching=False,
                          extra_args=args)  # fmt: skip
        return CaseSpec(
            name=arm.name, server=server, gateway=gateway, late_flags=late, phases=phases,
            label=f"cache {format_size(cache)}, max_num_seqs {p.max_num_seqs}, {label}",
        )  # fmt: skip

    def sizing_case(self, p: OverloadParams) -> CaseSpec:
        return self._server_case(p, p.arms[0], (), ())

    def _probe(self, p: OverloadParams, capacity: KVCapacity) -> tuple[PhaseSpec, ...]:
        phases = [
            PhaseSpec(name=UNLOADED, workload=p.workload(p.unloaded_requests),
                      arrival=ClosedLoop(concurrency=1), settle_s=p.settle_s, warmup_s=1.0),
            PhaseSpec(name=PREFILL, workload=p.workload(2 * p.max_num_seqs, output_tokens=1),
                      arrival=AllAtOnce(), settle_s=p.settle_s),
        ]  # fmt: skip
        if p.sustainable_rate is None:
            sat_s = parse_duration(p.saturation_duration)
            choice = saturation_concurrency(
                capacity, p.prompt_tokens, p.output_tokens, p.max_num_seqs
            )
            phases.append(
                PhaseSpec(
                    name=SATURATION,
                    workload=p.workload(math.ceil(sat_s * SATURATION_MAX_RPS)),
                    arrival=ClosedLoop(
                        concurrency=choice.concurrency, duration_s=sat_s, ramp_s=p.warmup_s
                    ),
                    settle_s=p.settle_s,
                    warmup_s=p.warmup_s,
                )
            )
        return tuple(phases)

    def load_phases(self, p: OverloadParams) -> tuple[PhaseSpec, ...]:
        phases = []
        for i, load in enumerate(p.loads):
            rate: float | Measured = (
                Measured(phase=SATURATION, statistic="closed_loop_rps", factor=load)
                if p.sustainable_rate is None
                else load * p.sustainable_rate
            )
            phases.append(
                PhaseSpec(
                    name=load_phase_name(load),
                    workload=p.workload(None),
                    arrival=OpenLoop(rate_rps=rate, seed=p.seed + 1 + i, duration_s=p.duration_s),
                    settle_s=p.settle_s,
                    warmup_s=p.warmup_s,
                )
            )
        return tuple(phases)

    def sizing(self, p: OverloadParams) -> Sizing:
        """Where the rules of thumb take their inputs from (``scenarios.overload_arms``)."""
        slo = parse_slo(p.slo) if p.slo else {}
        e2el = None
        if "ttft" in slo and "tpot" in slo:
            e2el = slo["ttft"] + (p.output_tokens - 1) * slo["tpot"]
        e2el = slo.get("e2el", e2el)
        return Sizing(slo.get("ttft"), e2el, p.slo_factor, p.sustainable_rate,
                      UNLOADED, PREFILL, SATURATION)  # fmt: skip

    def _late(self, p: OverloadParams, arm: Arm) -> tuple[LateFlag, ...]:
        if arm.multiple is None:
            return ()
        target, flag = ARM_FLAGS[arm.kind]
        figure = rule_of_thumb(arm.kind, self.sizing(p), arm.multiple)
        if not isinstance(figure, Measured):  # every input given: a number now
            return ()
        return (LateFlag(target=target, flag=flag, figure=figure),)

    def plan(self, p: OverloadParams, capacity: KVCapacity) -> Plan:
        loads = self.load_phases(p)
        cases = []
        for k, arm in enumerate(p.arms):
            if arm.multiple is not None and not self._late(p, arm):
                figure = rule_of_thumb(arm.kind, self.sizing(p), arm.multiple)
                assert not isinstance(figure, Measured)
                arm = Arm(arm.kind, limit=whole_limit(figure))
            # The first case runs the plan's shared phases (probe, then loads): it is the
            # sizing case as ``sizing_case`` gives it; the others run the loads alone.
            phases = () if k == 0 else loads
            cases.append(self._server_case(p, arm, phases, self._late(p, arm)))
        derived: dict[str, Measured] = {}
        if p.slo is None:
            derived["slo_ttft_ms"] = Measured(
                phase=UNLOADED, statistic="ttft_p50_ms", factor=p.slo_factor
            )
            derived["slo_tpot_ms"] = Measured(
                phase=UNLOADED, statistic="tpot_p50_ms", factor=p.slo_factor
            )
        name = cases[0].name
        checks = (
            OverloadAccounted(case=name),
            AdmissionKeepsGoodput(case=name, attainment=p.attainment),
            RejectionsFast(case=name),
            NoAdmissionCollapses(case=name),
        )
        sizing: dict[str, Any] = {
            "capacity_tokens": capacity.tokens,
            "max_num_seqs": p.max_num_seqs,
            "arms": [a.text for a in p.arms],
            "loads": p.loads,
            "sustainable_rate": p.sustainable_rate or "measured: saturation closed_loop_rps",
            "slo": p.slo or f"{p.slo_factor:g} × unloaded TTFT and TPOT p50",
            "duration_s": p.duration_s,
            "warmup_s": p.warmup_s,
        }
        return Plan(
            scenario=self.name, description=self.summary, params=p.model_dump(), sizing=sizing,
            cases=tuple(cases), phases=(*self._probe(p, capacity), *loads), checks=checks,
            derived=derived, **p.plan_fields(),
        )  # fmt: skip
