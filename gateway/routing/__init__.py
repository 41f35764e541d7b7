"""Routing policies as pure code: which replica of a fleet a request goes to.

One implementation serves two callers that must agree request by request: the gateway
(live traffic; a :class:`Router` plugs into its upstream-choice seam,
:mod:`gateway.upstream_choice`) and the fleet cache model in ``scenarios/`` (prediction). So this
package does no I/O, reads no clock and imports nothing of the project outside itself
(``tests/test_package_layering.py`` enforces that, and lets ``scenarios`` and ``analysis``
import this package and nothing else of ``gateway``).

- :mod:`gateway.routing.keys`: the routing key of a request (its prompt's first blocks of
  token IDs, or a text prefix for text and chat prompts), a stable 64-bit BLAKE2b hash.
- :mod:`gateway.routing.ring`: the consistent-hash ring with virtual nodes.
- :mod:`gateway.routing.router`: the policies (``round-robin``, ``least-loaded``,
  ``prefix-hash`` = consistent hashing with bounded loads) and the :class:`Decision` each
  returns.

docs/fleet.md describes each policy.
"""

from gateway.routing.keys import DEFAULT_PREFIX_BLOCKS, DEFAULT_PREFIX_CHARS, PrefixKeys
from gateway.routing.ring import DEFAULT_VIRTUAL_NODES, HashRing
from gateway.routing.router import (
    DEFAULT_EPSILON,
    POLICIES,
    Decision,
    ReplicaView,
    Router,
    Why,
    load_bound,
    parse_policy,
)

__all__ = [
    "DEFAULT_EPSILON",
    "DEFAULT_PREFIX_BLOCKS",
    "DEFAULT_PREFIX_CHARS",
    "DEFAULT_VIRTUAL_NODES",
    "POLICIES",
    "Decision",
    "HashRing",
    "PrefixKeys",
    "ReplicaView",
    "Router",
    "Why",
    "load_bound",
    "parse_policy",
]
