"""A fleet run's cases: the same requests through each routing policy in turn.

``--replicas N --routing P1,P2,…`` (trace-replay and bench) turns a run's case into one case
per policy, each with N replicas of the same server behind the policy's router, in the order
given: the project's gateway with ``round-robin``, ``least-loaded`` or ``prefix-hash``, or
vllm-router with one of its policies (``vllm-router:cache_aware``, …). The cases share one
start of the N replicas (``loadgen.replicas.SharedReplicas``), start with every prefix cache
emptied, and scrape every replica; docs/fleet.md says what is measured and predicted.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar, Literal

from pydantic import Field, field_validator, model_validator

from scenarios.checks import Check, CheckSpec
from scenarios.fleet.model import parse_fleet_policies
from scenarios.plan import CaseSpec, GatewaySpec, KillReplica, PhaseSpec, ProxySpec
from server.config import ServerConfig
from server.frozen import FrozenModel

#: The most replicas a fleet case starts (``CaseSpec.replicas``'s bound).
MAX_REPLICAS = 4
#: The policies a fleet run uses when ``--routing`` is not given.
DEFAULT_ROUTING = "round-robin,least-loaded,prefix-hash"
#: vllm-router policies the model predicts that a fleet run cannot use here, and why.
UNSUPPORTED_ROUTER_POLICIES: dict[str, str] = {}


@dataclass(frozen=True, slots=True)
class RoutingChoice:
    """One policy of ``--routing``: who routes (``gateway`` or ``vllm-router``) and how."""

    router: str
    policy: str

    @property
    def case_name(self) -> str:
        """The case of this policy: ``prefix-hash``, ``vllm-router-cache_aware``."""
        return self.policy if self.router == "gateway" else f"vllm-router-{self.policy}"


def parse_routing(text: str) -> tuple[RoutingChoice, ...]:
    """``round-robin,vllm-router:cache_aware`` → the policies of a fleet run, in order: the
    fleet model's list (:func:`scenarios.fleet.model.parse_fleet_policies`, so a run takes
    exactly the policies the model predicts) less those a run cannot use here.

    Raises:
        ValueError: an empty list, an unknown, repeated or unsupported policy.
    """
    out = []
    for name in parse_fleet_policies(text):
        router, _, policy = name.rpartition(":")
        if policy in UNSUPPORTED_ROUTER_POLICIES:
            raise ValueError(
                f"routing {name!r} cannot run here yet: {UNSUPPORTED_ROUTER_POLICIES[policy]}"
            )
        out.append(RoutingChoice(router or "gateway", policy))
    return tuple(out)


class FleetParams(FrozenModel):
    """The knobs of a fleet run (a mixin of trace-replay's and bench's parameters)."""

    replicas: int = Field(
        default=1,
        ge=1,
        le=MAX_REPLICAS,
        description="Replicas behind a router (2+: a fleet run, one case per --routing policy).",
    )
    routing: str | None = Field(
        default=None,
        description="Routing policies of a fleet run, in order: round-robin, least-loaded, "
        f"prefix-hash, vllm-router:<policy> (default {DEFAULT_ROUTING}).",
    )

    @field_validator("routing")
    @classmethod
    def _routing(cls, value: str | None) -> str | None:
        if value is not None:
            parse_routing(value)
        return value

    @model_validator(mode="after")
    def _routing_needs_a_fleet(self) -> FleetParams:
        if self.routing is not None and self.replicas < 2:
            raise ValueError("--routing needs --replicas 2 or more")
        if self.replicas > 1 and getattr(self, "url", None):
            raise ValueError("--replicas starts its own servers: it cannot attach to --url")
        return self

    @property
    def is_fleet(self) -> bool:
        """Whether this run is a fleet run (2+ replicas)."""
        return self.replicas > 1

    def routing_choices(self) -> tuple[RoutingChoice, ...]:
        """The policies of a fleet run (the default set when ``--routing`` was not given)."""
        return parse_routing(self.routing or DEFAULT_ROUTING)


def parse_kill(text: str) -> KillReplica:
    """``K@T`` → replica K stopped T seconds into the phase, not restarted in the case.

    Raises:
        ValueError: not ``K@T``, K not a whole number ≥ 1, T not a number > 0.
    """
    replica, at, seconds = text.partition("@")
    try:
        if not at:
            raise ValueError("no @")
        return KillReplica(replica=int(replica), at_s=float(seconds), restart=False)
    except ValueError:
        raise ValueError(
            f"--kill-replica {text!r}: expected K@T, replica K (1…N−1; replica 0 is the one "
            "sized and watched) stopped T > 0 seconds into the first phase"
        ) from None


#: The suffix of a fleet run's failover case (``--kill-replica``).
KILLED_SUFFIX = "-killed"


class FleetKillParams(FrozenModel):
    """A failover case at the end of a fleet run (a mixin of trace-replay's parameters)."""

    kill_replica: str | None = Field(
        default=None,
        description="K@T: end the fleet run with one more case, the last gateway policy of "
        "--routing again, its replica K (1…N−1) stopped T seconds into its first phase and "
        "not restarted (docs/fleet.md).",
    )

    @field_validator("kill_replica")
    @classmethod
    def _kill(cls, value: str | None) -> str | None:
        if value is not None:
            parse_kill(value)
        return value

    @model_validator(mode="after")
    def _kill_needs_the_replica(self) -> FleetKillParams:
        if self.kill_replica is None:
            return self
        kill = parse_kill(self.kill_replica)
        replicas = int(getattr(self, "replicas", 1))
        if replicas < 2:  # replica 0 is never killed: it is the one sized and watched
            raise ValueError(
                f"--kill-replica {self.kill_replica}: with --replicas {replicas} no replica can "
                "be killed (replica 0 never is; give --replicas 2 or more)"
            )
        if kill.replica >= replicas:
            killable = "replica 1" if replicas == 2 else f"a replica from 1 to {replicas - 1}"
            raise ValueError(
                f"--kill-replica {self.kill_replica}: there is no replica {kill.replica}; with "
                f"--replicas {replicas} only {killable} can be killed"
            )
        routing = getattr(self, "routing", None) or DEFAULT_ROUTING
        if all(c.router != "gateway" for c in parse_routing(routing)):
            raise ValueError(
                "--kill-replica needs a gateway policy in --routing: the gateway's breaker "
                "moves the killed replica's keys and its decisions say which"
            )
        return self

    def with_kill_case(
        self, cases: tuple[CaseSpec, ...], phases: tuple[PhaseSpec, ...]
    ) -> tuple[CaseSpec, ...]:
        """``cases`` and, with a kill, the failover case: a copy of the last gateway case
        named ``<name>-killed``, its phases ``phases`` with the kill in the first."""
        gateway = [c for c in cases if c.gateway is not None]
        if self.kill_replica is None or not gateway or not phases:
            return cases
        kill = parse_kill(self.kill_replica)
        first = phases[0].model_copy(update={"faults": (kill,)})
        base = gateway[-1]
        failover = base.model_copy(update={
            "name": base.name + KILLED_SUFFIX, "phases": (first, *phases[1:]),
            "label": f"{base.label}, replica {kill.replica} killed at {kill.at_s:g} s",
        })  # fmt: skip
        return (*cases, failover)


class FleetKvEventsMatch(CheckSpec):
    """Every replica of a fleet case recorded its KV-cache events without a loss, and the
    blocks each stored are the prefix-cache model's for the requests it served, block by
    block (``analysis.fleet_kv``)."""

    kind: Literal["fleet_kv_events_match"] = "fleet_kv_events_match"


class FleetKillAccounted(CheckSpec):
    """A fleet case whose phase ``phase`` killed a replica: every planned request ended once
    (a completion, a failure with its reason, or never sent: none lost, none counted twice),
    and behind the gateway's ``prefix-hash`` the killed replica's keys moved
    (``passed-on-breaker`` decisions in ``routing_decisions.jsonl``)."""

    kind: Literal["fleet_kill_accounted"] = "fleet_kill_accounted"
    phase: str


def fleet_checks(cases: tuple[CaseSpec, ...]) -> list[FleetKvEventsMatch | FleetKillAccounted]:
    """The fleet checks of ``cases``: for a case whose phases kill a replica, one
    :class:`FleetKillAccounted` per such phase; for any other that records KV-cache events,
    one :class:`FleetKvEventsMatch` (a killed replica's events end at its death)."""
    out: list[FleetKvEventsMatch | FleetKillAccounted] = []
    for case in cases:
        killed = [ph.name for ph in case.phases if ph.faults]
        if killed:
            out += [FleetKillAccounted(case=case.name, phase=name) for name in killed]
        elif case.record_kv_events:
            out.append(FleetKvEventsMatch(case=case.name))
    return out


def fleet_server(server: ServerConfig) -> ServerConfig:
    """``server`` as a fleet replica: with vLLM's development endpoints on
    (``VLLM_SERVER_DEV_MODE=1``), for ``/reset_prefix_cache`` between policies."""
    return server.model_copy(update={"env": {**server.env, "VLLM_SERVER_DEV_MODE": "1"}})


def fleet_cases(
    params: FleetParams, server: ServerConfig, prefix: str, label: str
) -> tuple[CaseSpec, ...]:
    """One case per routing policy of ``params``, each of ``params.replicas`` replicas of
    ``server`` behind its router; names ``<prefix>-<policy>`` (``prefix`` empty: the policy
    alone), labels ``<label>, N replicas, <policy>``."""
    cases = []
    for choice in params.routing_choices():
        name = f"{prefix}-{choice.case_name}" if prefix else choice.case_name
        relay: dict[str, GatewaySpec | ProxySpec]
        if choice.router == "gateway":
            relay = {"gateway": GatewaySpec(routing=choice.policy)}  # type: ignore[arg-type]
        else:
            relay = {"proxy": ProxySpec(kind="vllm-router", policy=choice.policy)}  # type: ignore[arg-type]
        cases.append(
            CaseSpec(
                name=name,
                server=fleet_server(server),
                label=f"{label}, {params.replicas} replicas, {choice.case_name}",
                replicas=params.replicas,
                scrape_replicas=True,
                reset_prefix_cache=True,
                record_kv_events=True,
                **relay,  # type: ignore[arg-type]
            )
        )
    return tuple(cases)


#: The policy compared with the baseline, and the baseline (the comparisons a fleet run
#: declares when both ran).
PREFIX_AWARE, BLIND = "prefix-hash", "round-robin"
#: What prefix-aware routing must add to the baseline's hit rate on the built-in workload.
MIN_HIT_RATE_GAIN = 0.2


class FleetHitRateGain(CheckSpec):
    """In ``phase``, ``case``'s measured fleet hit rate (Σ Δhits ÷ Σ Δqueries over its
    replicas) is at least ``baseline``'s + ``min_gain`` (absolute, 0–1)."""

    kind: Literal["fleet_hit_rate_gain"] = "fleet_hit_rate_gain"
    families: ClassVar[tuple[str, ...]] = ("prefix_cache_hits", "prefix_cache_queries")
    baseline: str
    phase: str
    min_gain: float = Field(default=MIN_HIT_RATE_GAIN, ge=0, le=1)


class FleetTtftLower(CheckSpec):
    """In ``phase``, ``case``'s TTFT p50 (successful requests, client-measured) is lower than
    ``baseline``'s."""

    kind: Literal["fleet_ttft_lower"] = "fleet_ttft_lower"
    baseline: str
    phase: str


def fleet_comparisons(params: FleetParams, prefix: str, phases: Sequence[str]) -> list[Check]:
    """prefix-hash against round-robin in every phase (:class:`FleetHitRateGain`,
    :class:`FleetTtftLower`) when both are among ``params``'s policies; none otherwise.
    ``prefix``: the cases' name prefix, as :func:`fleet_cases` was given it."""
    names = {c.policy for c in params.routing_choices() if c.router == "gateway"}
    if not params.is_fleet or not {PREFIX_AWARE, BLIND} <= names:
        return []
    case, baseline = (f"{prefix}-{n}" if prefix else n for n in (PREFIX_AWARE, BLIND))
    checks: list[Check] = []
    for phase in phases:
        checks.append(FleetHitRateGain(case=case, baseline=baseline, phase=phase))
        checks.append(FleetTtftLower(case=case, baseline=baseline, phase=phase))
    return checks
