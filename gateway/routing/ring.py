"""A consistent-hash ring over the replicas of a fleet, with virtual nodes.

Replica ``i`` owns ``virtual_nodes`` points on a ring of 2^64 positions, point ``v`` at the
BLAKE2b-64 hash of ``"replica-{i}#{v}"`` (the same stable hash as the keys,
:mod:`gateway.routing.keys`). A key belongs to the first point at or after its own value,
wrapping past 2^64 − 1 to the first point (Karger et al. 1997). Walking on from there gives
the key's *successors*: every replica once, in ring order. A key passed on (its owner too
loaded or its breaker open) goes to the next successor, so the keys of a replica that leaves
spread over the others in proportion to their points, and come back when it returns.

Replicas are named by their index in the fleet, not their URL, so the placement depends
only on the number of replicas: the fleet model predicts it without knowing the ports.
160 virtual nodes per replica, as nginx's ``hash … consistent`` (ketama) and vllm-router's
``consistent_hash`` use, keep each replica's share of the ring within a few percent.
"""

from __future__ import annotations

import bisect
import hashlib

#: Points per replica on the ring.
DEFAULT_VIRTUAL_NODES = 160

_RING = b"routing-ring"


def point_of(replica: int, vnode: int) -> int:
    """Ring position of virtual node ``vnode`` of replica ``replica`` (0 … 2^64 − 1)."""
    data = f"replica-{replica}#{vnode}".encode()
    digest = hashlib.blake2b(data, digest_size=8, person=_RING).digest()
    return int.from_bytes(digest, "little", signed=False)


class HashRing:
    """The ring of ``replicas`` replicas with ``virtual_nodes`` points each.

    Immutable once built; :meth:`successors` is a binary search plus a table lookup (each
    point's successor order is computed once, at construction).

    Raises:
        ValueError: fewer than 1 replica or virtual node.
    """

    def __init__(self, replicas: int, virtual_nodes: int = DEFAULT_VIRTUAL_NODES) -> None:
        if replicas < 1:
            raise ValueError(f"a ring needs at least 1 replica, got {replicas}")
        if virtual_nodes < 1:
            raise ValueError(f"virtual_nodes must be ≥ 1, got {virtual_nodes}")
        self.replicas = replicas
        self.virtual_nodes = virtual_nodes
        # Ties between two replicas' points (a 64-bit collision) go to the lower index.
        points = sorted((point_of(r, v), r) for r in range(replicas) for v in range(virtual_nodes))
        self._positions = [p for p, _ in points]
        owners = [r for _, r in points]
        self._orders = [self._walk(owners, start) for start in range(len(owners))]

    def _walk(self, owners: list[int], start: int) -> tuple[int, ...]:
        seen: list[int] = []
        n = len(owners)
        for step in range(n):
            owner = owners[(start + step) % n]
            if owner not in seen:
                seen.append(owner)
                if len(seen) == self.replicas:
                    break
        return tuple(seen)

    def successors(self, key: int) -> tuple[int, ...]:
        """Every replica once, in the order a key passes through them: its owner (the first
        point at or after ``key``, wrapping) first."""
        index = bisect.bisect_left(self._positions, key)
        return self._orders[index % len(self._positions)]

    def owner(self, key: int) -> int:
        """The replica that owns ``key`` (its first successor)."""
        return self.successors(key)[0]

    def shares(self) -> list[float]:
        """Each replica's fraction of the ring (sums to 1): the share of uniformly spread
        keys it owns."""
        size = 2**64
        share = [0.0] * self.replicas
        positions = self._positions
        for i, pos in enumerate(positions):
            prev = positions[i - 1] if i else positions[-1] - size
            share[self._orders[i][0]] += (pos - prev) / size
        return share
