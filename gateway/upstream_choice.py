"""Which upstream gets a request: the routing seam.

The proxy asks :meth:`Router.choose` for a request's upstream. The router offers its
:class:`RoutingPolicy` the request (:class:`RouteRequest`) and the state of every configured
upstream (requests in flight, breaker, what the gateway observed), with those whose breaker
admits traffic and that the request has not tried yet; the policy only picks one of those, and
the router reserves it in the pool (breaker attempt, in-flight count). No policy can route to
an open breaker.

The gateway routes with :class:`LeastInFlight`. Times are monotonic seconds.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from gateway.upstreams import Lease, Upstream, UpstreamPool


@dataclass(frozen=True, slots=True)
class RouteRequest:
    """What a routing policy may know of one request.

    ``path`` is the request's path and query, ``body`` its raw body (bytes, already read and
    size-checked), ``tried`` the URLs of upstreams already tried for it (never offered again).
    """

    method: str = "POST"
    path: str = ""
    body: bytes = b""
    tried: frozenset[str] = frozenset()


class RoutingPolicy(Protocol):
    """Chooses the upstream of one request."""

    def choose(
        self, request: RouteRequest, upstreams: Sequence[Upstream], admitted: Sequence[Upstream]
    ) -> Upstream:
        """One of ``admitted`` for ``request``.

        ``upstreams`` are all configured upstreams in configured order; ``admitted`` (never
        empty) those of them, in the same order, whose breaker admits traffic now and which
        ``request`` has not tried yet.
        """
        ...


class LeastInFlight:
    """The admitted upstream with the fewest requests in flight; ties rotate (round robin,
    starting after the upstream chosen last)."""

    def __init__(self) -> None:
        self._rotation = 0

    def choose(
        self, request: RouteRequest, upstreams: Sequence[Upstream], admitted: Sequence[Upstream]
    ) -> Upstream:
        """See :meth:`RoutingPolicy.choose`."""
        n = len(upstreams)
        start = self._rotation % n
        positions = {id(u): i for i, u in enumerate(upstreams)}

        def rank(upstream: Upstream) -> tuple[int, int]:
            return upstream.in_flight, (positions[id(upstream)] - start) % n

        chosen = min(admitted, key=rank)
        self._rotation = positions[id(chosen)] + 1
        return chosen


class Router:
    """Routes requests over ``pool`` with ``policy`` (default :class:`LeastInFlight`)."""

    def __init__(self, pool: UpstreamPool, policy: RoutingPolicy | None = None) -> None:
        self.pool = pool
        self.policy: RoutingPolicy = policy if policy is not None else LeastInFlight()

    def choose(self, now_s: float, request: RouteRequest | None = None) -> Lease | None:
        """Reserve the upstream the policy picks for ``request`` (default: an empty one, nothing
        tried) among those that take traffic at ``now_s``, or ``None`` if none does. Give the
        lease back with :meth:`gateway.upstreams.UpstreamPool.release`."""
        if request is None:
            request = RouteRequest()
        admitted = self.pool.admitted(now_s, request.tried)
        if not admitted:
            return None
        chosen = self.policy.choose(request, self.pool.upstreams, admitted)
        return self.pool.reserve(chosen, now_s)
