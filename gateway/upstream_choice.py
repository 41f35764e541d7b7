"""Which upstream gets a request: the routing seam.

The proxy asks :meth:`Router.route` for a request's upstream. The router offers its
:class:`RoutingPolicy` the request (:class:`RouteRequest`) and the state of every configured
upstream (requests in flight, breaker, what the gateway observed), with those whose breaker
admits traffic and that the request has not tried yet; the policy only picks one of those
and says why (:class:`gateway.routing.Decision`), and the router reserves it in the pool
(breaker attempt, in-flight count). No policy can route to an open breaker.

The gateway's policies are :class:`PolicyRouting` over :class:`gateway.routing.Router`
(``least-loaded``, the default, ``round-robin`` and ``prefix-hash``; docs/fleet.md): the same
code the fleet cache model predicts with. An upstream the request already tried counts as
unavailable, like one whose breaker is open, so a prefix-hash retry after a refused
connection is ``passed-on-breaker``. Times are monotonic seconds.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from gateway.routing import Decision, ReplicaView
from gateway.routing import Router as PolicyRouter
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


@dataclass(frozen=True, slots=True)
class Pick:
    """A policy's choice: one of the admitted upstreams, and the decision that chose it
    (its ``replica`` is the upstream's index in the configured order)."""

    upstream: Upstream
    decision: Decision


class RoutingPolicy(Protocol):
    """Chooses the upstream of one request."""

    def choose(
        self, request: RouteRequest, upstreams: Sequence[Upstream], admitted: Sequence[Upstream]
    ) -> Pick:
        """One of ``admitted`` for ``request``, with why.

        ``upstreams`` are all configured upstreams in configured order; ``admitted`` (never
        empty) those of them, in the same order, whose breaker admits traffic now and which
        ``request`` has not tried yet.
        """
        ...


class PolicyRouting:
    """A :class:`gateway.routing.Router` policy as the proxy's :class:`RoutingPolicy`.

    The prefix-hash key is computed from the request's JSON body
    (:meth:`gateway.routing.PrefixKeys.of_body`); a body that is not a JSON object has no
    key and is placed least-loaded, as the router does for any request without one.
    """

    def __init__(self, router: PolicyRouter) -> None:
        self.router = router

    def choose(
        self, request: RouteRequest, upstreams: Sequence[Upstream], admitted: Sequence[Upstream]
    ) -> Pick:
        """See :meth:`RoutingPolicy.choose`."""
        ok = {id(u) for u in admitted}
        views = [ReplicaView(u.in_flight, id(u) in ok) for u in upstreams]
        key = _key(self.router, request.body) if self.router.policy == "prefix-hash" else None
        decision = self.router.decide(views, key)
        assert decision is not None  # ``admitted`` is never empty
        return Pick(upstreams[decision.replica], decision)


def _key(router: PolicyRouter, body: bytes) -> int | None:
    try:
        parsed = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        return None
    return router.key_of(parsed) if isinstance(parsed, dict) else None


@dataclass(frozen=True, slots=True)
class Routed:
    """A reserved upstream (give the lease back with
    :meth:`gateway.upstreams.UpstreamPool.release`) and the routing decision behind it."""

    lease: Lease
    decision: Decision


class Router:
    """Routes requests over ``pool`` with ``policy`` (default: ``least-loaded``)."""

    def __init__(self, pool: UpstreamPool, policy: RoutingPolicy | None = None) -> None:
        self.pool = pool
        if policy is None:
            policy = PolicyRouting(PolicyRouter("least-loaded", len(pool.upstreams)))
        self.policy: RoutingPolicy = policy

    def route(self, now_s: float, request: RouteRequest | None = None) -> Routed | None:
        """Reserve the upstream the policy picks for ``request`` (default: an empty one, nothing
        tried) among those that take traffic at ``now_s``, or ``None`` if none does."""
        if request is None:
            request = RouteRequest()
        admitted = self.pool.admitted(now_s, request.tried)
        if not admitted:
            return None
        pick = self.policy.choose(request, self.pool.upstreams, admitted)
        return Routed(self.pool.reserve(pick.upstream, now_s), pick.decision)

    def choose(self, now_s: float, request: RouteRequest | None = None) -> Lease | None:
        """:meth:`route`'s lease alone."""
        routed = self.route(now_s, request)
        return None if routed is None else routed.lease
