"""A fleet case's KV-cache events beside the model, replica by replica (trace-replay's and
bench's fleet cases alike).

Each replica of a fleet case records the KV-cache events its vLLM published during the case
(``kv_events.jsonl`` of the case directory for replica 0, of ``replicas/K/`` for replica K;
``loadgen.kvevents.hub``). The case starts with every prefix cache emptied, so each file
begins with the reset's cleared event and then holds exactly what the case's requests did to
that replica's cache. :func:`case_kv_comparison` gives each replica the requests it served,
in the order of their measured starts and ends over every phase of the case, with their
prompts rebuilt token by token from the plan and the run's seed
(``scenarios.workloads.materialize``: the very requests the run sent) and keyed by content,
and compares the engine's stored and evicted blocks with the model's
(:func:`analysis.kv_compare.compare_blocks`). A text or chat prompt (bench's dataset rows) is
tokenized by the server, so its tokens are not in the run: such a case is not compared.

Which replica served a request (``analysis.replica_attribution``): the gateway says so in
each response (``X-Gateway-Upstream``, the record's ``upstream``); behind vllm-router, which
says nothing, each replica's own log of the request ids it received does; a run recorded
without those logs falls back on the model's placement where it is exact
(``consistent_hash``); otherwise the replica is unknown and the events are not compared.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

import pandas as pd
from pydantic import BaseModel, ConfigDict

from analysis.fleet import FleetData
from analysis.kv_compare import BlockComparison, compare_blocks
from analysis.kv_events import read_kv_events
from analysis.markdown import table
from analysis.models import Verdict
from analysis.replica_attribution import case_placement
from loadgen.runformat.layout import KV_EVENTS_FILE, replica_dir
from scenarios.fleet.requests import token_fleet_request
from scenarios.plan import Plan
from scenarios.requests import PlannedRequest
from scenarios.workloads import materialize

#: What a replica's row says when the case's prompts were text or chat.
TEXT_PROMPTS = (
    "text or chat prompts: the server tokenized them and their tokens are not in the run, so "
    "the model cannot key their blocks: not compared"
)


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
    #: Where the replica of each request was read from (``analysis.replica_attribution``).
    placed_by: str | None = None

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


def measured_events(sent: pd.DataFrame, at_first_token: bool = False) -> list[tuple[str, int]]:
    """(kind, position) events of the sent rows (``sent_ns``/``end_ns`` columns, ns; and
    ``chunk_ns`` with ``at_first_token``), in time order: ``start`` at ``sent_ns`` (or,
    ``at_first_token``, at the first token's arrival where there is one), ``end`` at
    ``end_ns`` (the start when missing); at the same ns an end comes first; position k is
    the k-th row."""
    starts = list(sent["sent_ns"])
    if at_first_token:
        starts = [c[0] if isinstance(c, list) and c else s
                  for c, s in zip(sent["chunk_ns"], starts, strict=True)]  # fmt: skip
    stamped: list[tuple[int, int, str, int]] = []
    for k, (s, e) in enumerate(zip(starts, sent["end_ns"], strict=True)):
        start = int(s)
        end = start if e is None or (isinstance(e, float) and math.isnan(e)) else int(e)
        stamped.append((start, 1, "start", k))
        stamped.append((max(end, start), 0, "end", k))
    stamped.sort()
    return [(kind, k) for _, _, kind, k in stamped]


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


def fleet_kv_comparison(
    cdir: Path,
    fleet: FleetData,
    sent: Sequence[tuple[Sequence[PlannedRequest], pd.DataFrame]],
    capacity: tuple[int, int],
) -> list[ReplicaKv]:
    """Each replica's comparison for a fleet case whose phases sent ``sent``: per phase the
    requests the run sent (``PlannedRequest``, prompts as token IDs) and their rows
    (``sent_ns``/``end_ns`` in ns, ``upstream``, ``request_id`` and ``status``, one row per
    request, in the same order), on replicas of ``capacity`` = (usable blocks, block tokens).
    """
    capacity_blocks, block = capacity
    planned = [p for requests, _ in sent for p in requests]
    if not planned:
        return []
    if any(not p.prompt_token_ids for p in planned):
        return [_uncompared(cdir, k, TEXT_PROMPTS) for k in range(fleet.replicas)]
    fleet_requests = [
        token_fleet_request(p.request_id, p.prompt_token_ids, p.max_tokens, block) for p in planned
    ]
    rows = pd.concat([r for _, r in sent], ignore_index=True)
    events = measured_events(rows)
    placed = case_placement(cdir, fleet, placement_rows(rows, planned), fleet_requests, events,
                            capacity)  # fmt: skip
    out = []
    for k in range(fleet.replicas):
        path = replica_dir(cdir, k) / KV_EVENTS_FILE
        if placed.replicas is None or not path.exists():
            out.append(_uncompared(cdir, k, f"{placed.basis}: not compared"))
            continue
        mine = [i for i, p in enumerate(placed.replicas) if p == k]
        renumber = {i: j for j, i in enumerate(mine)}
        own = [(kind, renumber[i]) for kind, i in events if i in renumber]
        comparison = compare_blocks(read_kv_events(path), [fleet_requests[i].cache for i in mine],
                                    capacity_blocks, block, own)  # fmt: skip
        out.append(ReplicaKv(replica=k, requests=len(mine), recorded=True,
                             comparison=_as_dict(comparison), divergence=_describe(comparison),
                             notes=list(comparison.notes), placed_by=placed.basis))  # fmt: skip
    return out


def placement_rows(
    rows: pd.DataFrame, planned: Sequence[PlannedRequest]
) -> tuple[list[str | None], list[str], list[bool]]:
    """Per sent request: its gateway upstream (``None`` without one), its request id (the
    record's, else the planned one's) and whether it ended ``ok`` (so assumed without a
    ``status`` column): what :func:`analysis.replica_attribution.case_placement` reads."""
    n = len(rows)
    upstreams = list(rows["upstream"]) if "upstream" in rows else [None] * n
    ids = [str(i) for i in rows["request_id"]] if "request_id" in rows else [
        p.request_id for p in planned]  # fmt: skip
    answered = [s == "ok" for s in rows["status"]] if "status" in rows else [True] * n
    return upstreams, ids, answered


def _uncompared(cdir: Path, replica: int, why: str) -> ReplicaKv:
    """A replica whose events were not compared: ``no events file`` when it recorded none,
    else ``why``."""
    if not (replica_dir(cdir, replica) / KV_EVENTS_FILE).exists():
        return ReplicaKv(replica=replica, requests=0, recorded=False, note="no events file")
    return ReplicaKv(replica=replica, requests=0, recorded=True, note=why)


def case_kv_comparison(
    cdir: Path, case: str, plan: Plan, frame: pd.DataFrame, fleet: FleetData,
    capacity: tuple[int, int],
) -> list[ReplicaKv]:  # fmt: skip
    """:func:`fleet_kv_comparison` over every phase of case ``case`` of ``plan`` (its
    directory ``cdir``), its sent requests read from ``frame`` (``analysis.latency``'s
    request frame: ``phase``, ``index``, ``sent_ns``, ``end_ns``, ``upstream``) and rebuilt
    from the plan (``scenarios.workloads.materialize`` with the run's seed and token space).

    Raises:
        ValueError: what :func:`scenarios.prefix_cache_model.predict_hits` refuses.
    """
    spec = next(c for c in plan.cases if c.name == case)
    sent: list[tuple[Sequence[PlannedRequest], pd.DataFrame]] = []
    for ph in plan.phases_of(spec):
        if frame.empty:
            break
        rows = frame[(frame["phase"] == ph.name) & frame["sent_ns"].notna()].sort_values("index")
        if rows.empty:
            continue
        requests = materialize(ph.workload, ph.name, plan.seed, plan.tokens)
        sent.append(([requests[int(i)] for i in rows["index"]], rows))
    return fleet_kv_comparison(cdir, fleet, sent, capacity)


KV_HEADERS = ["replica", "requests", "stored", "evicted", "complete", "first divergence"]


def kv_lines(replicas: Sequence[ReplicaKv] | None) -> list[str]:
    """The report's table of a fleet case's KV-cache events beside the model, per replica
    (blocks matched / predicted / recorded); nothing without a comparison."""
    if not replicas:
        return []
    rows = []
    for r in replicas:
        k = r.comparison
        if k is None:
            rows.append([str(r.replica), "–", "–", "–", "–", r.note or ""])
            continue
        rows.append(
            [str(r.replica), str(r.requests),
             f"{k['stored_matched']} / {k['stored_predicted']} / {k['stored_recorded']}",
             f"{k['removed_matched']} / {k['removed_predicted']} / {k['removed_recorded']}",
             "yes" if k["complete"] else "no: " + "; ".join(r.notes),
             r.divergence or "none"]
        )  # fmt: skip
    basis = next((r.placed_by for r in replicas if r.placed_by), None)
    return [
        "KV-cache events beside the model (blocks matched / predicted / recorded; evictions "
        "compared in order; docs/fleet.md)"
        + (f"; the replica of each request from {basis}:" if basis else ":"),
        "",
        table(KV_HEADERS, rows),
        "",
    ]


def kv_verdict(case: str, replicas: Sequence[ReplicaKv] | None) -> Verdict:
    """The check ``FleetKvEventsMatch`` of ``case``: PASS when every replica recorded its
    events without a loss and stored exactly the blocks the model predicts for the requests
    it served (evictions are reported, not judged: under concurrency vLLM may evict in
    another order, ``analysis.kv_compare``); FAIL when a replica recorded no events or stored
    other blocks; undecided when a replica's requests are unknown (behind a router that does
    not say where it sent them), its prompts were text, or nothing was compared."""
    name = "KV events recorded for every replica, the stored blocks the model's"
    if not replicas:
        why = "no KV-event comparison (no capacity numbers or nothing sent)"
        return Verdict(case=case, check=name, passed=None, detail=why)
    parts: list[str] = []
    results: list[bool | None] = []
    for r in replicas:
        if r.comparison is None:
            parts.append(f"replica {r.replica}: {r.note}")
            results.append(False if not r.recorded else None)
            continue
        results.append(r.stored_match)
        parts.append(f"replica {r.replica}: {r.summary()}")
    passed = False if False in results else None if None in results else True
    return Verdict(case=case, check=name, passed=passed, detail="; ".join(parts))
