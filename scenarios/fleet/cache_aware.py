"""vllm-router's ``cache_aware`` policy as 0.1.17 places completions, for the fleet model.

The router (``src/policies/cache_aware.rs``, ``CacheAwarePolicy``, defaults of 0.1.17's
command line) keeps an approximate radix tree of the prompts it sent to each worker (never
told what the engines evicted; trimmed to ``--max-tree-size`` every
``--eviction-interval-secs``, 120 s, which a tree of a few thousand prompts never reaches).
Per request:

1. if the load is imbalanced, max − min requests in flight > ``--balance-abs-threshold``
   (64) and max > ``--balance-rel-threshold`` (1.5) × min: the least-loaded worker;
2. else, the worker whose tree shares the longest prefix with the request's key; if that
   prefix is more than ``--cache-threshold`` (0.3) of the key: that worker;
3. else the least-loaded worker (fewest requests in flight).

The chosen worker's tree learns the key. What a completion is keyed by (0.1.17 keys its
tree by ``extract_cache_routing_key``, not by the ``token_ids:{count}`` text its
``consistent_hash`` hashes; read from the installed router's behaviour, pinned by
``tests/scenarios/test_vllm_router_placement.py``):

- a **token-ID prompt**: its token IDs; a match counts whole tokens and its share is matched
  tokens ÷ prompt tokens, so 31 shared tokens of 100 stick (0.31 > 0.3) and 30 do not,
  whatever the tokens' digits;
- a **text prompt**: no prefix was ever found to match (an identical text went to the least
  loaded worker, not to the one that had served it), so every text prompt is placed by load.

What this model does not know is the order of the router's workers, which decides ties
(equal loads, or several workers matching alike): the least-loaded worker of a tie is the
router's first, and the router lists its workers in an order of its own (not the order of
``--worker-urls``). So it replays the rule twice, ties to the lower and to the higher index,
and the bracket spans both. The replicas are alike, so when every tie is one of load the two
replays mirror each other and give one hit rate.
"""

from __future__ import annotations

import bisect

from gateway.routing import Decision
from scenarios.fleet.requests import FleetRequest
from scenarios.fleet.simulate import FleetState, Rule

#: vllm-router 0.1.17's command-line defaults (``vllm-router --help``).
CACHE_THRESHOLD = 0.3
BALANCE_ABS_THRESHOLD = 64
BALANCE_REL_THRESHOLD = 1.5


def _common_prefix(a: str, b: str) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


class KeyTree:
    """One worker's share of the router's tree: the keys routed to it, sorted. A key is a
    string with one character per unit the router matches (a token)."""

    def __init__(self) -> None:
        self.keys: list[str] = []

    def match(self, key: str) -> int:
        """Units of ``key``'s longest prefix that some routed key shares (the longest common
        prefix is with a sorted neighbour)."""
        at = bisect.bisect_left(self.keys, key)
        return max(
            (_common_prefix(key, self.keys[j]) for j in (at - 1, at) if 0 <= j < len(self.keys)),
            default=0,
        )

    def insert(self, key: str) -> None:
        """Learn ``key``."""
        at = bisect.bisect_left(self.keys, key)
        if at == len(self.keys) or self.keys[at] != key:
            self.keys.insert(at, key)


def _first(values: list[int], best: int, high_first: bool) -> int:
    order = range(len(values) - 1, -1, -1) if high_first else range(len(values))
    return next(i for i in order if values[i] == best)


def cache_aware_rule(
    high_first: bool,
    threshold: float = CACHE_THRESHOLD,
    balance_abs: int = BALANCE_ABS_THRESHOLD,
    balance_rel: float = BALANCE_REL_THRESHOLD,
) -> Rule:
    """The rule of the module doc on each request's :attr:`FleetRequest.cache_key` (empty:
    placed by load), ties to the higher index when ``high_first`` (else the lower)."""
    trees: list[KeyTree] = []

    def rule(index: int, request: FleetRequest, state: FleetState) -> tuple[int, Decision | None]:
        while len(trees) < state.replicas:
            trees.append(KeyTree())
        loads = state.in_flight
        key = request.cache_key
        least_loaded = _first(loads, min(loads), high_first)
        if max(loads) - min(loads) > balance_abs and max(loads) > balance_rel * min(loads):
            chosen = least_loaded
        else:
            matches = [t.match(key) for t in trees]
            best = max(matches)
            matched = bool(key) and best / len(key) > threshold
            chosen = _first(matches, best, high_first) if matched else least_loaded
        if key:
            trees[chosen].insert(key)
        return chosen, None

    return rule
