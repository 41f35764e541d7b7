"""vllm-router's ``kv_aware`` policy as 0.1.17 places requests, for the fleet model.

Source: vllm-router 0.1.17's source distribution (``vllm_router-0.1.17.tar.gz``, the
package ``make proxies`` installs): ``src/policies/kv_aware.rs`` (``KvAwarePolicy``:
``credited_tokens``, ``request_prefill_tokens``, ``cost_components``,
``MultiplicativeScorer``, ``TemperaturePicker``, ``pick_among``, ``InMemorySlotManager``),
``src/routers/http/router.rs`` (the request's token IDs, ``RequestLoadGuard``,
``LoadTrackedBody``), ``src/backend/preprocess.rs`` (``http_kv_input``: a token-ID
completion prompt is scored by its own tokens) and ``src/kv_index/`` (each worker's blocks,
from the ``BlockStored``/``BlockRemoved``/``AllBlocksCleared`` events of its engine).

Per request, with the router's defaults (``--router-temperature 0``, no session affinity):

1. its P prompt tokens (a token-ID prompt's own; a text or chat prompt's as the replica's
   ``/v1/completions/render`` or ``/tokenize`` gives them) are cut into blocks of B tokens;
2. per worker, ``cached`` = the leading blocks its KV-event index holds, at most
   (P − 1) // B (vLLM always computes the last prompt token), and its new prefill tokens
   n = P − min(cached × B, P − 1);
3. cost = (n + the worker's pending prefill tokens) × (its requests in flight + 1); a
   request's n is pending from its placement until the first frame of its response (its
   first token) or its end;
4. the lowest cost wins, a tie the router's first worker (Rust's ``min_by`` keeps the
   first).

The router's view of a cache lags the cache: vLLM publishes a step's KV events once the step
has run, so the blocks a request stores (and those its allocation evicts) reach the index
about when its first token comes back (docs/fleet.md gives the spread seen). The model
applies each request's stores and evictions, and those of the requests that started before
it on the same replica (vLLM serves them first), at its first token, or at its end when the
event order has no first tokens (a closed loop).

Ties: the router's first worker is the first of its registry (printed in its log as
``Router ready | workers: [...]``), not the first of ``--worker-urls``. The model breaks
ties to the lowest index; the replicas are alike and start cold, so any other order gives
the same hit rates with the replicas renamed: one replay predicts the policy exactly.
"""

from __future__ import annotations

from collections.abc import Sequence

from gateway.routing import Decision
from scenarios.fleet.requests import FleetRequest
from scenarios.fleet.simulate import FleetState
from scenarios.prefix_cache_model.pool import GENERATED
from scenarios.prefix_cache_model.replay import ReplayObserver


class _Recorder:
    """One replica's cache observer: each request's stores and evictions, in order, held
    until the rule applies them."""

    def __init__(self, ops: dict[int, list[tuple[bool, int]]]) -> None:
        self.ops = ops

    def stored(self, index: int, keys: Sequence[int], generated: int) -> None:
        self.ops.setdefault(index, []).extend((True, k) for k in keys)

    def evicted(self, index: int, key: int) -> None:
        if key != GENERATED:  # a generated block is never a prompt's prefix here
            self.ops.setdefault(index, []).append((False, key))


def new_prefill_tokens(prompt_tokens: int, cached_blocks: int, block_tokens: int) -> int:
    """The router's n for a prompt of ``prompt_tokens`` tokens of which ``cached_blocks``
    leading blocks of ``block_tokens`` are in the worker's index: P − min(min(cached,
    (P − 1) // B) × B, P − 1) (``credited_tokens``, ``request_prefill_tokens``)."""
    credited_blocks = min(cached_blocks, (prompt_tokens - 1) // block_tokens)
    return prompt_tokens - min(credited_blocks * block_tokens, prompt_tokens - 1)


class KvAwareRule:
    """vllm-router's ``kv_aware`` (module doc) as a
    :class:`scenarios.fleet.simulate.WatchingRule`, for replicas of ``block_tokens``-token
    blocks. Use one instance per replay."""

    def __init__(self, block_tokens: int) -> None:
        self.block_tokens = block_tokens
        self.views: list[set[int]] = []
        self.queues: list[list[int]] = []
        self.pending: list[int] = []
        self.prefill: dict[int, int] = {}
        self.ops: dict[int, list[tuple[bool, int]]] = {}

    def _grow(self, replicas: int) -> None:
        while len(self.views) < replicas:
            self.views.append(set())
            self.queues.append([])
            self.pending.append(0)

    def observer(self, replica: int) -> ReplayObserver:
        """Replica ``replica``'s cache observer."""
        self._grow(replica + 1)
        return _Recorder(self.ops)

    def cached_blocks(self, replica: int, keys: Sequence[int]) -> int:
        """The leading ``keys`` that replica ``replica``'s index holds now."""
        view = self.views[replica]
        count = 0
        for key in keys:
            if key not in view:
                break
            count += 1
        return count

    def costs(self, request: FleetRequest, state: FleetState) -> list[tuple[int, int]]:
        """(cost, n) of each replica for ``request`` now."""
        p, b = request.cache.prompt_tokens, self.block_tokens
        out = []
        for r in range(state.replicas):
            n = new_prefill_tokens(p, self.cached_blocks(r, request.cache.block_keys), b)
            out.append(((n + self.pending[r]) * (state.in_flight[r] + 1), n))
        return out

    def __call__(
        self, index: int, request: FleetRequest, state: FleetState
    ) -> tuple[int, Decision | None]:
        self._grow(state.replicas)
        costs = self.costs(request, state)
        chosen = min(range(state.replicas), key=lambda r: costs[r][0])
        self.prefill[index] = costs[chosen][1]
        self.pending[chosen] += costs[chosen][1]
        self.queues[chosen].append(index)
        return chosen, None

    def on_event(self, kind: str, index: int, replica: int) -> None:
        """At request ``index``'s first token (``kind`` ``first``) or its end, whichever
        comes first: its prefill is no longer pending, and the index learns what it and the
        requests started before it on ``replica`` stored and evicted."""
        self.pending[replica] -= self.prefill.pop(index, 0)
        queue = self.queues[replica]
        if index not in queue:
            return
        done = queue.index(index) + 1
        view = self.views[replica]
        for j in queue[:done]:
            for stored, key in self.ops.pop(j, []):
                if stored:
                    view.add(key)
                else:
                    view.discard(key)
        del queue[:done]
