"""A fleet case's KV-cache events beside the model, replica by replica.

Each replica of a fleet case records the KV-cache events its vLLM published during the case
(``kv_events.jsonl`` of the case directory for replica 0, of ``replicas/K/`` for replica K;
``loadgen.kvevents.hub``). The case starts with every prefix cache emptied, so each file
begins with the reset's cleared event and then holds exactly what the case's requests did to
that replica's cache. :func:`fleet_kv_comparison` gives each replica the requests it served,
in the order of their measured starts and ends over every phase of the case, with their
prompts keyed by token content (the trace-replay prompts rebuilt from the run's seed), and
compares the engine's stored and evicted blocks with the model's
(:func:`analysis.kv_compare.compare_blocks`).

Which replica served a request: the gateway says so in each response
(``X-Gateway-Upstream``, the record's ``upstream``); behind vllm-router, which says nothing,
the model's placement is used when it is exact (``consistent_hash``; ``round_robin``'s
partition is exact, but not which worker took the first request); otherwise the replica is
unknown and the events are not compared.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

import pandas as pd
from pydantic import BaseModel, ConfigDict

from analysis.fleet import FleetData
from analysis.kv_compare import BlockComparison, compare_blocks
from analysis.kv_events import read_kv_events
from loadgen.runformat.layout import KV_EVENTS_FILE, replica_dir
from scenarios.fleet.model import FleetOptions, predict_fleet
from scenarios.fleet.requests import FleetRequest, workload_fleet_requests
from scenarios.prefix_cache_model import CacheRequest, content_block_keys
from scenarios.tokens import TokenSpace
from scenarios.traces import block_token_ids
from scenarios.workloads import TracePrompts


class ReplicaKv(BaseModel):
    """One replica's recorded events beside the model's blocks (counts are blocks).

    ``comparison`` is ``None`` when nothing was compared (``note`` says why); ``divergence``
    is the first difference in words, ``None`` when there is none.
    """

    model_config = ConfigDict(frozen=True)

    replica: int
    requests: int
    recorded: bool
    comparison: dict[str, int | bool] | None = None
    divergence: str | None = None
    notes: list[str] = []
    note: str | None = None

    @property
    def stored_match(self) -> bool | None:
        """Nothing lost and the stored blocks equal the model's, block for block (evictions
        not judged); ``None`` when not compared."""
        c = self.comparison
        if c is None:
            return None
        return bool(c["complete"]) and (
            c["stored_matched"] == c["stored_predicted"] == c["stored_recorded"]
        )

    def summary(self) -> str:
        """One line: blocks stored and evicted as matched of predicted and recorded, the loss
        and the first divergence if any."""
        c = self.comparison
        if c is None:
            return self.note or "not compared"
        text = (
            f"{self.requests} requests, stored {c['stored_matched']} matched of "
            f"{c['stored_predicted']} predicted and {c['stored_recorded']} recorded, evicted "
            f"{c['removed_matched']} matched in order of {c['removed_predicted']} predicted and "
            f"{c['removed_recorded']} recorded"
        )
        if not c["complete"]:
            text += f", incomplete ({'; '.join(self.notes)})"
        return text + (f"; first divergence: {self.divergence}" if self.divergence else "")


def prompt_tokens(workload: TracePrompts, index: int, seed: int, space: TokenSpace) -> list[int]:
    """The token IDs trace-replay sent as request ``index`` of ``workload`` (its blocks drawn
    from the run's ``seed`` and the workload's salt, ``scenarios.traces.block_token_ids``)."""
    item = workload.items[index]
    block_seed = workload.block_seed(seed)
    tokens: list[int] = []
    for h in item.hash_ids:
        if len(tokens) >= item.input_tokens:
            break
        tokens += [int(t) for t in block_token_ids(block_seed, h, workload.block_tokens, space)]
    return tokens[: item.input_tokens]


def _describe(c: BlockComparison) -> str | None:
    d = c.divergence
    if d is None:
        return None
    where = "" if d.block is None else f", block {d.block} of its prompt"
    return (
        f"{d.kind} block #{d.position} of {d.request_id or 'no request'}{where}: the model "
        f"expected {d.expected}, the engine reported {d.recorded}"
    )


def _as_dict(c: BlockComparison) -> dict[str, int | bool]:
    return {
        "stored_predicted": c.stored_predicted, "stored_recorded": c.stored_recorded,
        "stored_matched": c.stored_matched, "removed_predicted": c.removed_predicted,
        "removed_recorded": c.removed_recorded, "removed_matched": c.removed_matched,
        "complete": c.complete, "matches": c.matches,
    }  # fmt: skip


def placements(
    fleet: FleetData,
    upstreams: Sequence[str | None],
    requests: Sequence[FleetRequest],
    events: Sequence[tuple[str, int]],
    capacity_blocks: int,
    block_tokens: int,
) -> list[int] | None:
    """The replica of each request: from ``upstreams`` (the gateway's answer per request,
    a replica URL) when every one has one, else the model's placement when it is exact (module
    doc), else ``None``."""
    index = {url.rstrip("/"): k for k, url in enumerate(fleet.replica_urls)}
    named = [index.get(u.rstrip("/")) if isinstance(u, str) else None for u in upstreams]
    if named and all(k is not None for k in named):
        return [int(k or 0) for k in named]
    options = FleetOptions(worker_urls=fleet.replica_urls)
    model = predict_fleet(requests, fleet.replicas, capacity_blocks, block_tokens,
                          [fleet.routing], events, options)  # fmt: skip
    policy = model.policies[0]
    # round_robin's partition is exact but not which worker came first (docs/fleet.md)
    known = policy.exact and fleet.routing != "vllm-router:round_robin"
    return list(policy.low.placement) if known else None


def fleet_kv_comparison(
    cdir: Path,
    fleet: FleetData,
    sent: Sequence[tuple[TracePrompts, pd.DataFrame]],
    seed: int,
    space: TokenSpace,
    capacity: tuple[int, int],
    events_of: Callable[[pd.DataFrame], list[tuple[str, int]]],
) -> list[ReplicaKv]:
    """Each replica's comparison for a fleet case whose phases sent ``sent`` (per phase its
    workload and its sent rows, ``index``/``sent_ns``/``end_ns``/``upstream`` columns), on
    replicas of ``capacity`` = (usable blocks, block tokens); ``events_of`` turns rows in
    time order into (kind, position) events (``measured_events`` of the report).
    """
    capacity_blocks, block = capacity
    frames, fleet_requests, caches = [], [], []
    for workload, rows in sent:
        indices = [int(i) for i in rows["index"]]
        fleet_requests += workload_fleet_requests(workload, indices, seed, block, space=space)
        for i in indices:
            tokens = prompt_tokens(workload, i, seed, space)
            item = workload.items[i]
            caches.append(CacheRequest(request_id=f"{workload.salt}/L{item.line}",
                                       block_keys=content_block_keys(tokens, block),
                                       prompt_tokens=len(tokens),
                                       output_tokens=item.output_tokens))  # fmt: skip
        frames.append(rows)
    if not caches:
        return []
    rows = pd.concat(frames, ignore_index=True)
    events = events_of(rows)
    upstreams = list(rows["upstream"]) if "upstream" in rows else [None] * len(rows)
    placed = placements(fleet, upstreams, fleet_requests, events, capacity_blocks, block)
    out = []
    for k in range(fleet.replicas):
        path = replica_dir(cdir, k) / KV_EVENTS_FILE
        if not path.exists():
            out.append(ReplicaKv(replica=k, requests=0, recorded=False, note="no events file"))
            continue
        if placed is None:
            out.append(ReplicaKv(replica=k, requests=0, recorded=True,
                                 note=f"which replica served each request is unknown under "
                                 f"{fleet.routing}: not compared"))  # fmt: skip
            continue
        mine = [i for i, p in enumerate(placed) if p == k]
        renumber = {i: j for j, i in enumerate(mine)}
        own = [(kind, renumber[i]) for kind, i in events if i in renumber]
        comparison = compare_blocks(read_kv_events(path), [caches[i] for i in mine],
                                    capacity_blocks, block, own)  # fmt: skip
        out.append(ReplicaKv(replica=k, requests=len(mine), recorded=True,
                             comparison=_as_dict(comparison), divergence=_describe(comparison),
                             notes=list(comparison.notes)))  # fmt: skip
    return out
