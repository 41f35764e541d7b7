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

from scenarios.prefix_cache_model.keys import (
    CacheRequest,
    capacity_blocks_for_tokens,
    chain_block,
    content_block_keys,
    server_block_keys,
    trace_cache_requests,
    usable_blocks,
)
from scenarios.prefix_cache_model.replay import Prediction, predict_hits

__all__ = [
    "CacheRequest",
    "Prediction",
    "capacity_blocks_for_tokens",
    "chain_block",
    "content_block_keys",
    "predict_hits",
    "server_block_keys",
    "trace_cache_requests",
    "usable_blocks",
]
