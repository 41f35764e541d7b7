"""A fleet run's cases: the same requests through each routing policy in turn.

``--replicas N --routing P1,P2,…`` (trace-replay and bench) turns a run's case into one case
per policy, each with N replicas of the same server behind the policy's router, in the order
given: the project's gateway with ``round-robin``, ``least-loaded`` or ``prefix-hash``, or
vllm-router with one of its policies (``vllm-router:cache_aware``, …). The cases share one
start of the N replicas (``loadgen.replicas.SharedReplicas``), start with every prefix cache
emptied, and scrape every replica; docs/fleet.md says what is measured and predicted.
"""

from __future__ import annotations

from dataclasses import dataclass

from pydantic import Field, field_validator, model_validator

from scenarios.fleet.model import parse_fleet_policies
from scenarios.plan import CaseSpec, GatewaySpec, ProxySpec
from server.config import ServerConfig
from server.frozen import FrozenModel

#: The most replicas a fleet case starts (``CaseSpec.replicas``'s bound).
MAX_REPLICAS = 4
#: The policies a fleet run uses when ``--routing`` is not given.
DEFAULT_ROUTING = "round-robin,least-loaded,prefix-hash"
#: vllm-router policies the model predicts that a fleet run cannot use here, and why.
UNSUPPORTED_ROUTER_POLICIES = {
    "kv_aware": "the router needs each replica's KV-event endpoint, which a run does not wire",
}


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
                **relay,  # type: ignore[arg-type]
            )
        )
    return tuple(cases)
