"""Replaying a request sequence against the pool: :func:`predict_hits` and its
sequential fast path (rules 2–3 of :mod:`scenarios.prefix_cache_model`)."""

from __future__ import annotations

import collections
import functools
import itertools
import math
import operator
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol, cast

from scenarios.prefix_cache_model.keys import CacheRequest
from scenarios.prefix_cache_model.pool import BlockPool


@dataclass(frozen=True)
class Prediction:
    """Predicted prefix-cache hits of a request sequence.

    Attributes:
        capacity_blocks: usable blocks in the pool (``None`` = unbounded).
        block_tokens: B.
        hit_tokens: per request (input order), hit blocks × B, as ``vllm:prefix_cache_hits``
            counts them.
        query_tokens: per request, its prompt tokens, as ``vllm:prefix_cache_queries`` counts.
        lent_blocks: per request, blocks the pool could not give when it started (the model
            lent them; vLLM would have queued or preempted; see the module doc).
        pool_blocks: blocks the pool ended with: ``capacity_blocks``, or for an unbounded
            cache the blocks it had to make, i.e. the smallest capacity at which this event
            order never evicts a cached block (the footprint; partial blocks are reused first
            as in vLLM, so they do not count twice).
    """

    capacity_blocks: int | None
    block_tokens: int
    hit_tokens: tuple[int, ...]
    query_tokens: tuple[int, ...]
    lent_blocks: tuple[int, ...]
    pool_blocks: int = 0

    @property
    def total_hit_tokens(self) -> int:
        return sum(self.hit_tokens)

    @property
    def total_query_tokens(self) -> int:
        return sum(self.query_tokens)

    @property
    def hit_rate(self) -> float:
        """Prefix-cache hit rate: hit tokens / query tokens over all requests (0–1; 0 for no
        queries), the ratio of the two counters' increments."""
        queries = self.total_query_tokens
        return self.total_hit_tokens / queries if queries else 0.0

    @property
    def short_requests(self) -> int:
        """Requests that started when the pool could not hold them."""
        return sum(1 for n in self.lent_blocks if n)


def _check_events(events: Sequence[tuple[str, int]], n: int) -> None:
    started: set[int] = set()
    ended: set[int] = set()
    for kind, index in events:
        if not 0 <= index < n:
            raise ValueError(f"event ({kind!r}, {index}): no request {index} (have {n})")
        if kind == "start":
            if index in started:
                raise ValueError(f"request {index} starts twice")
            started.add(index)
        elif kind == "end":
            if index not in started or index in ended:
                raise ValueError(f"request {index} ends before it starts, or twice")
            ended.add(index)
        else:
            raise ValueError(f"event kind must be 'start' or 'end', got {kind!r}")
    if len(started) != n or len(ended) != n:
        raise ValueError(
            f"every request must start and end once: {n} requests, events for "
            f"{len(started)} starts and {len(ended)} ends"
        )


class ReplayObserver(Protocol):
    """Told what the replay caches and evicts (the KV-event comparison's predicted side)."""

    def stored(self, index: int, keys: Sequence[int], generated: int) -> None:
        """Request ``index`` cached the prompt blocks ``keys`` (in order) and then
        ``generated`` blocks of its generated tokens."""

    def evicted(self, index: int, key: int) -> None:
        """Allocating for request ``index`` evicted a cached block: its prompt key, or
        :data:`scenarios.prefix_cache_model.pool.GENERATED` for a generated-token block."""


def check_requests(
    requests: Sequence[CacheRequest], capacity_blocks: int | None, block_tokens: int
) -> None:
    """The checks :func:`predict_hits` makes before replaying (its Raises)."""
    if block_tokens < 1:
        raise ValueError(f"block_tokens must be ≥ 1, got {block_tokens}")
    if capacity_blocks is not None and capacity_blocks < 0:
        raise ValueError(f"capacity_blocks must be ≥ 0, got {capacity_blocks}")
    for r in requests:
        if len(r.block_keys) != r.prompt_tokens // block_tokens:
            raise ValueError(
                f"request {r.request_id}: {len(r.block_keys)} block keys for a prompt of "
                f"{r.prompt_tokens} tokens in blocks of {block_tokens} (needs "
                f"{r.prompt_tokens // block_tokens})"
            )
        if r.output_tokens < 1 or r.prompt_tokens < 1:
            raise ValueError(f"request {r.request_id}: prompt and output must be ≥ 1 token")
        if r.block_keys and min(r.block_keys) < 0:
            raise ValueError(f"request {r.request_id}: block keys must be ≥ 0")


def predict_hits(
    requests: Sequence[CacheRequest],
    capacity_blocks: int | None,
    block_tokens: int,
    events: Sequence[tuple[str, int]] | None = None,
) -> Prediction:
    """Replay ``requests`` against a prefix cache of ``capacity_blocks`` blocks of
    ``block_tokens`` tokens, following vLLM's rules (module doc).

    Args:
        requests: in any order; ``events`` refers to them by index.
        capacity_blocks: usable blocks (:func:`usable_blocks`,
            :func:`capacity_blocks_for_tokens`); ``None`` for an unbounded cache (nothing is
            ever evicted: the trace's theoretical maximum).
        block_tokens: B, the server's block size.
        events: the order of ``("start", i)`` (admission: lookup and allocation) and
            ``("end", i)`` (its blocks are freed); ``None`` means each request ends before the
            next starts, in input order.

    Returns:
        Per-request hit and query tokens and their ratio (:class:`Prediction`).

    Raises:
        ValueError: ``block_tokens`` < 1, a negative capacity, a request whose
            ``block_keys`` is not ``prompt_tokens // block_tokens`` long or has a negative
            key, prompt or output < 1, or ``events`` that do not start and end every request
            exactly once, start before end.
    """
    check_requests(requests, capacity_blocks, block_tokens)
    if events is None and capacity_blocks is not None:
        hits, lent = _replay_sequential(requests, capacity_blocks, block_tokens)
        pool_blocks = capacity_blocks
    else:
        hits, lent, pool_blocks = replay_events(requests, capacity_blocks, block_tokens, events)
    return Prediction(
        capacity_blocks=capacity_blocks,
        block_tokens=block_tokens,
        hit_tokens=tuple(hits),
        query_tokens=tuple(r.prompt_tokens for r in requests),
        lent_blocks=tuple(lent),
        pool_blocks=pool_blocks,
    )


class Replayer:
    """One pool replayed one event at a time: :meth:`start` and :meth:`end` are
    :func:`replay_events`' two steps, for callers that decide between events (the fleet
    model places each request before it starts). Requests are checked by the caller
    (:func:`check_requests`).
    """

    def __init__(
        self,
        capacity_blocks: int | None,
        block_tokens: int,
        observer: ReplayObserver | None = None,
    ) -> None:
        self.capacity_blocks = capacity_blocks
        self.block_tokens = block_tokens
        self.observer = observer
        self.pool = BlockPool(capacity_blocks)
        self.held: dict[int, list[int]] = {}

    def start(self, index: int, request: CacheRequest) -> tuple[int, int]:
        """Admit ``request`` (known as ``index`` to :meth:`end` and the observer): look up,
        allocate, cache. Returns (hit tokens, lent blocks)."""
        b, pool, observer = self.block_tokens, self.pool, self.observer
        p, o, keys = request.prompt_tokens, request.output_tokens, request.block_keys
        if observer is not None:
            pool.on_evict = functools.partial(observer.evicted, index)
        # get_computed_blocks: the leading cached run, at most (P - 1) // B blocks.
        hit_blocks = pool.lookup(keys, (p - 1) // b)
        # allocate_slots: touch the hits first, then take new blocks from the head.
        pool.touch(hit_blocks)
        new_blocks, lent = pool.allocate(math.ceil((p + o - 1) / b) - len(hit_blocks))
        blocks = hit_blocks + new_blocks
        # cache_full_blocks: the prompt's full blocks (the recomputed last one too), then the
        # full blocks the generated tokens fill; the last partial block keeps no hash.
        generated = (p + o - 1) // b - len(keys)
        pool.cache(blocks, keys, len(hit_blocks), generated)
        if observer is not None:
            observer.stored(index, keys[len(hit_blocks) :], generated)
        self.held[index] = blocks
        return len(hit_blocks) * b, lent

    def end(self, index: int) -> None:
        """Free request ``index``'s blocks."""
        self.pool.free_request(self.held.pop(index))

    @property
    def pool_blocks(self) -> int:
        """:attr:`Prediction.pool_blocks` so far."""
        return len(self.pool.key) if self.capacity_blocks is None else self.capacity_blocks


def event_order(n: int, events: Sequence[tuple[str, int]] | None) -> Iterable[tuple[str, int]]:
    """``events`` checked (:func:`predict_hits`' rule), or for ``None`` each of the ``n``
    requests ending before the next starts.

    Raises:
        ValueError: ``events`` that do not start and end every request exactly once.
    """
    if events is None:
        return itertools.chain.from_iterable((("start", i), ("end", i)) for i in range(n))
    _check_events(events, n)
    return events


def replay_events(
    requests: Sequence[CacheRequest],
    capacity_blocks: int | None,
    block_tokens: int,
    events: Sequence[tuple[str, int]] | None = None,
    observer: ReplayObserver | None = None,
) -> tuple[list[int], list[int], int]:
    """The general replay behind :func:`predict_hits` (requests already checked), telling
    ``observer`` what each start caches and evicts. Returns (hit tokens, lent blocks) per
    request and the blocks the pool ended with (:attr:`Prediction.pool_blocks`).

    Raises:
        ValueError: ``events`` that do not start and end every request exactly once.
    """
    n = len(requests)
    replayer = Replayer(capacity_blocks, block_tokens, observer)
    hits = [0] * n
    lent = [0] * n
    for kind, i in event_order(n, events):
        if kind == "end":
            replayer.end(i)
        else:
            hits[i], lent[i] = replayer.start(i, requests[i])
    return hits, lent, replayer.pool_blocks


def _replay_sequential(
    requests: Sequence[CacheRequest], capacity_blocks: int, block_tokens: int
) -> tuple[list[int], list[int]]:
    """:func:`predict_hits` for a bounded pool and requests one after another: the same rules,
    faster (a sweep of cache sizes runs this once per size). With nothing else running, every
    ref count is 0 or 1, and blocks lent to a request are never looked up (nothing runs beside
    it) and leave with it, so they are only counted; whether a freed block goes to the queue's
    tail (hashed) or head (the partial last block) follows from its index, so blocks of
    generated tokens need no key here. The loops are C-level (``map``, ``dict.update``) where
    the common case allows. Pinned equal to the general replay by a test on the full Mooncake
    sample. Returns (hit tokens, lent blocks) per request."""
    free: OrderedDict[int, None] = OrderedDict.fromkeys(range(capacity_blocks))
    first: dict[int, int] = {}  # prompt key → its first holder (BlockHashToBlockMap order)
    dups: dict[int, list[int]] = {}  # prompt key → later holders, insertion order
    key: dict[int, int] = {}  # block → the prompt key it holds
    popitem, delete_free = free.popitem, free.__delitem__
    present = functools.partial(operator.is_not, None)

    def uncache_dup(bid: int, k: int) -> None:
        if first[k] == bid:
            later = dups[k]
            first[k] = later.pop(0)
        else:
            later = dups[k]
            later.remove(bid)
        if not later:
            del dups[k]

    hits: list[int] = []
    lent: list[int] = []
    for r in requests:
        p, o, keys = r.prompt_tokens, r.output_tokens, r.block_keys
        # get_computed_blocks: the leading run of cached blocks, at most (P - 1) // B.
        lookups = map(first.get, keys[: (p - 1) // block_tokens])
        blocks = cast(list[int], list(itertools.takewhile(present, lookups)))
        h = len(blocks)
        collections.deque(map(delete_free, blocks), maxlen=0)  # touch: out of the queue
        total = -(-(p + o - 1) // block_tokens)
        full = (p + o - 1) // block_tokens
        need = total - h
        take = min(need, len(free))
        taken = [popitem(False)[0] for _ in range(take)]
        for bid, k in zip(taken, map(key.pop, taken, itertools.repeat(None)), strict=True):
            if k is None:
                continue
            if k in dups:
                uncache_dup(bid, k)
            else:
                del first[k]
        blocks += taken
        held = h + take
        # cache_full_blocks: prompt keys of the new full prompt blocks (duplicates are rare).
        stop = min(len(keys), held)
        new_keys, new_blocks = keys[h:stop], blocks[h:stop]
        if any(map(first.__contains__, new_keys)):
            for bid, k in zip(new_blocks, new_keys, strict=True):
                key[bid] = k
                if k in first:
                    dups.setdefault(k, []).append(bid)
                else:
                    first[k] = bid
        else:
            first.update(zip(new_keys, new_blocks, strict=True))
            key.update(zip(new_blocks, new_keys, strict=True))
        # Free: hashed blocks to the tail in reverse order, the partial one to the head.
        free.update(dict.fromkeys(reversed(blocks[: min(full, held)])))
        for bid in reversed(blocks[full:held]):
            free[bid] = None
            free.move_to_end(bid, last=False)
        hits.append(h * block_tokens)
        lent.append(need - take)
    return hits, lent
