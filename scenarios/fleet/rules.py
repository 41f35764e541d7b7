"""Placement rules for the fleet replay (:data:`scenarios.fleet.simulate.Rule`): the
gateway's policies (its very :class:`gateway.routing.Router`), vllm-router's deterministic
ones ported exactly, seeded draws of its random ones, and the rules behind the bounds.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

from gateway.routing import DEFAULT_EPSILON, DEFAULT_VIRTUAL_NODES, Decision, ReplicaView, Router
from scenarios.fleet.requests import FleetRequest
from scenarios.fleet.simulate import FleetState, Rule
from scenarios.fleet.vllm_router_hash import ConsistentHashRing, ring_key


def gateway_rule(
    policy: str,
    replicas: int,
    *,
    epsilon: float = DEFAULT_EPSILON,
    virtual_nodes: int = DEFAULT_VIRTUAL_NODES,
) -> Rule:
    """The gateway's ``policy``: a :class:`gateway.routing.Router` fed each replica's
    requests in flight (every replica available) and the request's key, as the gateway
    feeds it, so its decisions are the gateway's request by request.

    Raises:
        ValueError: an unknown policy, fewer than 1 replica, ε < 0.
    """
    router = Router(policy, replicas, epsilon=epsilon, virtual_nodes=virtual_nodes)

    def rule(index: int, request: FleetRequest, state: FleetState) -> tuple[int, Decision | None]:
        decision = router.decide([ReplicaView(n) for n in state.in_flight], request.prefix_key)
        assert decision is not None  # every replica is available
        return decision.replica, decision

    return rule


def vllm_round_robin_rule() -> Rule:
    """vllm-router's ``round_robin`` with every worker healthy: request k (in arrival order)
    goes to worker k mod N (``RoundRobinPolicy``: an atomic counter modulo the healthy
    workers). The router numbers workers in the order their first health checks succeed, so
    which physical worker is 0 varies; the partition of the requests, hence every hit rate,
    does not."""
    counter = 0

    def rule(index: int, request: FleetRequest, state: FleetState) -> tuple[int, Decision | None]:
        nonlocal counter
        replica = counter % state.replicas
        counter += 1
        return replica, None

    return rule


def vllm_consistent_hash_rule(worker_urls: Sequence[str]) -> Rule:
    """vllm-router's ``consistent_hash`` over workers named ``worker_urls`` (its placement
    depends on the URLs and, through the request's headers, on its id:
    :mod:`scenarios.fleet.vllm_router_hash`).

    Raises:
        ValueError: no URL.
    """
    ring = ConsistentHashRing(worker_urls)

    def rule(index: int, request: FleetRequest, state: FleetState) -> tuple[int, Decision | None]:
        return ring.worker_of(ring_key(request.router_text, request.headers)), None

    return rule


def random_rule(seed: int) -> Rule:
    """vllm-router's ``random``: a uniform worker per request (one seeded draw of it)."""
    rng = random.Random(seed)

    def rule(index: int, request: FleetRequest, state: FleetState) -> tuple[int, Decision | None]:
        return rng.randrange(state.replicas), None

    return rule


def power_of_two_rule(seed: int) -> Rule:
    """vllm-router's ``power_of_two``: two distinct random workers, the one with fewer
    requests in flight (a tie: either, drawn) (one seeded draw of it)."""
    rng = random.Random(seed)

    def rule(index: int, request: FleetRequest, state: FleetState) -> tuple[int, Decision | None]:
        if state.replicas == 1:
            return 0, None
        a, b = rng.sample(range(state.replicas), 2)
        load_a, load_b = state.in_flight[a], state.in_flight[b]
        if load_a == load_b:
            return rng.choice((a, b)), None
        return (a if load_a < load_b else b), None

    return rule


def spread_rule() -> Rule:
    """The worst bound's placement: the requests of each prefix group (the gateway's
    routing key) go to the replicas in turn, starting at the group's own replica (groups
    numbered as they first appear, modulo N), so every replica sees every group and no two
    consecutive requests of a group share a replica. Keyless requests are each their own
    group."""
    seen: dict[object, tuple[int, int]] = {}

    def rule(index: int, request: FleetRequest, state: FleetState) -> tuple[int, Decision | None]:
        group: object = request.prefix_key if request.prefix_key is not None else ("i", index)
        first, count = seen.get(group, (len(seen) % state.replicas, 0))
        seen[group] = (first, count + 1)
        return (first + count) % state.replicas, None

    return rule
