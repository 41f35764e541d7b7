"""The routing policies and their decisions.

A :class:`Router` holds one policy for a fleet of ``replicas`` replicas. For each request the
caller passes what it knows of every replica at that moment (:class:`ReplicaView`: requests
in flight, whether it may take traffic) and the request's key
(:meth:`gateway.routing.keys.PrefixKeys.of_body`); :meth:`Router.decide` returns a
:class:`Decision`: the replica, the policy, the key and why. The caller then reserves the
replica (its in-flight count + 1) and releases it when the request ends. The router keeps
only its rotation (round-robin's next replica, least-loaded's tie order), so two routers fed
the same views and keys make the same decisions: the gateway and the fleet model agree
request by request.

Policies:

- ``round-robin``: replicas in turn, 0, 1, …, skipping those that may not take traffic.
- ``least-loaded``: the fewest in flight; ties go to the first in rotation order from the
  replica after the last one chosen (the gateway's rule before policies existed: a client
  that sends one request at a time is spread over the fleet, where ties by index would send
  everything to replica 0).
- ``prefix-hash``: consistent hashing with bounded loads (Mirrokni, Thorup, Zadimoghaddam,
  "Consistent Hashing with Bounded Loads", SODA 2018). The key's successors on the ring
  (:class:`gateway.routing.ring.HashRing`) are tried in order; a replica whose breaker is
  open is skipped (``passed-on-breaker``), and one whose load would exceed the bound
  :func:`load_bound` is skipped (``passed-on-load``); the first remaining one takes the
  request (``matched`` when that is the key's own replica). A request without a key is
  placed least-loaded.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Literal

from gateway.routing.keys import PrefixKeys, key_hex
from gateway.routing.ring import DEFAULT_VIRTUAL_NODES, HashRing

#: The routing policies, as named on the command line.
POLICIES = ("round-robin", "least-loaded", "prefix-hash")
Policy = Literal["round-robin", "least-loaded", "prefix-hash"]
#: Why a decision went where it went.
Why = Literal["matched", "passed-on-load", "passed-on-breaker", "round-robin", "least-loaded"]

#: The load slack ε of prefix-hash: a replica takes at most ⌈1.25 × the mean load⌉. The
#: paper leaves ε free (its bounds hold for any ε > 0; smaller ε balances better but passes
#: more keys off their replica, so fewer cache hits). 0.25 is the default of the bounded-load
#: hashes that ship one (brpc's ``c_murmurhash_bl``, load factor 1.25; Go's liblb
#: ``bounded``, imbalance constant 1.25); HAProxy's ``hash-balance-factor``, written with
#: Vimeo who deployed the algorithm first, has no default (its documentation's example, 150,
#: is ε = 0.5).
DEFAULT_EPSILON = 0.25


def parse_policy(name: str) -> Policy:
    """``name`` as a policy.

    Raises:
        ValueError: not one of :data:`POLICIES` (the message lists them).
    """
    if name not in POLICIES:
        raise ValueError(f"unknown routing policy {name!r}: choose from {', '.join(POLICIES)}")
    return name  # type: ignore[return-value]


@dataclass(frozen=True, slots=True)
class ReplicaView:
    """One replica at the moment of a decision.

    Attributes:
        in_flight: requests it holds now (≥ 0), not counting the one being placed.
        available: whether it may take this request: its breaker admits traffic (and the
            caller has not excluded it, e.g. already tried for this request).
    """

    in_flight: int
    available: bool = True


@dataclass(frozen=True, slots=True)
class Decision:
    """Where one request goes and why.

    Attributes:
        replica: the chosen replica's index.
        policy: the policy that chose it.
        key: the request's routing key, 16 hex digits, or ``None`` without one (and always
            ``None`` for round-robin and least-loaded, which use no key).
        why: ``matched`` (prefix-hash: the key's own replica), ``passed-on-load`` (its own
            replica was at the load bound), ``passed-on-breaker`` (its own replica may not
            take traffic), ``round-robin`` or ``least-loaded`` (the policy's rule; also
            prefix-hash's for a request without a key).
        home: prefix-hash: the key's own replica (its first successor on the ring), whether
            or not it took the request; else ``None``.
    """

    replica: int
    policy: str
    key: str | None
    why: Why
    home: int | None = None


def load_bound(in_flight_total: int, replicas: int, epsilon: float) -> int:
    """The most requests a replica may hold once the new one is placed:
    ⌈(1 + ε) × (L + 1) / n⌉ with L the requests in flight on the ``replicas`` = n replicas
    that may take traffic (the mean counts the new request, as HAProxy's bounded-load hash
    does). Exact rational arithmetic, so ε = 0.1 with a mean of 10 gives 11, not 12.

    Raises:
        ValueError: ``replicas`` < 1, ``in_flight_total`` < 0 or ``epsilon`` < 0.
    """
    if replicas < 1 or in_flight_total < 0 or epsilon < 0:
        raise ValueError(
            f"load bound needs ≥ 1 replica, ≥ 0 in flight and ε ≥ 0: got {replicas}, "
            f"{in_flight_total}, {epsilon}"
        )
    eps = Fraction(epsilon).limit_denominator(10**9)
    return math.ceil((1 + eps) * (in_flight_total + 1) / replicas)


class Router:
    """One routing policy over a fleet of ``replicas`` replicas (module doc).

    Args:
        policy: one of :data:`POLICIES`.
        replicas: the fleet's size (≥ 1); views passed to :meth:`decide` must number as many.
        epsilon: prefix-hash's load slack ε (≥ 0).
        virtual_nodes: prefix-hash's points per replica on the ring.
        keys: how a request body becomes a key (:meth:`key_of`).

    Raises:
        ValueError: an unknown policy, fewer than 1 replica, ε < 0.
    """

    def __init__(
        self,
        policy: str,
        replicas: int,
        *,
        epsilon: float = DEFAULT_EPSILON,
        virtual_nodes: int = DEFAULT_VIRTUAL_NODES,
        keys: PrefixKeys | None = None,
    ) -> None:
        self.policy: Policy = parse_policy(policy)
        if replicas < 1:
            raise ValueError(f"a fleet needs at least 1 replica, got {replicas}")
        if epsilon < 0:
            raise ValueError(f"epsilon must be ≥ 0, got {epsilon}")
        self.replicas = replicas
        self.epsilon = epsilon
        self.keys = keys or PrefixKeys()
        self.ring = HashRing(replicas, virtual_nodes) if self.policy == "prefix-hash" else None
        self._next = 0  # round-robin: the next replica; least-loaded: where ties start

    def key_of(self, body: dict[str, object]) -> int | None:
        """The routing key of a request body (:meth:`gateway.routing.keys.PrefixKeys.of_body`)."""
        return self.keys.of_body(body)

    def decide(self, views: Sequence[ReplicaView], key: int | None = None) -> Decision | None:
        """Place one request; ``None`` when no replica is available.

        Args:
            views: every replica now, index = replica (``len == replicas``).
            key: the request's routing key (prefix-hash only; ignored by the others).

        Raises:
            ValueError: ``views`` not one per replica, or a negative in-flight count.
        """
        if len(views) != self.replicas:
            raise ValueError(f"{len(views)} replica views for a fleet of {self.replicas}")
        if any(v.in_flight < 0 for v in views):
            raise ValueError("in-flight counts must be ≥ 0")
        if not any(v.available for v in views):
            return None
        if self.policy == "round-robin":
            return self._round_robin(views)
        if self.policy == "least-loaded" or key is None:
            return self._least_loaded(views)
        return self._prefix_hash(views, key)

    def _rotation(self) -> list[int]:
        return [(self._next + i) % self.replicas for i in range(self.replicas)]

    def _round_robin(self, views: Sequence[ReplicaView]) -> Decision:
        chosen = next(r for r in self._rotation() if views[r].available)
        self._next = chosen + 1
        return Decision(chosen, self.policy, None, "round-robin")

    def _least_loaded(self, views: Sequence[ReplicaView]) -> Decision:
        admitted = [r for r in self._rotation() if views[r].available]
        chosen = min(admitted, key=lambda r: views[r].in_flight)  # first of the tied
        self._next = chosen + 1
        return Decision(chosen, self.policy, None, "least-loaded")

    def _prefix_hash(self, views: Sequence[ReplicaView], key: int) -> Decision:
        assert self.ring is not None
        admitted = [v for v in views if v.available]
        bound = load_bound(sum(v.in_flight for v in admitted), len(admitted), self.epsilon)
        order = self.ring.successors(key)
        home = order[0]
        why: Why = "matched"
        for replica in order:
            view = views[replica]
            if not view.available:
                why = "passed-on-breaker" if why == "matched" else why
            elif view.in_flight + 1 > bound:
                why = "passed-on-load" if why == "matched" else why
            else:
                return Decision(replica, self.policy, key_hex(key), why, home)
        # Unreachable: the least-loaded available replica holds ≤ ⌊L/n⌋ < bound.
        raise AssertionError("no replica under the load bound")
