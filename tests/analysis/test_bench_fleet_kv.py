"""bench's fleet cases compare each replica's KV-cache events with the prefix-cache model,
the mechanism trace-replay's fleet cases use (``analysis.fleet_kv``), on a recording.

The recording (``tests/fixtures/kv_events/bench_fleet/``: the plan, and per case the records,
``fleet.json`` and both replicas' ``kv_events.jsonl``) is of a real run on two embedded vLLM
0.32.0 replicas of 1 GiB (146 blocks of 128 tokens, 145 usable):
``loadgen run bench --replicas 2 --routing round-robin,vllm-router:consistent_hash
--requests 8 --concurrency 2 --input-len 300 --output-len 4 --cache 1GiB``.

By hand: every prompt is 300 distinct synthetic token IDs, so it holds 2 full blocks (256
tokens) and shares none with another; with 4 generated tokens a request reaches 303 tokens
before its last step, short of a third block. So each request stores exactly 2 blocks and
nothing is ever hit or evicted (16 blocks ≪ 145). Round-robin sends 4 requests to each
replica (8 blocks each); behind vllm-router, which does not say where a request went,
``consistent_hash``'s placement is the model's (keyed by each request's ``X-Request-Id``
on the ring of ``fleet.json``'s URLs): 6 and 2 requests, and the engines' own files hold 6
and 2 ``stored`` events of 2 blocks each (12 and 4 blocks), which is the model's split.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from analysis.fleet import FleetData
from analysis.fleet_kv import TEXT_PROMPTS, case_kv_comparison, fleet_kv_comparison, kv_lines
from analysis.latency import request_frame
from analysis.models import CaseSummary
from analysis.reports.bench import REPORT, BenchCase, BenchDetails
from loadgen.runformat.record_files import read_records
from scenarios.bench import Bench, BenchParams
from scenarios.fleet_cases import FleetKvEventsMatch
from scenarios.registry import plan_from_data
from scenarios.requests import PlannedRequest
from server.capacity import KVCapacity

FIXTURE = Path(__file__).parents[1] / "fixtures" / "kv_events" / "bench_fleet"
#: 1 GiB of the embedded model's KV: 146 blocks of 128 tokens, one of them vLLM's null block.
CAPACITY = (145, 128)


def _compare(case: str) -> list[tuple[object, ...]]:
    """(replica, requests, stored matched, predicted, recorded, matches) per replica."""
    plan = plan_from_data(json.loads((FIXTURE / "plan.json").read_text()))
    cdir = FIXTURE / "cases" / case
    facts = json.loads((cdir / "fleet.json").read_text())
    fleet = FleetData(facts["routing"], tuple(facts["replica_urls"]), ([], []))
    frame = request_frame(read_records(cdir).records)
    out = []
    for r in case_kv_comparison(cdir, case, plan, frame, fleet, CAPACITY):
        c = r.comparison
        assert c is not None, r.note
        assert c["removed_predicted"] == c["removed_recorded"] == 0
        out.append((r.replica, r.requests, c["stored_matched"], c["stored_predicted"],
                    c["stored_recorded"], r.stored_match))  # fmt: skip
    return out


def test_round_robin_replicas_store_each_request_two_blocks_as_the_model_says() -> None:
    assert _compare("round-robin") == [(0, 4, 8, 8, 8, True), (1, 4, 8, 8, 8, True)]


def test_behind_vllm_router_the_exact_placement_of_consistent_hash_is_compared() -> None:
    got = _compare("vllm-router-consistent_hash")
    assert got == [(0, 6, 12, 12, 12, True), (1, 2, 4, 4, 4, True)]


def test_text_prompts_are_not_compared_and_say_why(tmp_path: Path) -> None:
    # A dataset's text is tokenized by the server: its blocks cannot be keyed by the model.
    (tmp_path / "kv_events.jsonl").write_text("")
    text = PlannedRequest(request_id="c1-0000", prompt_token_ids=(), max_tokens=4,
                          prompt_text="hello")  # fmt: skip
    frame = request_frame([])
    fleet = FleetData("round-robin", ("http://127.0.0.1:1", "http://127.0.0.1:2"), ([], []))
    result = fleet_kv_comparison(tmp_path, fleet, [([text], frame)], CAPACITY)
    assert [(r.replica, r.recorded, r.note) for r in result] == [
        (0, True, TEXT_PROMPTS), (1, False, "no events file")]  # fmt: skip


def test_bench_plans_the_check_and_its_report_shows_the_table() -> None:
    capacity = KVCapacity(18_688, 128, 146, 2**30, "metrics")
    params = BenchParams(replicas=2, routing="round-robin,prefix-hash", requests=2)
    plan = Bench().plan(params, capacity)
    kv_checks = [c for c in plan.checks if isinstance(c, FleetKvEventsMatch)]
    assert [c.case for c in kv_checks] == ["round-robin", "prefix-hash"]

    plan_rr = plan_from_data(json.loads((FIXTURE / "plan.json").read_text()))
    cdir = FIXTURE / "cases" / "round-robin"
    facts = json.loads((cdir / "fleet.json").read_text())
    fleet = FleetData(facts["routing"], tuple(facts["replica_urls"]), ([], []))
    frame = request_frame(read_records(cdir).records)
    kv = case_kv_comparison(cdir, "round-robin", plan_rr, frame, fleet, CAPACITY)
    details = BenchDetails(slo={}, cases=[BenchCase(case="round-robin", phases=[],
                                                    kv_events=kv)])  # fmt: skip
    verdict = REPORT.evaluators[FleetKvEventsMatch](
        FleetKvEventsMatch(case="round-robin"), CaseSummary.model_construct(), details
    )
    assert verdict.passed is True, verdict.detail
    assert verdict.detail.startswith("replica 0: 4 requests, stored 8 matched of 8 predicted")
    assert kv_lines(kv)[2].splitlines()[2:] == [
        "| 0 | 4 | 8 / 8 / 8 | 0 / 0 / 0 | yes | none |",
        "| 1 | 4 | 8 / 8 / 8 | 0 / 0 / 0 | yes | none |",
    ]


@pytest.mark.parametrize("case", ["round-robin", "vllm-router-consistent_hash"])
def test_the_recorded_files_hold_two_blocks_per_stored_event(case: str) -> None:
    # The raw facts the expectations above rest on, read without the comparison.
    counts = []
    for path in (FIXTURE / "cases" / case / "kv_events.jsonl",
                 FIXTURE / "cases" / case / "replicas" / "1" / "kv_events.jsonl"):  # fmt: skip
        rows = [json.loads(line) for line in path.read_text().splitlines()]
        assert rows[0]["event"] == "cleared"  # the reset before the case
        assert {len(r["block_hashes"]) for r in rows[1:]} == {2}
        counts.append(len(rows) - 1)
    assert counts == ([4, 4] if case == "round-robin" else [6, 2])
