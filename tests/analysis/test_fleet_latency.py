"""What a fleet's router adds to TTFT: the client's mean TTFT minus the engines' own (their
histograms' sum ÷ count, replicas summed), and the gateway's routing decision after the
client wrote the request, per request."""

from __future__ import annotations

import pytest

from analysis.fleet import FleetData
from analysis.fleet_latency import latency_lines, router_latency
from loadgen.runformat import RoutingDecisionRow
from metrics.samples import Sample
from tests.support.row_builders import record

ENGINE = (("engine", "0"),)
MS = 1_000_000


def ttft_histogram(t_ns: int, total_s: float, count: float) -> list[Sample]:
    return [Sample(t_ns, "ttft_seconds_sum", ENGINE, total_s),
            Sample(t_ns, "ttft_seconds_count", ENGINE, count)]  # fmt: skip


def decision(t_ns: int, request_id: str, attempt: int = 0) -> RoutingDecisionRow:
    return RoutingDecisionRow(t_ns=t_ns, upstream="http://a", replica=0, policy="prefix-hash",
                              why="matched", attempt=attempt, request_id=request_id)  # fmt: skip


def test_the_time_outside_the_engine_and_to_the_routing_decision() -> None:
    # Replica 0: Δsum 2.0 s over Δcount 10; replica 1: 1.0 s over 5 → 3.0 s / 15 = 200 ms.
    fleet = FleetData("prefix-hash", ("http://a", "http://b"), (
        ttft_histogram(100, 0.5, 10) + ttft_histogram(900, 2.5, 20),
        ttft_histogram(100, 0.0, 0) + ttft_histogram(900, 1.0, 5),
    ))  # fmt: skip
    # Client TTFTs 210 and 230 ms (first chunk − sent): mean 220 ms; the failed one is left out.
    # Written at 1 and 2 ms, routed at 1.5 and 2.3 ms: lags 0.5 and 0.3 ms (the retry of r2
    # at 9 ms is not its decision).
    records = [
        record(request_id="r1", status="ok", sent_ns=0, request_sent_ns=1 * MS,
               chunk_ns=[210 * MS], chunk_tokens=[1]),
        record(request_id="r2", status="ok", sent_ns=MS, request_sent_ns=2 * MS,
               chunk_ns=[231 * MS], chunk_tokens=[1]),
        record(request_id="r3", status="error", sent_ns=MS, error="reset"),
    ]  # fmt: skip
    decisions = [decision(1_500_000, "r1"), decision(2_300_000, "r2"), decision(9 * MS, "r2", 1)]
    r = router_latency(fleet, records, (500, 1000), decisions)
    assert (r.client_ttft_mean_ms, r.client_requests) == (pytest.approx(220.0), 2)
    assert (r.engine_ttft_mean_ms, r.engine_requests) == (pytest.approx(200.0), 15)
    assert r.outside_engine_ms == pytest.approx(20.0)
    assert r.decision_lag_requests == 2
    assert r.decision_lag_p50_ms == pytest.approx(0.4)  # midway between 0.3 and 0.5
    assert r.decision_lag_p99_ms == pytest.approx(0.3 + 0.99 * 0.2)  # numpy's linear rule
    row = latency_lines({"p": r})[-2].splitlines()[-1]
    assert row == "| p | prefix-hash | 220.0 (2) | 200.0 (15) | 20.0 | 0.40 / 0.50 (2) |"
    assert latency_lines({}) == []


def test_without_every_replicas_histogram_the_engines_figure_is_unknown() -> None:
    fleet = FleetData("vllm-router:cache_aware", ("http://a", "http://b"),
                      (ttft_histogram(100, 0.0, 0) + ttft_histogram(900, 1.0, 5), []))  # fmt: skip
    r = router_latency(fleet, [], (500, 1000))
    assert (r.engine_ttft_mean_ms, r.outside_engine_ms, r.decision_lag_p50_ms) == (None,) * 3
