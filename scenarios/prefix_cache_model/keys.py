"""Block identities: what the model replays, as vLLM chains them (rule 1 of
:mod:`scenarios.prefix_cache_model`), and the pool sizes a server reports."""

from __future__ import annotations

import functools
import hashlib
import struct
from collections.abc import Sequence
from dataclasses import dataclass

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


def content_block_keys(token_ids: Sequence[int], block_tokens: int) -> tuple[int, ...]:
    """Identities of the full blocks of a prompt given by its tokens: key i is a 128-bit
    BLAKE2b digest chained over blocks 0..i (the parent's key, then block i's token IDs as
    4-byte little-endian integers), so two prompts' key i agree iff their first
    (i + 1) × ``block_tokens`` tokens do, as vLLM's block hashes. ``len(token_ids) //
    block_tokens`` keys, each ≥ 0. The KV-event comparison keys recorded blocks the same way
    (from the token IDs each ``BlockStored`` carries), since vLLM's own hashes are seeded per
    process.

    Raises:
        ValueError: ``block_tokens`` < 1 or a token ID outside [0, 2^32).
    """
    if block_tokens < 1:
        raise ValueError(f"block_tokens must be ≥ 1, got {block_tokens}")
    keys: list[int] = []
    parent = 0
    for start in range(0, len(token_ids) // block_tokens * block_tokens, block_tokens):
        parent = chain_block(parent, token_ids[start : start + block_tokens])
        keys.append(parent)
    return tuple(keys)


def chain_block(parent: int, token_ids: Sequence[int]) -> int:
    """The identity of the block of ``token_ids`` after the prefix whose identity is
    ``parent`` (0 for none): :func:`content_block_keys`'s link.

    Raises:
        ValueError: a token ID outside [0, 2^32).
    """
    try:
        data = struct.pack(f"<{len(token_ids)}I", *token_ids)
    except struct.error:
        raise ValueError("token IDs must be integers in [0, 2^32)") from None
    digest = hashlib.blake2b(parent.to_bytes(16, "little") + data, digest_size=16).digest()
    return int.from_bytes(digest, "little")


#: Most server blocks the model keys for one trace (2**25 = 33,554,432): each costs about
#: 230 bytes while it is replayed (measured: 1.02 M keys took 235 MB more on an AMD EPYC),
#: so ≈ 7.5 GiB at most; Mooncake's traces key 1-2 M blocks of 128 tokens.
MAX_MODEL_BLOCKS = 2**25


def check_model_blocks(trace: Trace, server_block_tokens: int) -> None:
    """Refuse a trace the model cannot key within :data:`MAX_MODEL_BLOCKS`.

    Raises:
        ValueError: the prompts hold more than :data:`MAX_MODEL_BLOCKS` full server blocks
            (the message gives the count: a larger block or a smaller token scale helps).
    """
    blocks = sum(r.input_length // server_block_tokens for r in trace.requests)
    if blocks > MAX_MODEL_BLOCKS:
        raise ValueError(
            f"the trace's prompts fill {blocks:,} blocks of {server_block_tokens} tokens, more "
            f"than the {MAX_MODEL_BLOCKS:,} the prefix-cache model holds: give a larger "
            "block or a smaller token scale"
        )


def trace_cache_requests(trace: Trace, server_block_tokens: int) -> list[CacheRequest]:
    """The model's view of every request of ``trace`` (file order), ids ``"line-{n}"``.

    Raises:
        ValueError: more blocks than the model holds (:func:`check_model_blocks`).
    """
    check_model_blocks(trace, server_block_tokens)
    return [
        CacheRequest(
            request_id=f"line-{r.line}",
            block_keys=server_block_keys(r, trace.block_tokens, server_block_tokens),
            prompt_tokens=r.input_length,
            output_tokens=r.output_length,
        )
        for r in trace.requests
    ]
