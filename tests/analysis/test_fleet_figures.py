"""A fleet case's counters are every replica's deltas summed (unknown when one replica's is),
its load per replica comes from each replica's own counters, and the measured hit rate is
compared with the fleet model's prediction for its policy."""

from __future__ import annotations

from analysis.fleet import FleetData, fleet_funnel
from metrics.samples import Sample
from scenarios.fleet.model import predict_fleet
from scenarios.fleet.requests import token_fleet_request

ENGINE = (("engine", "0"),)


def counters(t_ns: int, hits: float, queries: float, ok: float, prompt: float) -> list[Sample]:
    return [
        Sample(t_ns, "prefix_cache_hits", ENGINE, hits),
        Sample(t_ns, "prefix_cache_queries", ENGINE, queries),
        Sample(t_ns, "request_success", (("engine", "0"), ("finished_reason", "length")), ok),
        Sample(t_ns, "prompt_tokens", ENGINE, prompt),
    ]


def replica(before: tuple[float, ...], after: tuple[float, ...]) -> list[Sample]:
    return counters(100, *before) + counters(900, *after)


def test_counters_are_summed_over_replicas_and_unknown_when_one_is_missing() -> None:
    # Replica 0: hits 10 → 266, queries 20 → 532; replica 1: hits 0 → 128, queries 0 → 532.
    fleet = FleetData(
        "round-robin",
        ("http://a", "http://b"),
        (replica((10, 20, 1, 20), (266, 532, 3, 532)), replica((0, 0, 0, 0), (128, 532, 2, 532))),
    )
    assert fleet.deltas("prefix_cache_hits", 500, 1000) == [256.0, 128.0]
    assert fleet.summed("prefix_cache_hits", 500, 1000) == 384.0
    assert fleet.summed("prefix_cache_queries", 500, 1000) == 1044.0  # 512 + 532
    blind = FleetData("round-robin", ("http://a", "http://b"), (fleet.samples[0], []))
    assert blind.summed("prefix_cache_hits", 500, 1000) is None


def test_the_funnel_reads_load_per_replica_and_the_policys_prediction() -> None:
    block = 4
    shared = list(range(8))  # two full blocks every request shares
    requests = [
        token_fleet_request(f"r{i}", [*shared, 100 + i, 200 + i, 300 + i, 400 + i], 1, block)
        for i in range(4)
    ]
    events = [(kind, i) for i in range(4) for kind in ("start", "end")]
    # Replica 0 served 3 requests (48 prompt tokens, 16 of them hits), replica 1 one (12, 0).
    fleet = FleetData(
        "prefix-hash",
        ("http://a", "http://b"),
        (replica((0, 0, 0, 0), (16, 36, 3, 36)), replica((0, 0, 0, 0), (0, 12, 1, 12))),
    )
    funnel = fleet_funnel(fleet, requests, events, 64, block, (500, 1000))
    model = predict_fleet(requests, 2, 64, block, ["prefix-hash"], events)
    assert funnel.predicted == model.policies[0].hit_rate
    assert (funnel.pooled, funnel.spread) == (model.pooled, model.spread.hit_rate)
    assert funnel.measured == 16 / 48
    assert funnel.requests_per_replica == [3.0, 1.0]
    assert funnel.prefill_tokens_per_replica == [20.0, 12.0]  # 36 − 16 and 12 − 0
    assert funnel.requests_imbalance == 1.5  # max 3 ÷ mean 2
    assert funnel.prefill_imbalance == 20 / 16
