"""The block-by-block comparison of recorded KV-cache events with the prefix-cache model, on
hand-written event rows and on events recorded from a real vLLM (tests/fixtures/kv_events/).

Hand-made case: blocks of B = 4 tokens, a pool of 3 usable blocks, requests A (tokens 1–9)
then B (tokens 11–19), 1 output token each: each holds ceil(9 / 4) = 3 blocks and caches its
2 full prompt blocks. A takes blocks 0, 1, 2 (A0, A1, its partial block); freeing puts the
partial block at the queue's head and A1, A0 at its tail (reverse order): [p, A1, A0]. B then
takes all three, evicting A1 then A0, and caches B0, B1. vLLM reports the same: stored A0 A1,
removed A1, removed A0, stored B0 B1 (its hashes are its own: 901, 902, …).
"""

from __future__ import annotations

from pathlib import Path

from analysis.kv_compare import compare_blocks
from analysis.kv_events import UNKNOWN, name_blocks, read_kv_events
from analysis.load import read_jsonl
from loadgen.runformat import KvEventRow
from scenarios.prefix_cache_model import (
    CacheRequest,
    chain_block,
    content_block_keys,
    usable_blocks,
)
from tests.support import kv_events_case as case

A_TOKENS = list(range(1, 10))
B_TOKENS = list(range(11, 20))
REQUESTS = [
    CacheRequest("A", content_block_keys(A_TOKENS, 4), 9, 1),
    CacheRequest("B", content_block_keys(B_TOKENS, 4), 9, 1),
]
FIXTURES = Path(__file__).parents[1] / "fixtures/kv_events"


def stored(seq: int, hashes: list[int], tokens: list[int], parent: int | None = None) -> KvEventRow:
    return KvEventRow(event="stored", seq=seq, recv_ns=seq, block_hashes=hashes,
                      parent_block_hash=parent, token_ids=tokens, block_size=4)  # fmt: skip


def removed(seq: int, *hashes: int) -> KvEventRow:
    return KvEventRow(event="removed", seq=seq, recv_ns=seq, block_hashes=list(hashes))


def engine_rows(first_removed: int = 902, b_tokens: list[int] = B_TOKENS) -> list[KvEventRow]:
    second = 901 if first_removed == 902 else 902
    return [
        stored(0, [901, 902], A_TOKENS[:8]),
        removed(1, first_removed),
        removed(2, second),
        stored(3, [903, 904], b_tokens[:8]),
    ]


def test_blocks_are_named_by_their_token_content() -> None:
    named = name_blocks(engine_rows())
    a0 = chain_block(0, A_TOKENS[:4])
    assert [b.key for b in named.blocks] == [
        a0,
        chain_block(a0, A_TOKENS[4:8]),
        REQUESTS[0].block_keys[1],
        a0,
        *REQUESTS[1].block_keys,
    ]
    assert named.blocks[1].parent == a0


def test_the_engines_blocks_match_the_models() -> None:
    comparison = compare_blocks(name_blocks(engine_rows()), REQUESTS, 3, 4)
    assert comparison.matches, comparison
    assert (comparison.stored_predicted, comparison.stored_recorded, comparison.stored_matched) == (
        4,
        4,
        4,
    )
    assert (
        comparison.removed_predicted,
        comparison.removed_recorded,
        comparison.removed_matched,
    ) == (2, 2, 2)


def test_evictions_in_another_order_diverge_at_the_first_removal() -> None:
    """The engine evicting A0 before A1 (head-first LRU broken) is named: the first removal,
    by B's allocation, expected A's block 1, got its block 0."""
    comparison = compare_blocks(name_blocks(engine_rows(first_removed=901)), REQUESTS, 3, 4)
    d = comparison.divergence
    assert d is not None and not comparison.matches
    assert (d.kind, d.request_id, d.block, d.position) == ("removed", "B", 1, 0)
    assert (d.expected, d.recorded) == ("prompt block 1 of A", "prompt block 0 of A")


def test_a_stored_block_with_other_tokens_is_named_with_its_request_and_block() -> None:
    """B's token 17 (block 1) differs on the engine's side: B's block 1 diverges."""
    other = [*B_TOKENS[:6], 99, *B_TOKENS[7:]]
    d = compare_blocks(name_blocks(engine_rows(b_tokens=other)), REQUESTS, 3, 4).divergence
    assert d is not None
    assert (d.kind, d.request_id, d.block, d.position) == ("stored", "B", 1, 1)
    assert (d.expected, d.recorded) == (
        "prompt block 1 of B",
        "a block of no prompt (generated tokens)",
    )


def test_a_gap_makes_the_comparison_incomplete() -> None:
    rows = engine_rows()
    rows.insert(1, KvEventRow(event="gap", seq=1, recv_ns=1, missing=2))
    rows[2:] = [removed(3, 902), stored(4, [903, 904], B_TOKENS[:8])]
    comparison = compare_blocks(name_blocks(rows), REQUESTS, 3, 4)
    assert not comparison.complete and not comparison.matches
    assert "messages 1–2 lost" in comparison.notes
    assert comparison.divergence is not None  # A0's removal never arrived


def test_a_block_whose_parent_was_never_stored_cannot_be_named() -> None:
    named = name_blocks([stored(5, [950], B_TOKENS[4:8], parent=777)])
    assert named.blocks[0].key == UNKNOWN
    comparison = compare_blocks(named, REQUESTS[1:], 3, 4)
    assert not comparison.complete


def test_events_recorded_from_a_real_vllm_match_the_model_block_by_block() -> None:
    """The events a real embedded vLLM 0.32.0 published for tests/support/kv_events_case.py
    (recorded by tests/integration/test_kv_events_real.py): a stores 5 blocks, b 1 (it hits
    4), c and d 5 each (the pool's 17 blocks still hold them, the partial blocks reused);
    e's 6 blocks evict 5, least recently freed first: a's block 4, b's block 4, then the
    shared blocks 3, 2, 1; a's return hits block 0, evicts 4 more and stores 4."""
    recorded = read_kv_events(FIXTURES / "recorded_events.jsonl")
    comparison = compare_blocks(recorded, case.requests(), usable_blocks(case.BLOCKS), 128)
    assert comparison.matches, comparison
    assert (comparison.stored_recorded, comparison.removed_recorded) == (25, 9)


def test_a_recorded_eviction_left_out_is_named() -> None:
    """The same events without the first removal: the comparison names it."""
    rows = read_jsonl(FIXTURES / "recorded_events.jsonl", KvEventRow).rows
    first = next(i for i, r in enumerate(rows) if r.event == "removed")
    named = name_blocks(rows[:first] + rows[first + 1 :])
    d = compare_blocks(named, case.requests(), usable_blocks(case.BLOCKS), 128).divergence
    assert d is not None and (d.kind, d.request_id, d.position) == ("removed", "e-4", 0)
