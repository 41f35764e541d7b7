"""breaker: a replica dies behind the gateway; does the circuit breaker route around it?

Two identical vLLM replicas behind the gateway, open-loop (Poisson) load for the whole
episode. Partway through, replica 1 is stopped and restarted on the same port. Expected: the
breaker for it opens after a few failures, traffic moves to replica 0, half-open probes fail
while it is down, and the breaker closes once it is back; goodput dips little.

See docs/scenarios/breaker.md.
"""

from __future__ import annotations

import math
from typing import ClassVar, Literal

from pydantic import Field, model_validator

from scenarios.arrivals import OpenLoop
from scenarios.base import Scenario
from scenarios.checks import CheckSpec
from scenarios.common import (
    MAX_RATE_RPS,
    MAX_REQUESTS,
    MAX_RUN_S,
    MAX_TOKENS,
    MAX_WAIT_S,
    RunParams,
    SizeText,
)
from scenarios.plan import CaseSpec, GatewaySpec, KillReplica, PhaseSpec, Plan
from scenarios.workloads import UniquePrompts
from server.capacity import KVCapacity
from server.sizes import parse_size


class BreakerEpisode(CheckSpec):
    """The gateway's breaker for the killed replica goes closed → open after the kill, tries
    half-open probes, and closes again after the replica is back; meanwhile traffic moves to
    the healthy replica so at least ``min_success_ratio`` of the phase's requests succeed."""

    kind: Literal["breaker_episode"] = "breaker_episode"
    phase: str
    replica: int = Field(ge=1)
    min_success_ratio: float = Field(default=0.9, ge=0, le=1)


class BreakerParams(RunParams):
    """Knobs of the breaker episode (each becomes a ``--flag``)."""

    cache: SizeText = Field(default="1GiB", description="KV cache of each replica (1GiB = 2^30 B).")
    rate_rps: float = Field(
        default=2.0, gt=0, le=MAX_RATE_RPS, description="Open-loop arrival rate (req/s)."
    )
    # Long enough for the replica to stop (up to ~20 s under load), restart (25–55 s seen
    # here) and be probed back to closed while traffic still flows.
    duration_s: float = Field(
        default=120.0, gt=0, le=MAX_RUN_S, description="Length of the episode (s)."
    )
    kill_at_s: float = Field(
        default=10.0, gt=0, le=MAX_RUN_S, description="When replica 1 is stopped (s)."
    )
    restart: bool = Field(default=True, description="Restart replica 1 right after stopping it.")
    prompt_tokens: int = Field(
        default=128, gt=0, le=MAX_TOKENS, description="Prompt length (tokens)."
    )
    output_tokens: int = Field(
        default=16, gt=0, le=MAX_TOKENS, description="Output length (tokens)."
    )
    breaker_failures: int = Field(
        default=3, ge=1, le=MAX_REQUESTS, description="Consecutive failures to open."
    )
    breaker_cooldown_s: float = Field(
        default=3.0, gt=0, le=MAX_WAIT_S, description="Open → half-open (s)."
    )
    min_success_ratio: float = Field(
        default=0.9, ge=0, le=1, description="Share of requests that must succeed."
    )

    @model_validator(mode="after")
    def _consistent(self) -> BreakerParams:
        self.check_fits(self.prompt_tokens, self.output_tokens)
        if self.kill_at_s >= self.duration_s:
            raise ValueError("kill_at_s must fall inside the episode (below duration_s)")
        if self.rate_rps * self.duration_s > MAX_REQUESTS:
            raise ValueError(
                f"rate_rps × duration_s is {self.rate_rps * self.duration_s:g} requests, "
                f"more than {MAX_REQUESTS} in one episode"
            )
        return self


class Breaker(Scenario[BreakerParams]):
    name: ClassVar[str] = "breaker"
    summary: ClassVar[str] = (
        "Two replicas behind the gateway, one killed and restarted mid-run: the breaker "
        "opens, traffic moves, half-open probes, recovery; goodput through the episode."
    )
    Params = BreakerParams
    single_process_reason: ClassVar[str | None] = (
        "its replica kill is timed from the phase start of the one process that injects it, "
        "and its verdicts read the gateway's breaker episode against that client's requests "
        "in order; its open loop of a few requests per second gains nothing from splitting"
    )

    def sizing_case(self, p: BreakerParams) -> CaseSpec:
        gateway_args = (
            "--breaker-failures", str(p.breaker_failures),
            "--breaker-cooldown", str(p.breaker_cooldown_s),
            "--breaker-probes", "1",
            "--connect-timeout", "2",
        )  # fmt: skip
        return CaseSpec(
            name="episode",
            server=p.server(parse_size(p.cache)),
            replicas=2,
            gateway=GatewaySpec(extra_args=gateway_args),
            label="client → gateway → 2 replicas; replica 1 killed and restarted",
            phases=(
                PhaseSpec(
                    name="episode",
                    workload=UniquePrompts(
                        prompt_tokens=p.prompt_tokens,
                        requests=math.ceil(p.rate_rps * p.duration_s),
                        output_tokens=p.output_tokens,
                    ),
                    arrival=OpenLoop(rate_rps=p.rate_rps, seed=p.seed),
                    settle_s=p.settle_s,
                    faults=(KillReplica(replica=1, at_s=p.kill_at_s, restart=p.restart),),
                ),
            ),
        )

    def plan(self, p: BreakerParams, capacity: KVCapacity) -> Plan:
        case = self.sizing_case(p)
        return Plan(
            scenario=self.name,
            description=self.summary,
            params=p.model_dump(),
            sizing={
                "capacity_tokens": capacity.tokens,
                "requests": case.phases[0].workload.requests,
            },
            cases=(case,),
            phases=(),
            checks=(
                BreakerEpisode(
                    case=case.name,
                    phase="episode",
                    replica=1,
                    min_success_ratio=p.min_success_ratio,
                ),
            ),
            **p.plan_fields(),
        )
