"""scenarios.fleet: the fleet cache model on hand-made request sequences for 2 replicas.

Notation as in test_prefix_cache_model: blocks of B = 4 tokens; every request has a 9-token
prompt (2 full blocks, hashed, and a partial one) and 1 output token, so it holds
ceil((9 + 1 − 1) / 4) = 3 blocks and may hit its 2 full blocks ((9 − 1) // 4 = 2): a repeat
that finds its group cached hits 8 of its 9 tokens. Each replica has C = 3 usable blocks:
one request's worth, so a replica that serves another group in between forgets the first
(the second request takes the 3 blocks the first freed). Groups are A (blocks A1, A2) and B
(B1, B2).
"""

from __future__ import annotations

import pytest

from gateway.routing import HashRing
from scenarios.fleet.cache_aware import cache_aware_rule
from scenarios.fleet.model import (
    FLEET_POLICIES,
    FleetOptions,
    imbalance,
    parse_fleet_policies,
    predict_fleet,
)
from scenarios.fleet.requests import FleetRequest, closed_loop_events, token_fleet_request
from scenarios.fleet.rules import gateway_rule
from scenarios.fleet.simulate import simulate
from scenarios.prefix_cache_model import CacheRequest, content_block_keys

A1, A2, B1, B2 = 11, 12, 21, 22
RING = HashRing(2)
#: Routing keys whose own replica on a 2-replica ring is 0, resp. 1 (found by trying keys).
KEY_ON_0 = next(k for k in range(0, 2**64, 2**56) if RING.owner(k) == 0)
KEY_ON_1 = next(k for k in range(0, 2**64, 2**56) if RING.owner(k) == 1)
KEY_ON_0_TOO = next(k for k in range(KEY_ON_0 + 1, 2**64, 2**55) if RING.owner(k) == 0)


def group(name: str, key: int) -> FleetRequest:
    blocks = {"A": (A1, A2), "B": (B1, B2)}[name[0]]
    return FleetRequest(CacheRequest(name, blocks, 9, 1), key, f"text {name[0]}")


def abab(key_a: int = KEY_ON_0, key_b: int = KEY_ON_1) -> list[FleetRequest]:
    return [group(n, key_a if n[0] == "A" else key_b) for n in ("A-1", "B-1", "A-2", "B-2")]


def rate(policy: str, requests: list[FleetRequest], **kw: object) -> float:
    prediction = predict_fleet(requests, 2, 3, 4, [policy], **kw)  # type: ignore[arg-type]
    assert prediction.policies[0].exact
    return prediction.policies[0].low.hit_rate


def test_bounds_on_abab() -> None:
    """Pooled (one cache of 6 blocks): A then B fit together, so A-2 and B-2 hit 8 each:
    16 / 36 = 0.444…. Single (one replica of 3): each request evicts the other group: 0.
    Spread: A-1 → 0, B-1 → 1 (groups start on their own replica), A-2 → 1, B-2 → 0: each
    replica serves A and B once: 0."""
    p = predict_fleet(abab(), 2, 3, 4, [])
    assert p.pooled == pytest.approx(16 / 36)
    assert p.single == 0.0
    assert p.spread.placement == (0, 1, 1, 0)
    assert p.spread.hit_rate == 0.0


def test_round_robin_keeps_alternating_groups_apart_on_abab() -> None:
    """Round-robin sends A-1, A-2 to replica 0 and B-1, B-2 to replica 1: both repeats hit 8:
    16 / 36; so do the gateway's least-loaded (one request at a time: ties rotate) and
    vllm-router's round_robin."""
    for policy in ("round-robin", "least-loaded", "vllm-router:round_robin"):
        assert rate(policy, abab()) == pytest.approx(16 / 36), policy


def test_round_robin_splits_each_group_on_aabb() -> None:
    """A-1, A-2, B-1, B-2 round-robin: A-1 → 0, A-2 → 1 (cold), B-1 → 0 (evicts A),
    B-2 → 1 (evicts A): nothing hits. Prefix-hash keeps A on replica 0 and B on replica 1:
    A-2 and B-2 hit 8 each: 16 / 36."""
    aabb = [abab()[i] for i in (0, 2, 1, 3)]
    assert rate("round-robin", aabb) == 0.0
    assert rate("prefix-hash", aabb) == pytest.approx(16 / 36)


def test_prefix_hash_puts_two_groups_of_one_replica_together() -> None:
    """Both keys homed on replica 0; one request at a time, the load bound is ⌈1.25 × 1 / 2⌉ =
    1 and replica 0 holds 0 when each arrives: all four match on replica 0, which forgets
    each group before it returns: 0 hits, every request on one replica (imbalance 2)."""
    p = predict_fleet(abab(KEY_ON_0, KEY_ON_0_TOO), 2, 3, 4, ["prefix-hash"])
    outcome = p.policies[0].low
    assert outcome.placement == (0, 0, 0, 0)
    assert {d.why for d in outcome.decisions if d} == {"matched"}
    assert outcome.hit_rate == 0.0
    assert imbalance(outcome.requests_per_replica()) == 2.0


def test_prefix_hash_passes_a_group_on_under_concurrency() -> None:
    """Both keys on replica 0, two clients in a closed loop (A-1, B-1 start; then each end is
    followed by the next start). A-1 → 0 (bound ⌈1.25 × 1/2⌉ = 1, 0 + 1 ≤ 1: matched). B-1
    arrives with replica 0 holding 1: bound ⌈1.25 × 2/2⌉ = 2, 1 + 1 ≤ 2: matched. A-1 ends;
    A-2 arrives with replica 0 holding B-1: matched (bound 2). B-1 ends; B-2: matched.
    Replica 0's 3 blocks are then shared by two running requests: the model lends blocks."""
    events = closed_loop_events(4, 2)
    assert events[:3] == [("start", 0), ("start", 1), ("end", 0)]
    p = predict_fleet(abab(KEY_ON_0, KEY_ON_0_TOO), 2, 3, 4, ["prefix-hash"], events)
    assert p.policies[0].low.placement == (0, 0, 0, 0)
    assert p.policies[0].low.lent_blocks[:2] == (0, 3)  # B-1 found A-1 holding all 3
    strict = predict_fleet(
        abab(KEY_ON_0, KEY_ON_0_TOO), 2, 3, 4, ["prefix-hash"], events, FleetOptions(epsilon=0)
    )
    # ε = 0: B-1 finds replica 0 holding 1, bound ⌈2/2⌉ = 1: passed on to replica 1; A-2
    # finds replica 0 free (A-1 ended) and replica 1 holding B-1: matched; B-2 finds replica
    # 0 holding A-2: passed on again. Groups stay apart: A-2 and B-2 hit 8 each.
    low = strict.policies[0].low
    assert low.placement == (0, 1, 0, 1)
    assert [d.why for d in low.decisions if d] == [
        "matched",
        "passed-on-load",
        "matched",
        "passed-on-load",
    ]
    assert low.hit_rate == pytest.approx(16 / 36)


def test_per_replica_requests_and_prefill_tokens() -> None:
    """Round-robin on ABAB: replica 0 computes A-1's 9 tokens and A-2's last 1: 10; replica
    1 likewise: 10. Requests 2 and 2: both imbalances 1."""
    outcome = predict_fleet(abab(), 2, 3, 4, ["round-robin"]).policies[0].low
    assert outcome.requests_per_replica() == [2, 2]
    assert outcome.prefill_tokens_per_replica() == [10, 10]
    assert imbalance(outcome.prefill_tokens_per_replica()) == 1.0


def test_cache_aware_places_text_prompts_by_load() -> None:
    """vllm-router 0.1.17 matches no text prompt to a worker (test_vllm_router_placement), so
    the model gives text prompts no key and places them by load: one at a time, every load
    ties at 0 and goes to the first worker (replica 0 with ties low, 1 with ties high), all
    four on one replica, which forgets each group: 0 hits either way."""
    p = predict_fleet(abab(), 2, 3, 4, ["vllm-router:cache_aware"]).policies[0]
    assert (p.low.placement, p.high.placement) in (((0,) * 4, (1,) * 4), ((1,) * 4, (0,) * 4))
    assert (p.low.hit_rate, p.high.hit_rate) == (0.0, 0.0)


def _tokens(name: str, key: str) -> FleetRequest:
    """A token-ID request with ``cache_aware`` key ``key`` (its cache blocks do not matter
    here: one per 16 tokens, so none)."""
    return FleetRequest(CacheRequest(name, (), len(key), 1), None, "", (), key)


def test_cache_aware_matches_whole_tokens_above_three_tenths() -> None:
    """Keys of 10 tokens (one character each). x starts alone: no tree, loads [0, 0]: the
    least-loaded tie goes to replica 0. y starts while x runs: no match, loads [1, 0]: replica
    1. Both end. Then one at a time: y4 shares 4 of y's 10 tokens (0.4 > 0.3): y's replica 1,
    though the loads tie; y3 shares 3 of 10 (0.3, not above): by load, the tie: replica 0;
    a 9-token prompt sharing y's first 3 (0.33 > 0.3) now matches 3 on both replicas (y3
    took them to replica 0): a tie of matches, to replica 0. With ties to the higher index
    every choice mirrors: (1, 0, 0, 1, 1)."""
    y = "yyyyyyyyyy"
    requests = [
        _tokens("x", "xxxxxxxxxx"),
        _tokens("y", y),
        _tokens("y4", y[:4] + "abcdef"),
        _tokens("y3", y[:3] + "ghijklm"),
        _tokens("y3of9", y[:3] + "nopqrs"),
    ]
    events = [("start", 0), ("start", 1), ("end", 0), ("end", 1)]
    for i in (2, 3, 4):
        events += [("start", i), ("end", i)]
    low = simulate(requests, 2, None, 16, cache_aware_rule(False), events)
    high = simulate(requests, 2, None, 16, cache_aware_rule(True), events)
    assert low.placement == (0, 1, 1, 0, 0)
    assert high.placement == (1, 0, 0, 1, 1)


def test_cache_aware_goes_by_load_when_imbalanced() -> None:
    """With the balance thresholds at 0 and 1.5: x starts on replica 0 (loads [0, 0], the
    tie), y on replica 1 (loads [1, 0]: imbalanced, 1 − 0 > 0 and 1 > 1.5 × 0, so the least
    loaded); a second y while both run goes to y's replica 1 (loads [1, 1] are balanced and
    it matches); a third y finds loads [1, 2]: 2 − 1 > 0 and 2 > 1.5 × 1, so the least-loaded
    replica 0 takes it although replica 1 matches it whole."""
    requests = [_tokens(n, k) for n, k in (("x", "xxxx"), ("y", "yyyy"), ("y2", "yyyy"),
                                           ("y3", "yyyy"))]  # fmt: skip
    events = [("start", i) for i in range(4)] + [("end", i) for i in range(4)]
    rule = cache_aware_rule(False, balance_abs=0, balance_rel=1.5)
    assert simulate(requests, 2, None, 16, rule, events).placement == (0, 1, 1, 0)


def test_the_gateway_rule_is_the_gateways_router() -> None:
    """The model's prefix-hash decisions are the gateway Router's, request by request."""
    from gateway.routing import ReplicaView, Router

    router = Router("prefix-hash", 2)
    outcome = simulate(abab(), 2, 3, 4, gateway_rule("prefix-hash", 2))
    for request, decision in zip(abab(), outcome.decisions, strict=True):
        assert decision == router.decide([ReplicaView(0), ReplicaView(0)], request.prefix_key)


def test_token_requests_key_blocks_by_content() -> None:
    """Two prompts sharing their first 8 of 10 tokens share block key 0 and 1 of B = 4."""
    a = token_fleet_request("a", list(range(10)), 1, 4)
    b = token_fleet_request("b", [*range(8), 99, 98], 1, 4)
    assert a.cache.block_keys[:2] == b.cache.block_keys[:2]
    assert len(a.cache.block_keys) == 2
    assert content_block_keys(range(8), 4) == a.cache.block_keys
    assert a.router_text == "token_ids:10"
    assert a.cache_key == "".join(map(chr, range(10)))  # one character per token
    assert a.headers == (("X-Request-Id", "a"),)  # what the load generator sends


def test_a_token_id_beyond_unicode_is_named() -> None:
    with pytest.raises(ValueError, match="token ID 1114112 outside"):
        token_fleet_request("a", [1, 0x110000], 1, 4)


def test_bad_policies_are_named() -> None:
    with pytest.raises(ValueError, match="unknown routing policy 'hash'"):
        parse_fleet_policies("round-robin,hash")
    with pytest.raises(ValueError, match="given twice: prefix-hash"):
        parse_fleet_policies("prefix-hash,prefix-hash")
    with pytest.raises(ValueError, match="no routing policy"):
        parse_fleet_policies(" , ")
    for text in ("round-robin,,prefix-hash", ",round-robin", "round-robin,", "round-robin, ,x"):
        with pytest.raises(ValueError, match="has an empty item between commas"):
            parse_fleet_policies(text)
    assert parse_fleet_policies(" round-robin , prefix-hash ") == ["round-robin", "prefix-hash"]
    assert parse_fleet_policies(",".join(FLEET_POLICIES)) == list(FLEET_POLICIES)


def test_closed_loop_events_end_each_request_before_the_one_c_later() -> None:
    assert closed_loop_events(3, 1) == [
        ("start", 0),
        ("end", 0),
        ("start", 1),
        ("end", 1),
        ("start", 2),
        ("end", 2),
    ]
    with pytest.raises(ValueError, match="concurrency must be ≥ 1"):
        closed_loop_events(3, 0)
