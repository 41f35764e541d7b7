"""vllm-router's ``cache_aware`` policy, approximated for the fleet model's bracket.

The router (``src/policies/cache_aware.rs``, ``CacheAwarePolicy``, defaults of 0.1.17's
command line) keeps an approximate radix tree of the routing texts it sent to each worker
(never told what the engines evicted; trimmed to ``--max-tree-size`` characters every
``--eviction-interval-secs``). Per request:

1. if the load is imbalanced, max − min requests in flight > ``--balance-abs-threshold``
   (64) and max > ``--balance-rel-threshold`` (1.5) × min: the least-loaded worker;
2. else, the worker whose tree shares the longest prefix with the request's routing text;
   if that prefix is more than ``--cache-threshold`` (0.3) of the text: that worker;
3. else the worker whose tree holds the fewest characters.

The chosen worker's tree learns the text. What this model does not know is how the router
breaks ties (several workers with the same match or tree size: its tree answers with one
tenant of the deepest matching node), so it replays the rule twice, ties to the lower and to
the higher index, and the bracket spans both. Characters are counted as the router counts
them: a routing text's bytes (a token-ID prompt's text is ``token_ids:{count}``, so on
token-ID traffic every request after the first matches at least ``token_ids:`` and sticks to
the worker that took the first request of the nearest length).
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


class TextTree:
    """One worker's share of the router's tree: the texts routed to it, sorted."""

    def __init__(self) -> None:
        self.texts: list[str] = []
        self.chars = 0

    def match(self, text: str) -> int:
        """Characters of ``text``'s longest prefix that some routed text shares (the longest
        common prefix is with a sorted neighbour)."""
        at = bisect.bisect_left(self.texts, text)
        return max(
            (_common_prefix(text, self.texts[j]) for j in (at - 1, at) if 0 <= j < len(self.texts)),
            default=0,
        )

    def insert(self, text: str) -> None:
        """Learn ``text``; the tree grows by the characters it does not share."""
        at = bisect.bisect_left(self.texts, text)
        if at < len(self.texts) and self.texts[at] == text:
            return
        self.chars += len(text) - self.match(text)
        self.texts.insert(at, text)


def _first(values: list[int], best: int, high_first: bool) -> int:
    order = range(len(values) - 1, -1, -1) if high_first else range(len(values))
    return next(i for i in order if values[i] == best)


def cache_aware_rule(
    high_first: bool,
    threshold: float = CACHE_THRESHOLD,
    balance_abs: int = BALANCE_ABS_THRESHOLD,
    balance_rel: float = BALANCE_REL_THRESHOLD,
) -> Rule:
    """The rule of the module doc, ties to the higher index when ``high_first`` (else the
    lower)."""
    trees: list[TextTree] = []

    def rule(index: int, request: FleetRequest, state: FleetState) -> tuple[int, Decision | None]:
        while len(trees) < state.replicas:
            trees.append(TextTree())
        loads = state.in_flight
        text = request.router_text
        if max(loads) - min(loads) > balance_abs and max(loads) > balance_rel * min(loads):
            chosen = _first(loads, min(loads), high_first)
        else:
            matches = [t.match(text) for t in trees]
            best = max(matches)
            if text and best / len(text) > threshold:
                chosen = _first(matches, best, high_first)
            else:
                sizes = [t.chars for t in trees]
                chosen = _first(sizes, min(sizes), high_first)
        trees[chosen].insert(text)
        return chosen, None

    return rule
