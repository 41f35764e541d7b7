"""Which replica served each request, read from the replicas' own logs
(``analysis.replica_attribution``): vLLM's ``Received request <id>: params:`` lines amid its
other output, the id mapped back to the client's ``X-Request-Id``, and an undecided answer,
naming why, when a replica has no log, a request is in two logs or an answered one in none.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from analysis.fleet import FleetData
from analysis.replica_attribution import (
    FROM_LOGS,
    attribute,
    case_placement,
    read_attribution,
    record_id,
)

#: The prefix vLLM 0.32.0's API server puts before a logged line (the real run's format).
PREFIX = "(APIServer pid=32645) INFO 12-05 10:29:37 [request_logger.py:65] "
PARAMS = ": params: SamplingParams(n=1, temperature=0.0, max_tokens=4), lora_request: None."


def received(vllm_id: str) -> str:
    return f"{PREFIX}Received request {vllm_id}{PARAMS}\n"


NOISE = (
    '(APIServer pid=32645) INFO:     127.0.0.1:40312 - "POST /v1/completions HTTP/1.1" 200 OK\n'
    "(APIServer pid=32645) INFO 12-05 10:29:47 [loggers.py:259] Engine 000: Avg prompt "
    "throughput: 70.4 tokens/s, Avg generation throughput: 0.4 tokens/s, Running: 1 reqs\n"
    "a line cut short: Received request cmpl-b-0\n"  # no ': params: ' after it: not a receipt
)
#: Replica 0 received a (a completion), e (a chat) and a warm-up of no request of the case;
#: replica 1 received c, and b twice (a duplicate within one log counts once).
LOG0 = NOISE + received("cmpl-a-0") + received("chatcmpl-e") + received("cmpl-warmup-0")
LOG1 = received("cmpl-b-0") + NOISE + received("cmpl-c-0") + received("cmpl-b-0")
IDS = ["a", "b", "c", "e"]


def test_vllms_ids_map_back_to_the_clients() -> None:
    known = {"a", "x-1", "speedup-2x-L00002"}
    assert record_id("cmpl-speedup-2x-L00002-0", known) == "speedup-2x-L00002"
    assert record_id("chatcmpl-a", known) == "a"
    assert record_id("cmpl-x-1-0", known) == "x-1"  # the id itself ends in -1
    assert record_id("cmpl-zzz-0", known) is None


def test_every_request_is_placed_from_the_replicas_logs_amid_their_noise() -> None:
    found = attribute([LOG0, LOG1], IDS)
    assert dict(found.replica_of) == {"a": 0, "e": 0, "b": 1, "c": 1}
    assert (dict(found.on_several), found.without_log, found.foreign) == ({}, (), 1)
    assert found.placements(["c", "a", "b", "e"], [True] * 4) == ([1, 0, 1, 0], FROM_LOGS)


def test_a_request_in_two_replicas_logs_is_undecided_and_named() -> None:
    found = attribute([LOG0 + received("cmpl-b-0"), LOG1], IDS)
    assert dict(found.on_several) == {"b": (0, 1)}
    placed, why = found.placements(IDS, [True] * 4)
    assert placed is None
    assert why == (
        "1 request(s) are in several replicas' logs (first: b, in replicas 0 and 1's): which "
        "one served them is unknown"
    )


def test_an_answered_request_in_no_log_is_undecided_a_failed_one_reached_no_replica() -> None:
    found = attribute([LOG0, LOG1], [*IDS, "d"])
    placed, why = found.placements([*IDS, "d"], [True] * 5)
    assert placed is None
    assert why == (
        "1 request(s) answered ok are in no replica's log (first: d): which replica served "
        "them is unknown"
    )
    placed, why = found.placements([*IDS, "d"], [True, True, True, True, False])
    assert placed == [0, 1, 1, 0, None]
    assert why == FROM_LOGS + "; 1 failed request(s) reached no replica"


def test_a_replica_without_its_log_is_undecided(tmp_path: Path) -> None:
    (tmp_path / "vllm_requests.log").write_text(LOG0)
    found = read_attribution(tmp_path, 2, IDS)
    assert found.without_log == (1,)
    why = "replica 1 has no vllm_requests.log: which requests it served is unknown"
    assert found.placements(IDS, [True] * 4) == (None, why)


@pytest.mark.parametrize("routing", ["vllm-router:round_robin", "vllm-router:cache_aware"])
def test_behind_vllm_router_the_logs_decide_where_the_model_cannot(
    tmp_path: Path, routing: str
) -> None:
    fleet = FleetData(routing, ("http://127.0.0.1:1", "http://127.0.0.1:2"), ([], []))
    rows = ([None] * 4, IDS, [True] * 4)
    unknown = case_placement(tmp_path, fleet, rows, [], [], (64, 4))
    assert unknown.replicas is None
    assert unknown.basis == (
        "replicas 0 and 1 have no vllm_requests.log: which requests they served is unknown"
    )
    (tmp_path / "vllm_requests.log").write_text(LOG0)
    (tmp_path / "replicas/1").mkdir(parents=True)
    (tmp_path / "replicas/1/vllm_requests.log").write_text(LOG1)
    placed = case_placement(tmp_path, fleet, rows, [], [], (64, 4))
    assert (placed.replicas, placed.basis) == ([0, 1, 1, 0], FROM_LOGS)
