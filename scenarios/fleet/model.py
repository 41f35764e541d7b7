"""The fleet model's answer: per routing policy, the predicted fleet hit rate and load
imbalance, beside the two bounds every policy lies between.

- **Pooled** (upper bound): one cache of N × C blocks serving every request: the fleet's
  memory as if no prefix group were ever held twice. No router does better in practice (LRU
  caches can in principle gain from a split on rare orders, never by much).
- **Spread** (worst): every prefix group spread over every replica in turn
  (:func:`scenarios.fleet.rules.spread_rule`): each replica must cache every group and sees
  only 1/N of its reuse, what a router blind to prefixes does at worst.
- **Exact** policies (the gateway's three; vllm-router's ``round_robin``,
  ``consistent_hash`` and ``kv_aware``): one replay of their rule.
- **Bracketed** policies (vllm-router's ``random``, ``power_of_two``, ``cache_aware``):
  the rule depends on draws or on state the model cannot know, so a low and a high replay
  (:data:`BRACKETS` says which and why).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from gateway.routing import DEFAULT_EPSILON, DEFAULT_VIRTUAL_NODES
from scenarios.fleet import rules
from scenarios.fleet.cache_aware import cache_aware_rule
from scenarios.fleet.kv_aware import KvAwareRule
from scenarios.fleet.requests import FleetRequest
from scenarios.fleet.simulate import FleetOutcome, Rule, simulate, split_first_tokens
from scenarios.prefix_cache_model import predict_hits
from scenarios.values import list_items

GATEWAY_POLICIES = ("round-robin", "least-loaded", "prefix-hash")
VLLM_ROUTER_POLICIES = (
    "round_robin",
    "consistent_hash",
    "cache_aware",
    "power_of_two",
    "random",
    "kv_aware",
)
#: Every policy the model predicts, as ``--routing`` names them.
FLEET_POLICIES = GATEWAY_POLICIES + tuple(f"vllm-router:{p}" for p in VLLM_ROUTER_POLICIES)
#: Exact policies whose prediction does not say which physical replica served a request:
#: vllm-router numbers its workers in an order of its own (``round_robin`` starts at its first
#: worker, ``kv_aware`` breaks ties to it), and ``kv_aware``'s near ties follow the router's
#: clock, which the records only approximate; their hit rates and loads do not depend on it.
UNNAMED_REPLICAS = ("vllm-router:round_robin", "vllm-router:kv_aware")
#: Seeded draws of vllm-router's random policies. The router's own run is one more draw of
#: the same rule; if its choices are uniform and independent, as the model's are, it falls
#: outside the range of n others (below their lowest or above their highest) with
#: probability 2 / (n + 1) (its rank among n + 1 exchangeable draws is uniform): 1 % here.
DRAWS = 199
#: The chance that the router's run falls inside the range of :data:`DRAWS` draws.
DRAW_COVERAGE = (DRAWS - 1) / (DRAWS + 1)

_DRAWN = (
    f"lowest and highest of {DRAWS} seeded draws (the router draws unseeded; one more draw "
    f"falls inside their range with probability {DRAW_COVERAGE:.0%})"
)

#: Why each bracketed policy's low and high replays bound it.
BRACKETS = {
    "vllm-router:random": f"its uniform choice: {_DRAWN}",
    "vllm-router:power_of_two": f"its two random candidates: {_DRAWN}",
    "vllm-router:cache_aware": "its prefix-tree rule replayed with ties to the lower and to the "
    "higher index (which worker the router lists first is not known)",
}


def parse_fleet_policies(text: str) -> list[str]:
    """``--routing``'s comma-separated policies, in order, without repeats.

    Raises:
        ValueError: an empty list, an empty item between commas (``"a,,b"``), an unknown or
            a repeated policy (the message lists the known ones).
    """
    names = list_items(text, "routing policy")
    if not names:
        raise ValueError("no routing policy given")
    for name in names:
        if name not in FLEET_POLICIES:
            raise ValueError(
                f"unknown routing policy {name!r}: choose from {', '.join(FLEET_POLICIES)}"
            )
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        raise ValueError(f"routing policy given twice: {', '.join(repeated)}")
    return names


def default_worker_urls(replicas: int) -> list[str]:
    """The worker URLs ``consistent_hash`` is predicted with unless told the real ones:
    ``http://127.0.0.1:8000`` upwards (its placement depends on them)."""
    return [f"http://127.0.0.1:{8000 + i}" for i in range(replicas)]


def imbalance(values: Sequence[int]) -> float:
    """max ÷ mean of ``values`` (1.0 when all are 0): 1 is perfectly even, N is all on one."""
    mean = sum(values) / len(values)
    return max(values) / mean if mean else 1.0


@dataclass(frozen=True)
class PolicyPrediction:
    """One policy's prediction.

    Attributes:
        policy: its ``--routing`` name.
        exact: one replay of its exact rule (``low`` is ``high``), else a bracket.
        low, high: the replays with the lowest and the highest fleet hit rate.
        basis: how the prediction was made (for a bracket, why it bounds the policy).
    """

    policy: str
    exact: bool
    low: FleetOutcome
    high: FleetOutcome
    basis: str

    @property
    def hit_rate(self) -> float | None:
        """The predicted fleet hit rate (exact policies; ``None`` for a bracket)."""
        return self.low.hit_rate if self.exact else None

    @property
    def names_replicas(self) -> bool:
        """Whether the prediction says which replica served each request: exact, and not
        one of :data:`UNNAMED_REPLICAS`."""
        return self.exact and self.policy not in UNNAMED_REPLICAS


@dataclass(frozen=True)
class FleetPrediction:
    """The fleet model's answer for N replicas of C usable blocks each.

    Attributes:
        replicas: N.
        capacity_blocks: C (``None``: unbounded).
        block_tokens: B.
        pooled: the upper bound's hit rate (one cache of N × C).
        spread: the worst bound's replay.
        single: one replica of C serving every request (the single-server model).
        policies: the asked policies, in the order asked.
    """

    replicas: int
    capacity_blocks: int | None
    block_tokens: int
    pooled: float
    spread: FleetOutcome
    single: float
    policies: tuple[PolicyPrediction, ...]


@dataclass(frozen=True)
class FleetOptions:
    """The knobs of the routers modelled: prefix-hash's ε and virtual nodes, and the
    worker URLs vllm-router's ring hashes (``None``: :func:`default_worker_urls`)."""

    epsilon: float = DEFAULT_EPSILON
    virtual_nodes: int = DEFAULT_VIRTUAL_NODES
    worker_urls: tuple[str, ...] | None = None


def _rule_factories(
    policy: str, replicas: int, options: FleetOptions, block_tokens: int
) -> tuple[list[Callable[[], Rule]], str]:
    """The rules to replay for ``policy`` and the basis of its prediction."""
    if policy in GATEWAY_POLICIES:
        return [
            lambda: rules.gateway_rule(
                policy, replicas, epsilon=options.epsilon, virtual_nodes=options.virtual_nodes
            )
        ], "the gateway's own routing function (gateway.routing), replayed"
    if policy == "vllm-router:round_robin":
        return [rules.vllm_round_robin_rule], "vllm-router's RoundRobinPolicy, ported"
    if policy == "vllm-router:consistent_hash":
        urls = list(options.worker_urls or default_worker_urls(replicas))
        if len(urls) != replicas:
            raise ValueError(f"{len(urls)} worker URLs for {replicas} replicas")
        return [lambda: rules.vllm_consistent_hash_rule(urls)], (
            "vllm-router's ConsistentHashPolicy, ported bit for bit, ring over " + ", ".join(urls)
        )
    if policy == "vllm-router:kv_aware":
        return [lambda: KvAwareRule(block_tokens)], (
            "vllm-router's KvAwarePolicy, ported: cost (new prefill + pending prefill tokens) "
            "× (in flight + 1), its index learning a request's blocks at its first token"
        )
    basis = BRACKETS[policy]
    if policy == "vllm-router:random":
        return [functools.partial(rules.random_rule, s) for s in range(DRAWS)], basis
    if policy == "vllm-router:power_of_two":
        return [functools.partial(rules.power_of_two_rule, s) for s in range(DRAWS)], basis
    return [lambda: cache_aware_rule(False), lambda: cache_aware_rule(True)], basis


def predict_fleet(
    requests: Sequence[FleetRequest],
    replicas: int,
    capacity_blocks: int | None,
    block_tokens: int,
    policies: Sequence[str],
    events: Sequence[tuple[str, int]] | None = None,
    options: FleetOptions | None = None,
) -> FleetPrediction:
    """Predict each of ``policies`` for ``requests`` on ``replicas`` replicas of
    ``capacity_blocks`` usable blocks of ``block_tokens`` tokens, in ``events`` order
    (``None``: one after another; see :func:`scenarios.fleet.requests.closed_loop_events`;
    first-token events, ``("first", i)``, inform ``kv_aware`` and are ignored otherwise).

    Raises:
        ValueError: an unknown policy, fewer than 1 replica, worker URLs not one per
            replica, a misplaced first-token event, or what
            :func:`scenarios.prefix_cache_model.predict_hits` refuses.
    """
    options = options or FleetOptions()
    for policy in policies:
        parse_fleet_policies(policy)
    caches = [r.cache for r in requests]
    core, _ = split_first_tokens(events, len(requests))
    pooled_capacity = None if capacity_blocks is None else replicas * capacity_blocks
    predictions = []
    for policy in policies:
        factories, basis = _rule_factories(policy, replicas, options, block_tokens)
        outcomes = [
            simulate(requests, replicas, capacity_blocks, block_tokens, make(), events)
            for make in factories
        ]
        ranked = sorted(outcomes, key=lambda o: o.hit_rate)
        exact = len(outcomes) == 1
        predictions.append(PolicyPrediction(policy, exact, ranked[0], ranked[-1], basis))
    spread = rules.spread_rule()
    return FleetPrediction(
        replicas=replicas,
        capacity_blocks=capacity_blocks,
        block_tokens=block_tokens,
        pooled=predict_hits(caches, pooled_capacity, block_tokens, core).hit_rate,
        spread=simulate(requests, replicas, capacity_blocks, block_tokens, spread, events),
        single=predict_hits(caches, capacity_blocks, block_tokens, core).hit_rate,
        policies=tuple(predictions),
    )
