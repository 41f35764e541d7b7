"""A fleet case's KV-cache events beside the model per replica: the replica of each request
read from the gateway's answers, each replica's recorded blocks compared with the model's
blocks for its own requests, the first divergence named, and the verdict over replicas."""

from __future__ import annotations

from pathlib import Path

import msgspec
import pandas as pd

from analysis.fleet import FleetData
from analysis.fleet_kv import ReplicaKv, fleet_kv_comparison
from analysis.models import CaseSummary
from analysis.replica_attribution import case_placement
from analysis.reports.trace_replay.details import CaseFigures, TraceReplayDetails
from analysis.reports.trace_replay.verdicts import kv_events_verdict
from loadgen.runformat import KvEventRow
from scenarios.fleet_cases import FleetKvEventsMatch
from scenarios.requests import PlannedRequest
from scenarios.tokens import TokenSpace
from scenarios.workloads import TraceItem, TracePrompts, materialize

SUMMARY = CaseSummary.model_construct()
URLS = ("http://127.0.0.1:8000", "http://127.0.0.1:8001")
SPACE = TokenSpace()
# Three 8-token prompts of two 4-token blocks: L1 (hash ids 1, 2) and L3 (1, 4) share their
# first block; L2 (1, 3) too, but it is sent to the other replica.
WORKLOAD = TracePrompts(
    trace_sha256="0" * 64, token_scale="1", block_tokens=4, salt="speedup-1x",
    items=tuple(TraceItem(line=n, input_tokens=8, output_tokens=1, hash_ids=(1, h))
                for n, h in ((1, 2), (2, 3), (3, 4))),
)  # fmt: skip


#: The three requests as trace-replay's phase ``speedup-1x`` sent them (seed 0).
REQUESTS: list[PlannedRequest] = materialize(WORKLOAD, "speedup-1x", 0, SPACE)[0:3]


def sent(upstreams: list[str | None]) -> pd.DataFrame:
    """Requests one after another, 1 s each."""
    return pd.DataFrame({
        "index": [0, 1, 2], "sent_ns": [0, 2_000, 4_000], "end_ns": [1_000, 3_000, 5_000],
        "upstream": upstreams,
    })  # fmt: skip


def stored(seq: int, hashes: list[int], parent: int | None, tokens: list[int]) -> KvEventRow:
    return KvEventRow(event="stored", seq=seq, recv_ns=seq, block_hashes=hashes,
                      parent_block_hash=parent, token_ids=tokens, block_size=4)  # fmt: skip


def write(path: Path, rows: list[KvEventRow]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"".join(msgspec.json.encode(r) + b"\n" for r in rows))


def fleet() -> FleetData:
    return FleetData("prefix-hash", URLS, ([], []))


def test_the_gateways_answers_say_which_replica_served_each_request(tmp_path: Path) -> None:
    rows = ([URLS[1], URLS[0] + "/", URLS[1]], ["a", "b", "c"], [True] * 3)
    placed = case_placement(tmp_path, fleet(), rows, [], [], (64, 4))
    assert placed.replicas == [1, 0, 1]
    assert placed.basis == "the gateway's answers (X-Gateway-Upstream)"


def test_each_replicas_recorded_blocks_are_compared_with_its_own_requests(tmp_path: Path) -> None:
    t = [list(r.prompt_token_ids) for r in REQUESTS]
    assert t[0][:4] == t[1][:4] == t[2][:4] and t[0][4:] != t[2][4:]
    # Replica 0 served L1 (stores both its blocks) and L3 (hits the first, stores its second
    # under it); replica 1 served L2 alone (stores both: its cache never saw block 1).
    cleared = KvEventRow(event="cleared", seq=0, recv_ns=0)
    write(tmp_path / "kv_events.jsonl", [
        cleared, stored(1, [11, 12], None, t[0]), stored(2, [14], 11, t[2][4:])])  # fmt: skip
    write(tmp_path / "replicas/1/kv_events.jsonl", [cleared, stored(1, [21, 22], None, t[1])])
    upstreams: list[str | None] = [URLS[0], URLS[1], URLS[0]]
    result = fleet_kv_comparison(tmp_path, fleet(), [(REQUESTS, sent(upstreams))], (64, 4))
    assert [(r.replica, r.requests, r.stored_match) for r in result] == [(0, 2, True), (1, 1, True)]
    counts = result[0].comparison
    assert counts is not None
    assert (counts["stored_predicted"], counts["stored_recorded"]) == (3, 3)
    verdict = kv_events_verdict(FleetKvEventsMatch(case="c"), SUMMARY, _details(result))
    assert verdict.passed is True, verdict.detail

    # Replica 1 reports a second block that is not L2's (L1's, which no request of replica 1
    # holds, so to its comparison it is a block of no prompt): the divergence names it.
    wrong = [*t[1][:4], *t[0][4:]]
    write(tmp_path / "replicas/1/kv_events.jsonl", [cleared, stored(1, [21, 22], None, wrong)])
    result = fleet_kv_comparison(tmp_path, fleet(), [(REQUESTS, sent(upstreams))], (64, 4))
    assert result[1].stored_match is False
    assert result[1].divergence == (
        "stored block #1 of speedup-1x-L00002, block 1 of its prompt: the model expected prompt "
        "block 1 of speedup-1x-L00002, the engine reported a block of no prompt (generated "
        "tokens)"
    )
    verdict = kv_events_verdict(FleetKvEventsMatch(case="c"), SUMMARY, _details(result))
    assert verdict.passed is False


def test_without_the_replica_of_each_request_nothing_is_compared(tmp_path: Path) -> None:
    write(tmp_path / "kv_events.jsonl", [])
    write(tmp_path / "replicas/1/kv_events.jsonl", [])
    cache_aware = FleetData("vllm-router:cache_aware", URLS, ([], []))
    result = fleet_kv_comparison(tmp_path, cache_aware, [(REQUESTS, sent([None] * 3))], (64, 4))
    assert [r.stored_match for r in result] == [None, None]
    verdict = kv_events_verdict(FleetKvEventsMatch(case="c"), SUMMARY, _details(result))
    assert verdict.passed is None
    missing = [ReplicaKv(replica=0, requests=0, recorded=False, note="no events file")]
    assert kv_events_verdict(FleetKvEventsMatch(case="c"), SUMMARY,
                             _details(missing)).passed is False  # fmt: skip


def _details(kv: list[ReplicaKv]) -> TraceReplayDetails:
    figures = CaseFigures.model_construct(kv_events=kv)
    return TraceReplayDetails.model_construct(cases={"c": figures})
