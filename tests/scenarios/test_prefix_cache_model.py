"""scenarios.prefix_cache_model: vLLM's prefix-cache rules replayed offline, on hand-made
request sequences whose hits are derived by hand in each test's docstring.

Notation: blocks of B = 4 tokens; O = 1 output token unless said, so a request of P prompt
tokens holds T = ceil((P + O − 1) / 4) blocks, caches its P // 4 full prompt blocks, and hits
at most (P − 1) // 4 leading blocks. The free queue is written head first; "p" is a request's
partial last block (no hash: freed to the head), a cached block is written by its key.
"""

from __future__ import annotations

import itertools
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest

from scenarios.prefix_cache_model import (
    CacheRequest,
    capacity_blocks_for_tokens,
    predict_hits,
    server_block_keys,
    trace_cache_requests,
    usable_blocks,
)
from scenarios.tokens import TokenSpace
from scenarios.trace_scale import scale_trace
from scenarios.traces import TraceRequest, load_trace, prompt_token_ids

#: The Mooncake FAST'25 synthetic trace (Apache-2.0; see the NOTICE.md beside it).
SAMPLE = Path(__file__).parents[1] / "fixtures/traces/mooncake_fast25_synthetic_trace.jsonl"

A1, A2, A3, B1, C1, X1 = 11, 12, 13, 21, 31, 41


def req(name: str, keys: tuple[int, ...], prompt: int, output: int = 1) -> CacheRequest:
    return CacheRequest(name, keys, prompt, output)


SIX = [
    req("r0", (A1,), 5),
    req("r1", (B1,), 5),
    req("r2", (A1,), 5),
    req("r3", (C1,), 5),
    req("r4", (B1,), 5),
    req("r5", (A1,), 5),
]
# r2 runs while r3 and r4 start and end.
SIX_EVENTS = [
    ("start", 0), ("end", 0), ("start", 1), ("end", 1), ("start", 2), ("start", 3),
    ("end", 3), ("start", 4), ("end", 4), ("end", 2), ("start", 5), ("end", 5),
]  # fmt: skip


def test_six_requests_unbounded() -> None:
    """Unbounded: nothing is evicted; each P = 5 request hits at most 1 block.

    r0 a1 miss, r1 b1 miss, r2 a1 hit (4), r3 c1 miss, r4 b1 hit (4), r5 a1 hit (4):
    12 hit tokens of 6 × 5 = 30 queried.
    """
    p = predict_hits(SIX, None, 4, SIX_EVENTS)
    assert p.hit_tokens == (0, 0, 4, 0, 4, 4)
    assert p.query_tokens == (5,) * 6
    assert p.hit_rate == pytest.approx(12 / 30)
    assert p.lent_blocks == (0,) * 6


def test_six_requests_four_blocks_a_running_request_keeps_its_block() -> None:
    """Capacity 4 (blocks 0–3, queue [0 1 2 3]):

    - s0: miss; takes 0 = a1, 1 = p; queue [2 3].  e0: p to the head, a1 to the tail:
      [1 2 3 0].
    - s1: b1 miss; takes 1 = b1, 2 = p; [3 0].  e1: [2 3 0 1] (a1 is now the least
      recently freed cached block, b1 the most).
    - s2: a1 hits block 0 (4 tokens); touching it takes it out of the queue: [2 3 1]; takes
      2 for its p: [3 1].
    - s3 (r2 running): c1 miss; takes 3 and then 1, evicting **b1** — the LRU block a1 is held
      by r2 and cannot be evicted; 3 = c1, 1 = p; [].  e3: [1 3].
    - s4: b1 miss (evicted at s3); takes 1 = b1, 3 = p, evicting c1; [].  e4: [3 1].
    - e2: r2's p (block 2) to the head, a1 (block 0) to the tail: [2 3 1 0].
    - s5: a1 hits block 0 (4).

    Hits (0, 0, 4, 0, 0, 4): 8 of 30.
    """
    p = predict_hits(SIX, 4, 4, SIX_EVENTS)
    assert p.hit_tokens == (0, 0, 4, 0, 0, 4)
    assert p.hit_rate == pytest.approx(8 / 30)
    assert p.lent_blocks == (0,) * 6


def test_six_requests_two_blocks_lend_what_the_pool_lacks() -> None:
    """Capacity 2 (queue [0 1]):

    - s0: 0 = a1, 1 = p; [].  e0: [1 0].
    - s1: b1 miss; takes 1 and 0 (a1 evicted): 1 = b1, 0 = p; [].  e1: [0 1].
    - s2: a1 miss; takes 0 and 1 (b1 evicted): 0 = a1, 1 = p; [].
    - s3 (r2 holds both blocks): c1 miss, no free block: both of its blocks are lent
      (outside the pool, dropped at e3, so c1 is gone after it).
    - s4: b1 miss; lent 2 again.
    - e2: [1 0] with a1 in block 0.   s5: a1 hits (4).

    Hits (0, 0, 0, 0, 0, 4): 4 of 30; r3 and r4 were lent 2 blocks each.
    """
    p = predict_hits(SIX, 2, 4, SIX_EVENTS)
    assert p.hit_tokens == (0, 0, 0, 0, 0, 4)
    assert p.hit_rate == pytest.approx(4 / 30)
    assert p.lent_blocks == (0, 0, 0, 2, 2, 0)
    assert p.short_requests == 2


def test_last_block_is_recomputed() -> None:
    """A repeated prompt of whole blocks hits all but its last block: P = 8 → at most
    (8 − 1) // 4 = 1 block (4 tokens); P = 9 (2 full blocks + 1 token) → 2 blocks (8).
    With vLLM CPU's B = 128 a repeated 1,024-token prompt hits 7 × 128 = 896 tokens (as
    measured on vLLM 0.32.0 CPU); a 4-token prompt (one block) never hits."""
    two_full = [req("a", (A1, A2), 8), req("b", (A1, A2), 8)]
    assert predict_hits(two_full, None, 4).hit_tokens == (0, 4)
    plus_one = [req("a", (A1, A2), 9), req("b", (A1, A2), 9)]
    assert predict_hits(plus_one, None, 4).hit_tokens == (0, 8)
    keys = tuple(range(8))
    assert predict_hits([req("a", keys, 1024), req("b", keys, 1024)], None, 128).hit_tokens == (
        0,
        896,
    )
    assert predict_hits([req("a", (A1,), 4), req("b", (A1,), 4)], None, 4).hit_tokens == (0, 0)


def test_recomputed_last_block_occupies_a_block_beside_its_cached_copy() -> None:
    """Capacity 3, sequential. r0 (a1 a2, P = 8): 0 = a1, 1 = a2; queue [2]; e0 → [2 1 0].
    r1 (same): hits a1 (block 0) only; takes block 2 to recompute a2: a2 now has two
    holders (1 and 2); [1].  e1: reversed, both hashed → [1 2 0].  r2 (x1, P = 5): takes 1
    and 2 (both a2 copies evicted).  r3 (a1 a2, P = 9): a1 hits, a2 misses → 4."""
    seq = [req("r0", (A1, A2), 8), req("r1", (A1, A2), 8), req("r2", (X1,), 5)]
    seq.append(req("r3", (A1, A2), 9))
    assert predict_hits(seq, 3, 4).hit_tokens == (0, 4, 0, 4)


def test_a_freed_request_is_evicted_tail_first() -> None:
    """Capacity 4. r0 (a1 a2 a3, P = 13): 0 = a1, 1 = a2, 2 = a3, 3 = p.  Freed in reverse:
    p to the head, then a3, a2, a1 appended: [3 2 1 0].  r1 (x1, P = 5) takes 3 (p) and 2,
    evicting **a3** (the tail block), not a1.  r2 (a1 a2 a3, P = 13; may hit 3 blocks): a1,
    a2 hit, a3 misses → 8.  Freed in forward order a1 would have gone and r2 would hit 0."""
    seq = [req("r0", (A1, A2, A3), 13), req("r1", (X1,), 5), req("r2", (A1, A2, A3), 13)]
    assert predict_hits(seq, 4, 4).hit_tokens == (0, 0, 8)


def test_generated_blocks_are_cached_and_queue_behind_older_blocks() -> None:
    """Capacity 4. r0 (c1, P = 5): 0 = c1, 1 = p; e0 → [1 2 3 0].  r1 (a1, P = 5, O = 8):
    P + O − 1 = 12 tokens need 3 blocks: 1 = a1, 2 and 3 full of generated tokens (hashed);
    [0].  e1: all three hashed → appended in reverse: [0 3 2 1].  r2 (x1, P = 5) takes 0 and
    3: **c1 is evicted** before r1's generated blocks (had generated blocks no hash, they would
    have gone to the head and c1 would survive).  r3 (c1) misses; r4 (a1) hits block 1 (4)."""
    seq = [req("r0", (C1,), 5), req("r1", (A1,), 5, output=8), req("r2", (X1,), 5)]
    seq += [req("r3", (C1,), 5), req("r4", (A1,), 5)]
    assert predict_hits(seq, 4, 4).hit_tokens == (0, 0, 0, 0, 4)


def test_events_must_start_and_end_each_request_once() -> None:
    two = [req("a", (A1,), 5), req("b", (A1,), 5)]
    for events in (
        [("start", 0), ("end", 0), ("start", 1)],
        [("end", 0), ("start", 0), ("start", 1), ("end", 1)],
        [("start", 0), ("start", 0), ("end", 0), ("start", 1), ("end", 1)],
        [("start", 0), ("end", 0), ("start", 2), ("end", 2)],
        [("begin", 0), ("end", 0), ("start", 1), ("end", 1)],
    ):
        with pytest.raises(ValueError):
            predict_hits(two, 4, 4, events)


def test_block_keys_must_match_the_prompt() -> None:
    with pytest.raises(ValueError, match="2 block keys for a prompt of 5 tokens"):
        predict_hits([req("a", (A1, A2), 5)], 4, 4)


def test_capacity_from_tokens_leaves_out_the_null_block() -> None:
    # 1 GiB on vLLM CPU: 146 blocks × 128 = 18,688 tokens; one is the null block.
    assert capacity_blocks_for_tokens(18_688, 128) == 145
    assert usable_blocks(146) == 145


def trace_req(ids: tuple[int, ...], length: int) -> TraceRequest:
    return TraceRequest(line=1, timestamp_ms=0, input_length=length, output_length=1, hash_ids=ids)


@pytest.mark.parametrize(("trace_block", "server_block"), [(8, 4), (4, 8), (6, 4), (8, 8)])
def test_keys_agree_iff_generated_token_prefixes_agree(trace_block: int, server_block: int) -> None:
    """For every pair of requests over a small id alphabet, key i agrees iff the generated
    prompts agree on tokens [0, (i+1)·B_server): checked against the real tokens."""
    space = TokenSpace()
    length = 3 * trace_block
    requests = [
        trace_req(ids, length - (k % trace_block))
        for k, ids in enumerate(itertools.product((0, 1), repeat=3))
    ]
    for a, b in itertools.combinations(requests, 2):
        ka = server_block_keys(a, trace_block, server_block)
        kb = server_block_keys(b, trace_block, server_block)
        assert len(ka) == a.input_length // server_block
        ta = prompt_token_ids(a, 7, trace_block, space)
        tb = prompt_token_ids(b, 7, trace_block, space)
        for i in range(min(len(ka), len(kb))):
            end = (i + 1) * server_block
            assert (ka[i] == kb[i]) == bool(np.array_equal(ta[:end], tb[:end]))
    # Keys of different block indexes never agree (vLLM's hashes chain over the length).
    keys = server_block_keys(trace_req((0, 0, 0), length), trace_block, server_block)
    assert len(set(keys)) == len(keys)


def test_sample_maximum_hit_rate_at_the_trace_block() -> None:
    """The unbounded maximum of the Mooncake sample with 512-token blocks (the paper gives a
    66 % prefix-cache ratio; the model's cap at P − 1 and whole blocks count a little less):
    pinned to the value the model gives so a change in the rules shows."""
    trace = load_trace(SAMPLE)
    prediction = predict_hits(trace_cache_requests(trace, 512), None, 512)
    assert prediction.hit_rate == pytest.approx(0.6504, abs=5e-5)
    # vLLM CPU's 128-token blocks lose less at each prompt's cut: 65.10 %.
    at_128 = predict_hits(trace_cache_requests(trace, 128), None, 128)
    assert at_128.hit_rate == pytest.approx(0.6510, abs=5e-5)
    scaled = scale_trace(trace, Fraction(1, 16))
    small = predict_hits(trace_cache_requests(scaled, 32), None, 32)
    assert 0.6 < small.hit_rate < 0.7


def test_unbounded_footprint_is_the_smallest_capacity_that_never_evicts() -> None:
    """The six requests sequentially, unbounded: r0 makes blocks 0 (a1) and 1 (p); p is
    reused by every later request, so r1 makes 1 block (b1), r3 one (c1): 4 blocks. At 4
    blocks nothing is evicted (same hits as unbounded). At 3 (queue [0 1 2]): r0 0 = a1,
    1 = p → [1 2 0]; r1 takes 1, 2 (1 = b1, 2 = p) → [2 0 1]; r2 hits a1, takes 2 → [2 1 0];
    r3 takes 2 and 1, evicting b1 (2 = c1, 1 = p) → [1 0 2]; r4 misses b1, takes 1 and 0,
    evicting a1 → [0 2 1]; r5 misses a1. Hits (0, 0, 4, 0, 0, 0)."""
    unbounded = predict_hits(SIX, None, 4)
    assert unbounded.pool_blocks == 4
    assert predict_hits(SIX, 4, 4).hit_tokens == unbounded.hit_tokens == (0, 0, 4, 0, 4, 4)
    assert predict_hits(SIX, 3, 4).hit_tokens == (0, 0, 4, 0, 0, 0)


def test_sample_at_its_footprint_reaches_the_maximum() -> None:
    requests = trace_cache_requests(load_trace(SAMPLE), 512)
    unbounded = predict_hits(requests, None, 512)
    at_footprint = predict_hits(requests, unbounded.pool_blocks, 512)
    assert at_footprint.hit_tokens == unbounded.hit_tokens
    assert at_footprint.short_requests == 0


@pytest.mark.parametrize("block", [512, 128])
def test_sequential_fast_replay_equals_the_general_replay(block: int) -> None:
    """``events=None`` with a bounded pool takes a faster path; the general replay given the
    same order as explicit events must agree request by request (full sample, sizes from
    starved to ample; 512 and 128-token blocks, the latter on a 1/4 slice to stay fast)."""
    trace = load_trace(SAMPLE)
    requests = trace_cache_requests(trace, block)
    if block == 128:
        requests = requests[:1000]
    events = [(kind, i) for i in range(len(requests)) for kind in ("start", "end")]
    for capacity in (40, 400, 4_000, 40_000):
        fast = predict_hits(requests, capacity, block)
        general = predict_hits(requests, capacity, block, events)
        assert fast == general
