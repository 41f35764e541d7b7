"""Placement decided inside the engine simulation: the gateway's load-aware policies fed the
requests in flight that the simulated replicas hold at each arrival, with each request's hits
from its replica's cache model for that very placement.

The fleet model (:func:`scenarios.fleet.model.predict_fleet`) places requests one after
another: each ends before the next starts, so every replica holds 0 in flight at each
decision. For round-robin and vllm-router's hashes that changes nothing (their rule reads no
load), but the gateway's ``least-loaded`` and ``prefix-hash`` read the in-flight counts:

- ``prefix-hash``'s bounded-load rule (:func:`gateway.routing.load_bound`) passes a key on
  once its replica holds more than ⌈(1 + ε) × (L + 1) ÷ N⌉ requests; one after another
  L = 0 and the bound is never reached, so a burst of one group's requests all land on the
  group's replica, where under load the gateway spreads them;
- ``least-loaded`` with nothing in flight sends request k to replica k mod N (its ties go in
  rotation), where under load it follows the replicas' queues.

So here the rule is asked at each request's arrival at its engine in the simulation
(:func:`analysis.fleet_engine.replay` with a :class:`LivePlacement`), with the requests each
replica holds at that moment in the simulation at speedup X (placed, not yet ended); its
hits come from that replica's cache model (:class:`scenarios.prefix_cache_model.replay.Replayer`,
the single-server model the fleet model runs per replica), which sees the replica's requests
start and end in the simulation's order. Placement and hits thus change with X, as they do
in a real replay sped up.

The rule is the fleet model's copy of the gateway's (:func:`scenarios.fleet.rules.gateway_rule`,
the gateway's own :class:`gateway.routing.Router`), so a decision is the gateway's given the
same counts. What differs from the gateway: it decides when a request reaches the engine,
a (the fitted time outside the engine, ms) after the gateway does, and the gateway counts a
request in flight from its decision while the simulation counts it from its arrival.
"""

from __future__ import annotations

from collections.abc import Sequence

from gateway.routing import Decision
from scenarios.fleet.model import FleetOptions
from scenarios.fleet.requests import FleetRequest
from scenarios.fleet.rules import gateway_rule
from scenarios.fleet.simulate import FleetOutcome, FleetState
from scenarios.prefix_cache_model.replay import Replayer

#: The gateway policies whose decisions read the requests in flight.
LIVE_POLICIES = ("least-loaded", "prefix-hash")


class LivePlacement:
    """The gateway's ``policy`` placing ``requests`` on ``replicas`` replicas of ``sizing`` =
    (usable blocks, block tokens) as the engine simulation runs (module docstring).

    The simulation calls :meth:`reset` before each replay, :meth:`place` at each request's
    arrival at its engine and :meth:`done` when it ends; :meth:`outcome` is the last
    replay's placement and hits.

    Raises:
        ValueError: a policy not in :data:`LIVE_POLICIES`, fewer than 1 replica.
    """

    def __init__(
        self,
        policy: str,
        requests: Sequence[FleetRequest],
        replicas: int,
        sizing: tuple[int | None, int],
        options: FleetOptions | None = None,
    ) -> None:
        if policy not in LIVE_POLICIES:
            raise ValueError(f"no in-flight placement for {policy!r}: only {LIVE_POLICIES}")
        if replicas < 1:
            raise ValueError(f"a fleet needs at least 1 replica, got {replicas}")
        self.policy = policy
        self.requests = list(requests)
        self.replicas = replicas
        self.sizing = sizing
        self.options = options or FleetOptions()
        self.reset()

    def reset(self) -> None:
        """Start a replay afresh: a new router (its rotation at replica 0), empty caches."""
        o = self.options
        self._rule = gateway_rule(self.policy, self.replicas, epsilon=o.epsilon,
                                  virtual_nodes=o.virtual_nodes)  # fmt: skip
        caches = [Replayer(self.sizing[0], self.sizing[1]) for _ in range(self.replicas)]
        self._state = FleetState([0] * self.replicas, caches, [0] * self.replicas)
        n = len(self.requests)
        self.placement = [-1] * n
        self.decisions: list[Decision | None] = [None] * n
        self.hit_tokens = [0] * n

    def place(self, index: int, in_flight: Sequence[int]) -> tuple[int, int]:
        """Place request ``index`` given ``in_flight`` (per replica, the requests it holds
        now, not counting this one); returns (replica, uncached prompt tokens ≥ 1: vLLM
        computes a prompt's last token even on a full hit).

        Raises:
            ValueError: ``in_flight`` not one count per replica.
        """
        if len(in_flight) != self.replicas:
            raise ValueError(f"{len(in_flight)} in-flight counts for {self.replicas} replicas")
        self._state.in_flight[:] = in_flight
        request = self.requests[index]
        replica, self.decisions[index] = self._rule(index, request, self._state)
        self._state.placed[replica] += 1
        self.placement[index] = replica
        hits, _ = self._state.caches[replica].start(index, request.cache)
        self.hit_tokens[index] = hits
        return replica, max(request.cache.prompt_tokens - hits, 1)

    def done(self, index: int) -> None:
        """Request ``index`` ended: its replica's cache frees its blocks."""
        self._state.caches[self.placement[index]].end(index)

    def outcome(self) -> FleetOutcome:
        """The last replay's placement, decisions and hits (requests never placed: replica
        -1, no hit)."""
        return FleetOutcome(
            replicas=self.replicas,
            placement=tuple(self.placement),
            decisions=tuple(self.decisions),
            hit_tokens=tuple(self.hit_tokens),
            query_tokens=tuple(r.cache.prompt_tokens for r in self.requests),
        )
