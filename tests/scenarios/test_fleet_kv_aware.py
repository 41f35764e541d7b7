"""vllm-router's kv_aware in the fleet model (scenarios.fleet.kv_aware) on hand-made request
sequences for 2 replicas.

Notation as in test_fleet_model: blocks of B = 4 tokens; every request has a 9-token prompt
(2 full blocks and a partial one) and 1 output token, so a repeat that finds its group's 2
blocks credits min(2, (9 − 1) // 4) × 4 = 8 tokens and has n = 9 − 8 = 1 new prefill token;
one that finds nothing has n = 9. A replica's cost is (n + its pending prefill tokens) ×
(its requests in flight + 1); the lowest wins, a tie the lower index. Groups A (blocks A1,
A2), B and C.
"""

from __future__ import annotations

import pytest

from gateway.routing import Decision
from scenarios.fleet.kv_aware import KvAwareRule, new_prefill_tokens
from scenarios.fleet.model import predict_fleet
from scenarios.fleet.requests import FleetRequest
from scenarios.fleet.simulate import FleetOutcome, FleetState, simulate
from scenarios.prefix_cache_model import CacheRequest

KEYS = {"A": (11, 12), "B": (21, 22), "C": (31, 32)}
POLICY = "vllm-router:kv_aware"


def req(name: str) -> FleetRequest:
    return FleetRequest(CacheRequest(name, KEYS[name[0]], 9, 1), None, "")


def run(names: str, events: list[tuple[str, int]] | None, capacity: int | None) -> FleetOutcome:
    requests = [req(n) for n in names.split()]
    prediction = predict_fleet(requests, 2, capacity, 4, [POLICY], events).policies[0]
    assert prediction.exact and prediction.low is prediction.high
    return prediction.low


@pytest.mark.parametrize(
    ("prompt", "cached", "expected"),
    [(9, 0, 9), (9, 2, 1), (9, 3, 1), (8, 2, 4), (1, 0, 1), (12, 3, 4)],
)
def test_new_prefill_tokens_never_credit_the_last_token(
    prompt: int, cached: int, expected: int
) -> None:
    """n = P − min(min(cached, (P − 1) // B) × B, P − 1), B = 4: 9 tokens with 2 cached
    blocks → 1; a third cached block is not credited ((9 − 1) // 4 = 2); 8 tokens with 2
    → (8 − 1) // 4 = 1 block: 8 − 4 = 4; 12 tokens with 3 → 2 blocks: 4."""
    assert new_prefill_tokens(prompt, cached, 4) == expected


def test_one_at_a_time_every_new_group_ties_and_goes_to_the_first_worker() -> None:
    """ABAB one after another, C = 3 blocks per replica: A-1 costs 9 × 1 on both: replica 0.
    B-1 finds B nowhere: 9 and 9, replica 0, whose 3 blocks it takes (A is evicted). A-2 and
    B-2 likewise: everything on replica 0, no hit, the other replica idle."""
    outcome = run("A-1 B-1 A-2 B-2", None, 3)
    assert outcome.placement == (0, 0, 0, 0)
    assert outcome.hit_rate == 0.0


def test_a_cached_prefix_draws_its_repeat() -> None:
    """B-1, A-1, A-2 one after another, unbounded caches: B-1 and A-1 find nothing and tie
    (9 and 9): replica 0. A-2: n = 1 on replica 0 (A cached), 9 on replica 1: cost 1 against
    9 → replica 0, 8 hit tokens."""
    outcome = run("B-1 A-1 A-2", None, None)
    assert outcome.placement == (0, 0, 0)
    assert outcome.hit_tokens == (0, 0, 8)


def test_the_index_learns_a_requests_blocks_at_its_first_token() -> None:
    """A-1 then A-2, unbounded caches. A-2 starting before A-1's first token: replica 0's
    index is still empty (vLLM publishes A-1's blocks once its step has run) and A-1's 9
    tokens are pending there: cost (9 + 9) × (1 + 1) = 36 on 0, 9 × 1 on 1 → replica 1, where
    nothing is cached: 0 hits though replica 0's cache holds A. A-2 starting after A-1's first
    token: n = 1 on 0, nothing pending, cost 1 × 2 = 2 against 9 → replica 0: 8 hit tokens."""
    before = [("start", 0), ("start", 1), ("first", 0), ("end", 0), ("first", 1), ("end", 1)]
    after = [("start", 0), ("first", 0), ("start", 1), ("end", 0), ("first", 1), ("end", 1)]
    early = run("A-1 A-2", before, None)
    assert (early.placement, early.hit_tokens) == ((0, 1), (0, 0))
    late = run("A-1 A-2", after, None)
    assert (late.placement, late.hit_tokens) == ((0, 0), (0, 8))
    assert late.hit_rate == pytest.approx(8 / 18)


def test_a_prompt_still_prefilling_pushes_a_cached_repeat_away() -> None:
    """A-1 alone on replica 0 (tie; the index learns A at its end). B-1: 9 and 9 → replica 0.
    A-2 while B-1 is before its first token: replica 0 costs (1 + 9) × 2 = 20, replica 1
    9 × 1 = 9 → replica 1, a miss. Had B-1's first token come before A-2: 1 × 2 = 2 → replica
    0, 8 hit tokens of 27."""
    head = [("start", 0), ("end", 0), ("start", 1)]
    pending = [*head, ("start", 2), ("first", 1), ("end", 1), ("end", 2)]
    decoding = [*head, ("first", 1), ("start", 2), ("end", 1), ("end", 2)]
    pushed = run("A-1 B-1 A-2", pending, None)
    assert (pushed.placement, pushed.hit_tokens) == ((0, 0, 1), (0, 0, 0))
    kept = run("A-1 B-1 A-2", decoding, None)
    assert (kept.placement, kept.hit_tokens) == ((0, 0, 0), (0, 0, 8))


class SpyRule(KvAwareRule):
    """kv_aware that notes each replica's index when it places a request."""

    def __init__(self, block_tokens: int) -> None:
        super().__init__(block_tokens)
        self.seen: list[list[set[int]]] = []

    def __call__(
        self, index: int, request: FleetRequest, state: FleetState
    ) -> tuple[int, Decision | None]:
        self._grow(state.replicas)
        self.seen.append([set(v) for v in self.views])
        return super().__call__(index, request, state)


def test_the_index_keeps_evicted_blocks_until_the_evicting_request_reports() -> None:
    """C = 3: A-1 alone on replica 0; B-1 → replica 0 (tie), its allocation evicts A1 and A2.
    C-1 starts before B-1's first token: the router's index of replica 0 still holds A (its
    view lags the cache) and B-1's 9 tokens are pending there. At B-1's first token the index
    holds B only."""
    rule = SpyRule(4)
    requests = [req("A-1"), req("B-1"), req("C-1")]
    events = [("start", 0), ("end", 0), ("start", 1), ("start", 2), ("first", 1), ("end", 1)]
    simulate(requests, 2, 3, 4, rule, [*events, ("end", 2)])
    assert rule.seen[1] == [{11, 12}, set()]
    assert rule.seen[2] == [{11, 12}, set()]
    assert rule.views[0] == {21, 22}


def test_a_misplaced_first_token_event_is_refused() -> None:
    requests = [req("A-1")]
    for events in (
        [("first", 0), ("start", 0), ("end", 0)],
        [("start", 0), ("end", 0), ("first", 0)],
        [("start", 0), ("first", 0), ("first", 0), ("end", 0)],
    ):
        with pytest.raises(ValueError, match="first-token event of request 0"):
            predict_fleet(requests, 2, None, 4, [POLICY], events)


def test_its_prediction_names_no_replica() -> None:
    """Exact, but which physical worker the router lists first (and so takes a tie) is its
    own: the KV-event comparison must not read the model's placement as the replicas'."""
    requests = [req("A-1")]
    (kv, ch) = predict_fleet(requests, 2, None, 4, [POLICY, "vllm-router:consistent_hash"]).policies
    assert kv.exact and not kv.names_replicas
    assert ch.exact and ch.names_replicas
