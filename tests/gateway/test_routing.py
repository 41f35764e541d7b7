"""The routing policies (gateway/routing): keys, ring, and decisions on hand-made sequences."""

from __future__ import annotations

import hashlib
import struct

import pytest

from gateway.routing import (
    Decision,
    HashRing,
    PrefixKeys,
    ReplicaView,
    Router,
    load_bound,
    parse_policy,
)
from gateway.routing.keys import key_hex


def views(*loads: int, down: tuple[int, ...] = ()) -> list[ReplicaView]:
    return [ReplicaView(n, i not in down) for i, n in enumerate(loads)]


# ---- keys -------------------------------------------------------------------------------


def test_token_key_is_blake2b_of_the_first_blocks_little_endian() -> None:
    ids = list(range(1000, 1600))  # 600 tokens: 4 full blocks of 128 = the first 512
    expected = int.from_bytes(
        hashlib.blake2b(
            struct.pack("<512I", *ids[:512]), digest_size=8, person=b"routing-tokens"
        ).digest(),
        "little",
    )
    assert PrefixKeys().of_tokens(ids) == expected


def test_token_key_is_pinned_across_releases() -> None:
    # The value of one key, written down once: a change of hash, encoding or block rule
    # would silently re-place every group of a recorded fleet run.
    assert key_hex(PrefixKeys().of_tokens(list(range(512)))) == "650b225e2036f1f0"
    assert key_hex(PrefixKeys().of_tokens(list(range(600)))) == "650b225e2036f1f0"


def test_token_key_ignores_tokens_past_the_prefix_and_not_before() -> None:
    keys = PrefixKeys(prefix_blocks=2)
    base = list(range(300))
    later = [*base[:256], 9, *base[257:]]  # token 256: past 2 × 128
    earlier = [7, *base[1:]]
    assert keys.of_tokens(later) == keys.of_tokens(base)
    assert keys.of_tokens(earlier) != keys.of_tokens(base)


def test_token_key_of_a_prompt_with_fewer_full_blocks_covers_those_blocks() -> None:
    keys = PrefixKeys(prefix_blocks=4)
    assert keys.of_tokens(list(range(200))) == keys.of_tokens(list(range(128)))
    # Shorter than one block: the whole prompt.
    assert keys.of_tokens([1, 2, 3]) != keys.of_tokens([1, 2])


def test_text_key_covers_the_first_prefix_chars() -> None:
    keys = PrefixKeys(prefix_chars=10)
    assert keys.of_text("0123456789abc") == keys.of_text("0123456789xyz")
    assert keys.of_text("x123456789abc") != keys.of_text("0123456789abc")


def test_token_and_text_keys_are_separate_domains() -> None:
    keys = PrefixKeys()
    text = struct.pack("<2I", 104, 105).decode("latin-1")
    assert keys.of_tokens([104, 105]) != keys.of_text(text)


def test_body_keys_of_each_request_shape() -> None:
    keys = PrefixKeys(prefix_chars=64)
    ids = list(range(256))
    assert keys.of_body({"prompt": ids}) == keys.of_tokens(ids)
    assert keys.of_body({"prompt": [ids, [1]]}) == keys.of_tokens(ids)
    assert keys.of_body({"prompt": "hello"}) == keys.of_text("hello")
    chat = {
        "messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}]
    }
    assert keys.of_body(chat) == keys.of_text("system\nbe brief\nuser\nhi\n")
    parts = {"messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}]}
    assert keys.of_body(parts) == keys.of_text("user\nhi\n")
    assert keys.of_body({"model": "m"}) is None
    assert keys.of_body({"prompt": [-1, 2]}) is None
    assert keys.of_body({"prompt": []}) is None
    assert keys.of_body({"messages": ["not an object"]}) is None


def test_raw_json_bodies_are_keyed_like_parsed_ones() -> None:
    keys = PrefixKeys()
    assert keys.of_json(b'{"prompt": [1, 2, 3]}') == keys.of_tokens([1, 2, 3])
    assert keys.of_json(b"not json") is None
    assert keys.of_json(b"\xff\xfe") is None
    assert keys.of_json(b"[1, 2]") is None


def test_prefix_keys_refuse_sizes_below_one() -> None:
    with pytest.raises(ValueError, match="prefix_blocks must be ≥ 1"):
        PrefixKeys(prefix_blocks=0)


# ---- ring -------------------------------------------------------------------------------


def test_ring_successors_list_every_replica_once_owner_first() -> None:
    ring = HashRing(3)
    for key in (0, 2**63, 2**64 - 1, 12345):
        order = ring.successors(key)
        assert sorted(order) == [0, 1, 2]
        assert order[0] == ring.owner(key)


def test_ring_shares_sum_to_one_and_are_even_with_160_points() -> None:
    shares = HashRing(2).shares()
    assert sum(shares) == pytest.approx(1.0)
    assert all(0.4 < s < 0.6 for s in shares)


def test_one_replica_owns_everything() -> None:
    assert HashRing(1).successors(99) == (0,)


# ---- load bound -------------------------------------------------------------------------


def test_load_bound_by_hand() -> None:
    # ⌈(1 + ε)(L + 1) / n⌉
    assert load_bound(0, 2, 0.25) == 1  # ⌈1.25 × 1 / 2⌉ = ⌈0.625⌉
    assert load_bound(1, 2, 0.25) == 2  # ⌈1.25 × 2 / 2⌉ = ⌈1.25⌉
    assert load_bound(2, 2, 0.25) == 2  # ⌈1.25 × 3 / 2⌉ = ⌈1.875⌉
    assert load_bound(1, 2, 0.0) == 1  # ⌈2 / 2⌉
    assert load_bound(9, 1, 0.1) == 11  # exactly 11, where float arithmetic gives 11.000…02


# ---- decisions --------------------------------------------------------------------------


def key_homed_on(ring: HashRing, replica: int) -> int:
    """A key whose own replica is ``replica`` (found by trying keys in order)."""
    return next(k for k in range(0, 2**64, 2**56) if ring.owner(k) == replica)


def test_prefix_hash_sends_the_same_key_to_the_same_replica() -> None:
    router = Router("prefix-hash", 4)
    key = PrefixKeys().of_tokens(list(range(600)))
    first = router.decide(views(0, 0, 0, 0), key)
    assert first is not None and first.why == "matched"
    for loads in ((0, 0, 0, 0), (1, 1, 1, 1), (2, 2, 2, 2)):
        again = router.decide(views(*loads), key)
        assert again == first


def test_prefix_hash_passes_a_key_on_when_its_replica_is_at_the_bound() -> None:
    router = Router("prefix-hash", 2, epsilon=0.25)
    assert router.ring is not None
    key = key_homed_on(router.ring, 0)
    key_1 = key_homed_on(router.ring, 1)
    # Replica 0 holds 1, replica 1 none: bound ⌈1.25 × 2 / 2⌉ = 2, 1 + 1 ≤ 2: matched.
    assert router.decide(views(1, 0), key) == Decision(0, "prefix-hash", key_hex(key), "matched", 0)
    # Replica 0 holds 2: bound ⌈1.25 × 3 / 2⌉ = 2, 2 + 1 > 2: passed on to replica 1.
    assert router.decide(views(2, 0), key) == Decision(
        1, "prefix-hash", key_hex(key), "passed-on-load", 0
    )
    # ε = 0 is the strictest: replica 0 holding 1 beside an idle replica already passes on.
    strict = Router("prefix-hash", 2, epsilon=0.0)
    passed = strict.decide(views(1, 0), key)
    assert passed is not None and (passed.replica, passed.why) == (1, "passed-on-load")
    # A key of replica 1 is unaffected by replica 0's load.
    matched = router.decide(views(2, 0), key_1)
    assert matched is not None and (matched.replica, matched.why) == (1, "matched")


def test_prefix_hash_an_open_breaker_moves_keys_and_they_come_back() -> None:
    router = Router("prefix-hash", 3)
    assert router.ring is not None
    key = key_homed_on(router.ring, 1)
    successor = router.ring.successors(key)[1]
    moved = router.decide(views(0, 0, 0, down=(1,)), key)
    assert moved == Decision(successor, "prefix-hash", key_hex(key), "passed-on-breaker", 1)
    back = router.decide(views(0, 0, 0), key)
    assert back == Decision(1, "prefix-hash", key_hex(key), "matched", 1)


def test_prefix_hash_without_a_key_places_least_loaded() -> None:
    decision = Router("prefix-hash", 2).decide(views(3, 1), None)
    assert decision == Decision(1, "prefix-hash", None, "least-loaded")


def test_round_robin_takes_replicas_in_turn_skipping_unavailable_ones() -> None:
    router = Router("round-robin", 3)
    picks = [router.decide(views(0, 0, 0, down=(1,))) for _ in range(4)]
    assert [d.replica for d in picks if d] == [0, 2, 0, 2]
    picks = [router.decide(views(0, 0, 0)) for _ in range(3)]
    assert [d.replica for d in picks if d] == [0, 1, 2]
    assert all(d is not None and d.why == "round-robin" and d.key is None for d in picks)


def test_least_loaded_takes_the_fewest_ties_rotating_after_the_last_choice() -> None:
    router = Router("least-loaded", 3)
    got = [router.decide(views(*loads)) for loads in ((1, 0, 0), (0, 0, 0), (0, 0, 0), (0, 5, 0))]
    # (1,0,0): 1 (fewest, first of the tie 1,2); then ties start after 1 → 2; then → 0;
    # (0,5,0) from 1: order 1,2,0 → 2 (0 in flight, first of the tie 2,0).
    assert [d.replica for d in got if d] == [1, 2, 0, 2]
    assert all(d is not None and d.why == "least-loaded" for d in got)


def test_no_available_replica_gives_none() -> None:
    for policy in ("round-robin", "least-loaded", "prefix-hash"):
        assert Router(policy, 2).decide(views(0, 0, down=(0, 1)), 5) is None


def test_bad_inputs_are_refused_with_one_line() -> None:
    with pytest.raises(ValueError, match="unknown routing policy 'hash'"):
        parse_policy("hash")
    with pytest.raises(ValueError, match="at least 1 replica"):
        Router("round-robin", 0)
    with pytest.raises(ValueError, match="3 replica views for a fleet of 2"):
        Router("round-robin", 2).decide(views(0, 0, 0))
