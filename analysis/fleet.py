"""A fleet case's figures: every replica's counters summed, and the cache funnel.

A fleet case (``--replicas N --routing …``; docs/fleet.md) scrapes each of its N replicas
(replica 0's samples where a case keeps them, replica K's under ``replicas/K/``) and records
their URLs and its routing in ``fleet.json``. Its figures:

- **measured fleet hit rate** = Σ over replicas of Δ``prefix_cache_hits`` ÷ Σ of
  Δ``prefix_cache_queries`` over the phase window (the per-phase counter delta rule of every
  scenario, applied to each replica and summed);
- **the cache funnel** per phase: what the fleet could reuse (``pooled``: one cache of N × C,
  no router does better), what the worst router gets (``spread``: every replica sees every
  group), what the case's policy should get (the fleet model,
  :func:`scenarios.fleet.model.predict_fleet`, replaying the requests in the order their
  records show: exact for the gateway's policies and vllm-router's ``round_robin`` and
  ``consistent_hash``, a bracket for the others), and what the engines delivered (the
  measured rate above, and per request from ``usage.prompt_tokens_details.cached_tokens``);
- **load per replica**: requests (Δ``request_success``) and prefill tokens
  (Δ``prompt_tokens`` − Δ``prefix_cache_hits``) per replica, and their imbalance max ÷ mean;
  and the requests each replica served counted request by request where the evidence names
  the replica of each (``analysis.replica_attribution``: the gateway's answers, or behind
  vllm-router the replicas' own logs);
- **requests the fleet held at once** (:func:`fleet_gauge_peak`): the replicas' gauges summed
  at every scrape time, each replica's value there the lower of its scrapes just before and
  just after (the replicas' scrapers do not tick together).
"""

from __future__ import annotations

import bisect
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd
from pydantic import BaseModel, ConfigDict

from analysis import server_side
from analysis.load import CaseData
from loadgen.runformat.layout import FLEET_FILE, replica_dir
from loadgen.runformat.metric_files import read_samples
from metrics.rows import ScrapeTick
from metrics.samples import Point, Sample, series
from scenarios.fleet.model import FleetOptions, imbalance, predict_fleet
from scenarios.fleet.requests import FleetRequest
from scenarios.fleet.simulate import FIRST_TOKEN
from scenarios.plan import CaseSpec

#: The gauges a replica's requests in flight are read from.
IN_FLIGHT = ("num_requests_running", "num_requests_waiting")


@dataclass(frozen=True)
class FleetData:
    """What a fleet case recorded of its replicas.

    Attributes:
        routing: its policy as ``--routing`` names it (``prefix-hash``,
            ``vllm-router:cache_aware``).
        replica_urls: the replicas' base URLs, replica 0 first.
        samples: each replica's finite samples, replica 0 first.
    """

    routing: str
    replica_urls: tuple[str, ...]
    samples: tuple[list[Sample], ...]

    @property
    def replicas(self) -> int:
        return len(self.samples)

    def deltas(self, name: str, start_ns: int, end_ns: int) -> list[float | None]:
        """Each replica's delta of counter ``name`` over the window (``None``: not sampled)."""
        return [server_side.counter_figures(s, start_ns, end_ns)[0].get(name) for s in self.samples]

    def summed(self, name: str, start_ns: int, end_ns: int) -> float | None:
        """The fleet's delta of counter ``name``: the replicas' deltas summed, ``None`` when
        one replica's is unknown (a sum without it would be too small)."""
        values = self.deltas(name, start_ns, end_ns)
        return None if any(v is None for v in values) else sum(v or 0.0 for v in values)

    def in_flight_peak(self, start_ns: int, end_ns: int) -> float | None:
        """The most requests the fleet held at once (running + waiting, summed over the
        replicas and their engines) in the window: :func:`fleet_gauge_peak`."""
        return fleet_gauge_peak(self.samples, IN_FLIGHT, start_ns, end_ns)

    def running_peak(self, start_ns: int, end_ns: int) -> float | None:
        """The most requests the fleet ran at once in the window: :func:`fleet_gauge_peak`."""
        return fleet_gauge_peak(self.samples, ("num_requests_running",), start_ns, end_ns)


def _totals(samples: Sequence[Sample], names: Sequence[str]) -> list[Point]:
    """The gauges ``names`` summed over names and engines at each scrape, in time order."""
    total: dict[int, float] = {}
    for name in names:
        for t, v in series(samples, name):
            total[t] = total.get(t, 0.0) + v
    return sorted(total.items())


def fleet_gauge_peak(
    per_replica: Sequence[Sequence[Sample]], names: Sequence[str], start_ns: int, end_ns: int
) -> float | None:
    """The largest sum over replicas of the gauges ``names`` (each summed over its engines) at
    one scrape time in [start_ns, end_ns] (ns); ``None`` when a replica has no sample of them.

    The replicas are scraped by separate scrapers whose ticks do not coincide, so at a scrape
    time t of any replica, replica k counts min(its value at its last scrape at or before t,
    its value at its first scrape at or after t) (one of them alone at either end of its
    samples; at its own scrape both are that scrape). A request counted so was at replica k
    over the scrape interval around t: a request that ended (or began) between the two scrapes
    is not counted, so a closed loop of C never sums above C because one replica's stale
    count met another's fresh one (unless a request is shorter than a scrape interval). Like
    every sampled peak it is a lower bound of the true peak.
    """
    totals = [_totals(samples, names) for samples in per_replica]
    if not totals or any(not points for points in totals):
        return None
    times = sorted({t for points in totals for t, _ in points if start_ns <= t <= end_ns})
    held = [sum(_held(points, t) for points in totals) for t in times]
    return max(held) if held else None


def _held(points: Sequence[Point], t: int) -> float:
    """A replica's value at ``t`` (:func:`fleet_gauge_peak`): its scrape at ``t``, else the
    lower of its scrapes just before and just after (one of them at either end)."""
    i = bisect.bisect_left(points, (t, float("-inf")))
    if i < len(points) and points[i][0] == t:
        return points[i][1]
    return min(points[j][1] for j in (i - 1, i) if 0 <= j < len(points))


def fleet_in_flight_at_scrapes(
    fleet: FleetData, scrapes: Sequence[ScrapeTick], windows: Sequence[tuple[int, int]]
) -> list[float]:
    """The fleet's running + waiting (every replica's, summed as :func:`fleet_gauge_peak`
    sums them) at each ok scrape of replica 0 (``scrapes``: its ticks) wholly inside one of
    ``windows`` ([start_ns, end_ns]), in time order: the fleet form of
    :func:`analysis.server_side.in_flight_at_scrapes`; empty when a replica has no sample."""
    totals = [_totals(samples, IN_FLIGHT) for samples in fleet.samples]
    if not totals or any(not points for points in totals):
        return []
    own = {t for t, _ in totals[0]}
    inside = sorted(
        t.end_ns
        for t in scrapes
        if t.outcome == "ok" and t.start_ns is not None and t.end_ns is not None
        and t.end_ns in own and any(lo <= t.start_ns and t.end_ns <= hi for lo, hi in windows)
    )  # fmt: skip
    return [sum(_held(points, t) for points in totals) for t in inside]


def is_fleet(spec: CaseSpec | None) -> bool:
    """Whether ``spec`` is a fleet case (several replicas, every one scraped)."""
    return spec is not None and spec.scrape_replicas and spec.replicas > 1


def load_fleet(run_dir: Path, case: CaseData) -> FleetData | None:
    """The fleet data of ``case`` (its ``fleet.json`` and every replica's samples), or
    ``None`` when it is not a fleet case or its ``fleet.json`` is missing or unreadable."""
    if not is_fleet(case.spec):
        return None
    assert case.spec is not None
    cdir = run_dir / "cases" / case.name
    try:
        facts = json.loads((cdir / FLEET_FILE).read_text())
        urls = tuple(str(u) for u in facts["replica_urls"])
        routing = str(facts["routing"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    samples = [case.samples]
    for k in range(1, case.spec.replicas):
        samples.append(read_samples(replica_dir(cdir, k)))
    return FleetData(routing, urls, tuple(samples))


class FleetFunnel(BaseModel):
    """The cache funnel and load of one phase of one fleet case (module docstring).

    Hit rates are fractions of prompt tokens (0-1); ``predicted`` is ``None`` for a bracketed
    policy, whose ``predicted_low``/``predicted_high`` bound it (equal for an exact one).
    Per-replica lists are replica 0 first; ``None`` where a replica's counter is unknown.
    ``predicted_hit_tokens``/``predicted_query_tokens`` are the prediction's totals (the
    bracket's low end for a bracketed policy).
    """

    model_config = ConfigDict(frozen=True)

    policy: str
    replicas: int
    pooled: float
    spread: float
    single: float
    predicted: float | None
    predicted_low: float
    predicted_high: float
    basis: str
    measured: float | None
    hits: float | None
    queries: float | None
    requests_per_replica: list[float | None]
    prefill_tokens_per_replica: list[float | None]
    requests_imbalance: float | None
    prefill_imbalance: float | None
    predicted_requests_per_replica: list[int]
    predicted_hit_tokens: int
    predicted_query_tokens: int
    #: Requests each replica served, counted request by request (``None`` when which replica
    #: served each is unknown); ``served_basis``: where that was read, or why it is unknown.
    served_per_replica: list[int] | None = None
    served_basis: str | None = None


def _imbalance(values: Sequence[float | None]) -> float | None:
    if any(v is None for v in values):
        return None
    return imbalance([int(v or 0) for v in values])


def _ns(value: Any) -> int | None:
    """A frame's ns stamp as an int; ``None`` when missing (``None`` or NaN)."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return None
    return int(value)


def with_first_tokens(
    events: Sequence[tuple[str, int]], sent: pd.DataFrame
) -> list[tuple[str, int]]:
    """``events``, the start and end of each sent row by position in time order
    (``analysis.fleet_kv.measured_events``: a start at ``sent_ns``, an end at ``end_ns`` or
    at the start when missing), with ``("first", k)`` inserted at row k's first token
    (``chunk_ns[0]``, ns) where it came strictly after the start and before the end; the
    others' end stands for it in the fleet model. vllm-router's ``kv_aware`` counts a
    request's prompt as pending work until then, and learns its cached blocks then."""
    starts = [_ns(v) for v in sent["sent_ns"]]
    times: dict[tuple[str, int], int] = {}
    for k, (s, e) in enumerate(zip(starts, sent["end_ns"], strict=True)):
        start = s or 0
        end = _ns(e)
        times[("start", k)] = start
        times[("end", k)] = start if end is None else max(end, start)
    firsts = []
    for k, chunks in enumerate(sent.get("chunk_ns", [])):
        if isinstance(chunks, list) and chunks:
            at = int(chunks[0])
            if times[("start", k)] < at < times[("end", k)]:
                firsts.append((at, k))
    firsts.sort()
    out: list[tuple[str, int]] = []
    i = 0
    for event in events:
        while i < len(firsts) and firsts[i][0] <= times[event]:
            out.append((FIRST_TOKEN, firsts[i][1]))
            i += 1
        out.append(event)
    out.extend((FIRST_TOKEN, k) for _, k in firsts[i:])
    return out


def fleet_funnel(
    fleet: FleetData,
    requests: Sequence[FleetRequest],
    events: Sequence[tuple[str, int]],
    capacity_blocks: int,
    block_tokens: int,
    window: tuple[int, int],
) -> FleetFunnel:
    """The funnel of one phase: its sent ``requests`` in send order with their measured
    start/end ``events``, replicas of ``capacity_blocks`` usable blocks of ``block_tokens``,
    the phase's counter ``window`` (start, end ns).

    Raises:
        ValueError: what :func:`scenarios.fleet.model.predict_fleet` refuses.
    """
    options = FleetOptions(worker_urls=fleet.replica_urls)
    model = predict_fleet(
        requests, fleet.replicas, capacity_blocks, block_tokens, [fleet.routing], events,
        options,
    )  # fmt: skip
    policy = model.policies[0]
    start, end = window
    hits = fleet.summed("prefix_cache_hits", start, end)
    queries = fleet.summed("prefix_cache_queries", start, end)
    per_requests = fleet.deltas("request_success", start, end)
    prompts = fleet.deltas("prompt_tokens", start, end)
    per_hits = fleet.deltas("prefix_cache_hits", start, end)
    prefill = [
        None if p is None or h is None else p - h for p, h in zip(prompts, per_hits, strict=True)
    ]
    return FleetFunnel(
        policy=fleet.routing,
        replicas=fleet.replicas,
        pooled=model.pooled,
        spread=model.spread.hit_rate,
        single=model.single,
        predicted=policy.hit_rate,
        predicted_low=policy.low.hit_rate,
        predicted_high=policy.high.hit_rate,
        basis=policy.basis,
        measured=hits / queries if hits is not None and queries else None,
        hits=hits,
        queries=queries,
        requests_per_replica=per_requests,
        prefill_tokens_per_replica=prefill,
        requests_imbalance=_imbalance(per_requests),
        prefill_imbalance=_imbalance(prefill),
        predicted_requests_per_replica=policy.low.requests_per_replica(),
        predicted_hit_tokens=sum(policy.low.hit_tokens),
        predicted_query_tokens=sum(policy.low.query_tokens),
    )
