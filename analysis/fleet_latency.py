"""What a fleet case's router adds to the time to first token, per phase.

Two figures, each with its method and bias:

- **Outside the engine** (every policy): the client's mean TTFT minus the engines' own mean
  TTFT, both over the phase. The engines' mean is Σ over replicas of Δ``ttft_seconds_sum`` ÷
  Σ of Δ``ttft_seconds_count`` (vLLM's ``vllm:time_to_first_token_seconds``, measured from
  the request's arrival in the engine's front end to its first token): a histogram's sum and
  count are exact, so the mean is too, bucket edges play no part. The difference is the time
  a request spends outside the engine on its way in and its first token on the way out: the
  router both ways, loopback, the client's own stack and vLLM's HTTP server before the
  request reaches its engine. It is therefore an *upper bound* of the router's share; the
  part that is not the router's is the same under every policy on the same replicas, so the
  difference between two policies is the routers' difference. The client's mean is over its
  completed requests, the engines' over every request that got a first token in the window
  (both counts are given: they differ when requests failed).
- **To the routing decision** (the gateway's policies): per request, the gateway's decision
  time (``routing_decisions.jsonl`` ``t_ns``, first attempt) minus the moment the client
  finished writing the request (the record's ``request_sent_ns``); one monotonic clock, so
  the difference is exact: receiving, parsing and routing the request. It leaves out the
  relay of the request upstream and of the answer back.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
from pydantic import BaseModel, ConfigDict

from analysis.fleet import FleetData, load_fleet
from analysis.load import CaseData, read_jsonl
from analysis.markdown import f, table
from loadgen.runformat import RequestRecord, RoutingDecisionRow
from loadgen.runformat.layout import ROUTING_DECISIONS_FILE
from metrics.samples import counter_delta, series


class RouterLatency(BaseModel):
    """One phase's figures (module doc); times in ms, ``None`` when not measurable."""

    model_config = ConfigDict(frozen=True)

    policy: str
    client_ttft_mean_ms: float | None
    client_requests: int
    engine_ttft_mean_ms: float | None
    engine_requests: float | None
    outside_engine_ms: float | None
    decision_lag_p50_ms: float | None = None
    decision_lag_p99_ms: float | None = None
    decision_lag_requests: int = 0


def engine_ttft(fleet: FleetData, start_ns: int, end_ns: int) -> tuple[float | None, float | None]:
    """(mean TTFT in ms, requests) the engines measured over the window, replicas summed;
    ``(None, None)`` when a replica's histogram was not read (a sum without it is too small)."""
    sums, counts = [], []
    for samples in fleet.samples:
        s = counter_delta(series(samples, "ttft_seconds_sum"), start_ns, end_ns)
        c = counter_delta(series(samples, "ttft_seconds_count"), start_ns, end_ns)
        if s is None or c is None:
            return None, None
        sums.append(s)
        counts.append(c)
    total = sum(counts)
    return (sum(sums) / total * 1000.0 if total else None), total


def decision_lags_ms(
    records: Sequence[RequestRecord], decisions: Sequence[RoutingDecisionRow]
) -> list[float]:
    """Per request with both stamps: its first decision's ``t_ns`` − its ``request_sent_ns``,
    in ms (joined by request id)."""
    first: dict[str, int] = {}
    for d in decisions:
        if d.attempt == 0 and d.request_id is not None:
            first.setdefault(d.request_id, d.t_ns)
    return [
        (first[r.request_id] - r.request_sent_ns) / 1e6
        for r in records
        if r.request_sent_ns is not None and r.request_id in first
    ]


def router_latency(
    fleet: FleetData,
    records: Sequence[RequestRecord],
    window: tuple[int, int],
    decisions: Sequence[RoutingDecisionRow] | None = None,
) -> RouterLatency:
    """The phase's figures from its ``records``, the replicas' samples over ``window``
    (start, end ns) and, behind the gateway, its ``decisions``."""
    ttfts = [
        (r.chunk_ns[0] - r.sent_ns) / 1e6
        for r in records
        if r.status == "ok" and r.chunk_ns and r.sent_ns is not None
    ]
    client = float(np.mean(ttfts)) if ttfts else None
    engine, engine_n = engine_ttft(fleet, *window)
    lags = decision_lags_ms(records, decisions or [])
    return RouterLatency(
        policy=fleet.routing,
        client_ttft_mean_ms=client,
        client_requests=len(ttfts),
        engine_ttft_mean_ms=engine,
        engine_requests=engine_n,
        outside_engine_ms=None if client is None or engine is None else client - engine,
        decision_lag_p50_ms=float(np.percentile(lags, 50)) if lags else None,
        decision_lag_p99_ms=float(np.percentile(lags, 99)) if lags else None,
        decision_lag_requests=len(lags),
    )


def case_router_latency(run_dir: Path, case: CaseData) -> dict[str, RouterLatency]:
    """Per phase of a fleet case, what its router adds to TTFT; empty for any other case."""
    fleet = load_fleet(run_dir, case)
    if fleet is None:
        return {}
    decisions = read_jsonl(run_dir / "cases" / case.name / ROUTING_DECISIONS_FILE,
                           RoutingDecisionRow).rows  # fmt: skip
    out = {}
    for row in case.phases:
        records = [r for r in case.records if r.phase == row.phase]
        out[row.phase] = router_latency(fleet, records, (row.start_ns, row.end_ns), decisions)
    return out


LATENCY_HEADERS = ["phase", "policy", "client TTFT mean ms (requests)",
                   "engine TTFT mean ms (requests)", "outside the engine ms",
                   "to the routing decision ms p50 / p99"]  # fmt: skip


def latency_lines(figures: dict[str, RouterLatency]) -> list[str]:
    """A fleet case's router latency per phase, as Markdown (nothing without figures)."""
    rows = [
        [phase, r.policy, f"{f(r.client_ttft_mean_ms, 1)} ({r.client_requests})",
         f"{f(r.engine_ttft_mean_ms, 1)} ({f(r.engine_requests, 0)})", f(r.outside_engine_ms, 1),
         f"{f(r.decision_lag_p50_ms, 2)} / {f(r.decision_lag_p99_ms, 2)}"
         + (f" ({r.decision_lag_requests})" if r.decision_lag_requests else "")]
        for phase, r in figures.items()
    ]  # fmt: skip
    if not rows:
        return []
    return [
        "Router latency (docs/fleet.md): the client's mean TTFT minus the engines' own (their "
        "TTFT histograms' sum ÷ count, replicas summed) is the time outside the engine, an "
        "upper bound of the router's share; the gateway's routing decision comes the given ms "
        "after the client wrote the request (p50 / p99).",
        "",
        table(LATENCY_HEADERS, rows),
        "",
    ]
