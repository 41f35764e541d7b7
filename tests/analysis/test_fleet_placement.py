"""Placement decided inside the engine simulation (analysis.fleet_placement), derived by hand.

Requests as in test_fleet_model: 9-token prompts of 2 full 4-token blocks (A1 A2 or B1 B2)
and a partial one, so a request finding its group's blocks cached hits 8 and computes 1.
Replicas of 10 usable blocks (every request here fits beside the others: none evicts). A step
costs 0.1 s + 0.01 s per prompt token computed (decodes free, nothing outside the engine): a
miss's first step takes 0.19 s, a hit's 0.11 s, each later token 0.1 s.
"""

from __future__ import annotations

import pytest

from analysis.fleet_engine import EngineRequest, replay
from analysis.fleet_engine_fit import StepCost
from analysis.fleet_placement import LivePlacement
from gateway.routing import HashRing
from scenarios.fleet.model import predict_fleet
from scenarios.fleet.requests import FleetRequest
from scenarios.prefix_cache_model import CacheRequest
from tests.scenarios.test_fleet_model import A1, A2, B1, B2

COST = StepCost(overhead_s=0.0, step_s=0.1, prefill_s_per_token=0.01, decode_s_per_seq=0.0)
SIZING = (10, 4)
RING3 = HashRing(3)
#: A key whose successors on a 3-replica ring start 0, 1 (found by trying keys).
KEY_0_THEN_1 = next(k for k in range(0, 2**64, 2**56) if RING3.successors(k)[:2] == (0, 1))


def request(name: str, output: int, key: int | None = None) -> FleetRequest:
    blocks = {"A": (A1, A2), "B": (B1, B2)}[name[0]]
    return FleetRequest(CacheRequest(name, blocks, 9, output), key, f"text {name[0]}")


def timed(requests: list[FleetRequest], offsets: list[float]) -> list[EngineRequest]:
    """Timed arrivals; replica and uncached tokens are placeholders the placer overrides."""
    return [EngineRequest(replica=0, offset_s=o, follows=None, delay_s=0.0, uncached=9,
                          output=r.cache.output_tokens)
            for r, o in zip(requests, offsets, strict=True)]  # fmt: skip


def test_a_burst_of_one_group_is_passed_on_at_its_second_request_in_flight() -> None:
    """Three requests of group A, 10 output tokens each, arriving at 0, 0.05 and 0.1 s on 3
    replicas, prefix-hash with ε = 0.25, A's key on replica 0 then 1 on the ring.

    - A-1 at 0: nothing in flight, bound ⌈1.25 × 1/3⌉ = 1, replica 0 holds 0 → 0 (matched),
      cold: 9 uncached, its first step 0.19 s, then 9 decode steps: it ends at 1.09 s.
    - A-2 at 0.05: replica 0 holds A-1, L = 1, bound ⌈1.25 × 2/3⌉ = 1, 1 + 1 > 1: passed on
      to replica 1 (idle, 0 + 1 ≤ 1), cold there: 9 uncached, TTFT 0.19 s.
    - A-3 at 0.1: replicas hold 1, 1, 0, L = 2, bound ⌈1.25 × 3/3⌉ = 2, 1 + 1 ≤ 2: matched on
      replica 0, where A-1's blocks are cached: hits 8, 1 uncached. Replica 0 is in A-1's
      first step until 0.19; the next step computes A-1's decode and A-3's 1 token:
      0.1 + 0.01 = 0.11 s, so A-3's first token at 0.30 s: TTFT 0.20 s.

    One after another (the fleet model's order) nothing is ever in flight: all three match
    replica 0, and A-2 and A-3 hit 8 each.
    """
    burst = [request(f"A-{k}", 10, KEY_0_THEN_1) for k in (1, 2, 3)]
    placer = LivePlacement("prefix-hash", burst, 3, SIZING)
    result = replay(timed(burst, [0.0, 0.05, 0.1]), 1.0, COST, placer=placer)
    assert result.placement == [0, 1, 0]
    outcome = placer.outcome()
    assert [d.why for d in outcome.decisions if d] == ["matched", "passed-on-load", "matched"]
    assert outcome.hit_tokens == (0, 0, 8)
    assert outcome.hit_rate == pytest.approx(8 / 27)
    assert [s.ttft_s for s in result.served] == pytest.approx([0.19, 0.19, 0.20])
    sequential = predict_fleet(burst, 3, *SIZING, ["prefix-hash"]).policies[0].low
    assert sequential.placement == (0, 0, 0)
    assert sequential.hit_tokens == (0, 8, 8)


def test_spaced_out_the_burst_stays_on_its_replica() -> None:
    """The same burst 2 s apart (each ends at 1.09 s after it arrives): nothing in flight
    at any decision, so the placement and hits are the fleet model's: 0, 0, 0 and 0, 8, 8."""
    burst = [request(f"A-{k}", 10, KEY_0_THEN_1) for k in (1, 2, 3)]
    placer = LivePlacement("prefix-hash", burst, 3, SIZING)
    result = replay(timed(burst, [0.0, 2.0, 4.0]), 1.0, COST, placer=placer)
    assert result.placement == [0, 0, 0]
    assert placer.outcome().hit_tokens == (0, 8, 8)


def test_least_loaded_follows_the_replicas_in_flight() -> None:
    """2 replicas: A-1 (10 tokens, on replica 0 until 1.09 s), B-1 at 0.05 (1 token: one
    0.19 s step, ends 0.24 s), B-2 at 0.5.

    - A-1: both idle, ties from replica 0 → 0; B-1: replica 0 holds 1 → 1 (misses).
    - B-2 at 0.5: replica 0 still holds A-1, replica 1 none → 1, where B-1's blocks are
      cached: hits 8.

    One after another both replicas are idle at B-2, and ties go in rotation after the last
    chosen (1): replica 0, which holds only A's blocks: B-2 misses.
    """
    requests = [request("A-1", 10), request("B-1", 1), request("B-2", 1)]
    placer = LivePlacement("least-loaded", requests, 2, SIZING)
    result = replay(timed(requests, [0.0, 0.05, 0.5]), 1.0, COST, placer=placer)
    assert result.placement == [0, 1, 1]
    assert placer.outcome().hit_tokens == (0, 0, 8)
    assert result.served[2].ttft_s == pytest.approx(0.11)
    sequential = predict_fleet(requests, 2, *SIZING, ["least-loaded"]).policies[0].low
    assert sequential.placement == (0, 1, 0)
    assert sequential.hit_tokens == (0, 0, 0)


def test_deterministic_policies_have_no_live_placement() -> None:
    with pytest.raises(ValueError, match="no in-flight placement"):
        LivePlacement("round-robin", [request("A-1", 1)], 2, SIZING)
