"""An offline model of vLLM's prefix cache: which prompt tokens of a request sequence hit.

It replays requests' block identities against a pool of ``capacity_blocks`` KV blocks,
following vLLM v1's KV-cache manager (read in vLLM 0.32.0, ``vllm/v1/core/``):

1. **Only full blocks are cached, chained over the prefix.** A block's hash covers its own
   tokens and its parent's hash (``kv_cache_utils.hash_block_tokens``), so block i is found only
   if tokens [0, (i+1)·B) are equal; the partial block at a sequence's end has no hash
   (``BlockPool.cache_full_blocks`` caches ``blocks[num_cached:num_full]``).
   :func:`server_block_keys` gives these identities from a trace's hash ids.
2. **A lookup stops at the first miss and never covers the prompt's last token.**
   ``KVCacheManager.get_computed_blocks`` looks up at most ``max_cache_hit_length =
   num_tokens - 1`` tokens and ``FullAttentionManager.find_longest_cache_hit`` takes the
   leading run of cached blocks among the first ``max_length // block_size``: at most
   ``(P - 1) // B`` blocks hit, so a prompt of whole blocks recomputes its last block
   (1024 tokens, B = 128 → at most 896 hit tokens).
3. **Counters.** ``KVCacheManager.record_prefix_cache_stats`` (called by the scheduler once,
   when the request is admitted) adds ``request.num_tokens`` (the prompt, for a new request) to
   ``vllm:prefix_cache_queries`` and the hit tokens (whole blocks) to
   ``vllm:prefix_cache_hits``; a request resumed after preemption goes to separate
   ``preempted_*`` stats instead (``PrefixCacheStats.record``). The model counts the same:
   per request, queries = prompt tokens, hits = hit blocks × B.
4. **Hit blocks are taken, then new blocks allocated.** ``KVCacheManager.allocate_slots``
   first touches the hit blocks (``BlockPool.touch``: ref count + 1, a free one leaves the free
   queue), then takes new blocks from the free queue's head (``BlockPool.get_new_blocks`` →
   ``FreeKVCacheBlockQueue.popleft_n``), evicting whatever cached block sits there
   (``_maybe_evict_cached_block``). A block with ref count > 0 is never in the free queue, so
   blocks held by running requests are never evicted.
5. **A request holds ceil((P + O − 1) / B) blocks.** Slots are needed for the tokens fed to
   the model: the prompt, then each generated token but the last (the request ends when the
   O-th token is sampled). Full blocks are cached as they fill, generated tokens included
   (``allocate_slots`` caches up to ``min(computed + new, request.num_tokens)``, and
   ``Request.append_output_token_ids`` extends ``block_hashes``); those are unique to the
   request, so they never hit, but they occupy the cache until evicted. The block that
   recomputes a prompt's last block is cached too, beside the copy it did not hit
   (``BlockHashToBlockMap`` keeps duplicates; a lookup takes the first inserted).
6. **Freeing: tail first, LRU.** ``SingleTypeKVCacheManager.free`` frees a request's blocks in
   reverse order; ``BlockPool.free_blocks`` appends blocks that have a hash to the free
   queue's tail in that order (so a request's tail blocks are evicted before its head) and
   prepends blocks without a hash to its head (reused first: they hold nothing). Eviction
   takes the head: least recently freed first.
7. **The pool.** ``BlockPool.__init__`` takes one block as the null block, so a server with
   ``num_gpu_blocks`` blocks (``vllm:cache_config_info``) has ``num_gpu_blocks − 1`` to give
   (:func:`usable_blocks`).

Simplifications (what the model does not see): a request is admitted at its "start" event
with all its blocks for its whole life (vLLM allocates a chunk per step as prefill and decode
proceed); when the pool has too few free blocks for that, vLLM would keep the request
waiting or preempt a running one (recomputing it later), while the model lends the request
the missing blocks for its life, outside the pool, and counts them (``Prediction.lent_blocks``)
so a caller can tell a prediction made under overcommitment. No watermark (vLLM's default
``watermark`` is 0), no speculative lookahead, no preemption.
"""

from __future__ import annotations

import collections
import functools
import hashlib
import itertools
import math
import operator
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import cast

from scenarios.traces import Trace, TraceRequest

#: Bits kept for the block index in a key (a prompt of 2^32 blocks is out of reach).
_INDEX_BITS = 32


def usable_blocks(num_gpu_blocks: int) -> int:
    """Blocks a vLLM pool of ``num_gpu_blocks`` can give to requests: all but the null block
    (``BlockPool.__init__`` pops it from the free queue)."""
    return max(0, num_gpu_blocks - 1)


def capacity_blocks_for_tokens(cache_tokens: int, block_tokens: int) -> int:
    """Usable blocks of a cache that vLLM reports as ``cache_tokens`` tokens
    (``kv_cache_size_tokens`` = ``num_gpu_blocks × block_size``): whole blocks, minus the
    null block."""
    return usable_blocks(cache_tokens // block_tokens)


@functools.lru_cache(maxsize=1 << 20)
def _link(parent: int, hash_id: int) -> int:
    """Identity of the prefix ``parent`` + block ``hash_id``: a 128-bit BLAKE2b digest
    (memoised: requests of a trace share most of their prefixes)."""
    digest = hashlib.blake2b(
        parent.to_bytes(16, "little") + hash_id.to_bytes(8, "little", signed=True),
        digest_size=16,
    ).digest()
    return int.from_bytes(digest, "little")


def server_block_keys(
    request: TraceRequest, trace_block_tokens: int, server_block_tokens: int
) -> tuple[int, ...]:
    """Identities of the full server blocks of ``request``'s prompt, as vLLM chains them.

    Key i stands for prompt tokens [0, (i+1)·B) with B = ``server_block_tokens``: those tokens
    lie in trace blocks 0..j, j = ((i+1)·B − 1) // ``trace_block_tokens``, whose content is
    fixed by ``hash_ids[:j+1]`` (:func:`scenarios.traces.prompt_token_ids`), so key i is a
    128-bit chained digest of ``hash_ids[:j+1]`` shifted left 32 bits, plus i. Two requests'
    key i agree iff their first j+1 hash ids do, i.e. iff their generated prompts agree on
    tokens [0, (i+1)·B) (up to two different blocks drawing the same tokens, or a digest
    collision, both negligible). There are ``input_length // B`` keys (only full blocks are
    cached); keys are ≥ 0. Needs no tokens, so a whole trace is keyed in about a second.
    """
    bs, bt = server_block_tokens, trace_block_tokens
    full = request.input_length // bs
    keys: list[int] = []
    chain = 0
    i = 0
    for j, hash_id in enumerate(request.hash_ids):
        if i >= full:
            break
        chain = _link(chain, hash_id)
        # Server blocks i whose last token (i+1)·B − 1 lies in trace block j.
        stop = min(full, ((j + 1) * bt) // bs)
        if stop > i:
            base = chain << _INDEX_BITS
            keys.extend(range(base + i, base + stop))
            i = stop
    return tuple(keys)


@dataclass(frozen=True)
class CacheRequest:
    """What the model needs of a request.

    Attributes:
        request_id: for reference only.
        block_keys: identities of the prompt's full blocks (:func:`server_block_keys`),
            ``len == prompt_tokens // block_tokens``; keys must be ≥ 0.
        prompt_tokens: P.
        output_tokens: O (≥ 1).
    """

    request_id: str
    block_keys: tuple[int, ...]
    prompt_tokens: int
    output_tokens: int


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


#: Key of a full block of generated tokens: hashed (so freed to the free queue's tail) but
#: unique to its request, so never looked up; not entered in the key map.
_GENERATED = -1


class _Pool:
    """The block pool: per-block key and ref count, the free queue, key → holding blocks.

    Written for speed (the whole 3,993-request sample at B = 128 is ~480,000 block
    allocations per capacity): plain lists and dicts, the loops inlined in its methods.
    """

    def __init__(self, capacity_blocks: int | None) -> None:
        self.bounded = capacity_blocks is not None
        n = capacity_blocks or 0
        self.key: list[int | None] = [None] * n
        self.ref: list[int] = [0] * n
        # Free queue, head first (block id → None); eviction pops the head.
        self.free: OrderedDict[int, None] = OrderedDict.fromkeys(range(n))
        # Cached key → its first holder; later holders in insertion order (vLLM's
        # BlockHashToBlockMap keeps duplicates and answers a lookup with the first).
        self.first: dict[int, int] = {}
        self.dups: dict[int, list[int]] = {}
        self.lent: set[int] = set()
        # Unbounded pool: freed blocks without a hash, reused before a block is made.
        self.spare: list[int] = []

    def uncache(self, bid: int) -> None:
        key = self.key[bid]
        self.key[bid] = None
        if key is None or key == _GENERATED:
            return
        if self.first[key] == bid:
            later = self.dups.get(key)
            if later:
                self.first[key] = later.pop(0)
                if not later:
                    del self.dups[key]
            else:
                del self.first[key]
        else:
            later = self.dups[key]
            later.remove(bid)
            if not later:
                del self.dups[key]

    def lookup(self, keys: Sequence[int], limit: int) -> list[int]:
        """Blocks holding the leading cached run of ``keys[:limit]`` (stops at the first miss)."""
        first = self.first
        out: list[int] = []
        for key in keys[:limit]:
            bid = first.get(key)
            if bid is None:
                break
            out.append(bid)
        return out

    def touch(self, blocks: list[int]) -> None:
        ref, free = self.ref, self.free
        for bid in blocks:
            if ref[bid] == 0 and self.bounded:
                del free[bid]
            ref[bid] += 1

    def allocate(self, n: int) -> tuple[list[int], int]:
        """``n`` blocks (ref count 1) from the free queue's head, their keys evicted; the
        missing ones lent (bounded pool) or made (unbounded). Returns (blocks, lent)."""
        taken = min(n, len(self.free)) if self.bounded else 0
        blocks: list[int] = []
        popitem, key, ref, first, dups = (
            self.free.popitem,
            self.key,
            self.ref,
            self.first,
            self.dups,
        )
        for _ in range(taken):
            bid = popitem(last=False)[0]
            k = key[bid]
            if k is not None:  # evict (the common case inlined: sole holder of its key)
                if k != _GENERATED and first.get(k) == bid and k not in dups:
                    del first[k]
                    key[bid] = None
                else:
                    self.uncache(bid)
            ref[bid] = 1
            blocks.append(bid)
        if not self.bounded:
            reuse = min(n, len(self.spare))
            for _ in range(reuse):
                bid = self.spare.pop()
                ref[bid] = 1
                blocks.append(bid)
            taken = reuse
        made = range(len(self.key), len(self.key) + n - taken)
        self.key.extend([None] * len(made))
        self.ref.extend([1] * len(made))
        blocks.extend(made)
        if self.bounded:
            self.lent.update(made)
            return blocks, len(made)
        return blocks, 0

    def cache(self, blocks: list[int], keys: Sequence[int], start: int, generated: int) -> None:
        """Hash ``blocks[start:len(keys)]`` with their prompt keys, then the next
        ``generated`` blocks as generated-token blocks."""
        key, first, dups = self.key, self.first, self.dups
        for index in range(start, len(keys)):
            bid, k = blocks[index], keys[index]
            key[bid] = k
            if k in first:
                dups.setdefault(k, []).append(bid)
            else:
                first[k] = bid
        for index in range(len(keys), len(keys) + generated):
            key[blocks[index]] = _GENERATED

    def free_request(self, blocks: list[int]) -> None:
        """``SingleTypeKVCacheManager.free`` + ``BlockPool.free_blocks``: reverse order; hashed
        blocks to the tail, unhashed ones to the head. In an unbounded pool hashed blocks stay
        cached for good and unhashed ones are kept for reuse; lent blocks leave the model."""
        ref, key, free = self.ref, self.key, self.free
        to_head: list[int] = []
        for bid in reversed(blocks):
            ref[bid] -= 1
            if ref[bid]:
                continue
            if not self.bounded:
                if key[bid] is None:
                    self.spare.append(bid)
                continue
            if self.lent and bid in self.lent:
                self.lent.discard(bid)
                self.uncache(bid)
            elif key[bid] is None:
                to_head.append(bid)
            else:
                free[bid] = None
        for bid in reversed(to_head):  # prepend_n keeps the list's order at the head
            free[bid] = None
            free.move_to_end(bid, last=False)


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
    n = len(requests)
    if events is None and capacity_blocks is not None:
        hits_seq, lent_seq = _replay_sequential(requests, capacity_blocks, block_tokens)
        return Prediction(
            capacity_blocks=capacity_blocks,
            block_tokens=block_tokens,
            hit_tokens=tuple(hits_seq),
            query_tokens=tuple(r.prompt_tokens for r in requests),
            lent_blocks=tuple(lent_seq),
            pool_blocks=capacity_blocks,
        )
    if events is None:
        order: Iterable[tuple[str, int]] = itertools.chain.from_iterable(
            (("start", i), ("end", i)) for i in range(n)
        )
    else:
        _check_events(events, n)
        order = events

    pool = _Pool(capacity_blocks)
    held: dict[int, list[int]] = {}
    hits = [0] * n
    lent = [0] * n
    for kind, i in order:
        if kind == "end":
            pool.free_request(held.pop(i))
            continue
        r = requests[i]
        p, o, keys = r.prompt_tokens, r.output_tokens, r.block_keys
        # get_computed_blocks: the leading cached run, at most (P - 1) // B blocks.
        hit_blocks = pool.lookup(keys, (p - 1) // block_tokens)
        # allocate_slots: touch the hits first, then take new blocks from the head.
        pool.touch(hit_blocks)
        total = math.ceil((p + o - 1) / block_tokens)
        new_blocks, lent[i] = pool.allocate(total - len(hit_blocks))
        blocks = hit_blocks + new_blocks
        # cache_full_blocks: the prompt's full blocks (the recomputed last one too), then the
        # full blocks the generated tokens fill; the last partial block keeps no hash.
        generated = (p + o - 1) // block_tokens - len(keys)
        pool.cache(blocks, keys, len(hit_blocks), generated)
        held[i] = blocks
        hits[i] = len(hit_blocks) * block_tokens
    return Prediction(
        capacity_blocks=capacity_blocks,
        block_tokens=block_tokens,
        hit_tokens=tuple(hits),
        query_tokens=tuple(r.prompt_tokens for r in requests),
        lent_blocks=tuple(lent),
        pool_blocks=len(pool.key) if capacity_blocks is None else capacity_blocks,
    )


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


def trace_cache_requests(trace: Trace, server_block_tokens: int) -> list[CacheRequest]:
    """The model's view of every request of ``trace`` (file order), ids ``"line-{n}"``."""
    return [
        CacheRequest(
            request_id=f"line-{r.line}",
            block_keys=server_block_keys(r, trace.block_tokens, server_block_tokens),
            prompt_tokens=r.input_length,
            output_tokens=r.output_length,
        )
        for r in trace.requests
    ]
