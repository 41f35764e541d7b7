"""The fleet model's kv_aware against two real runs of vllm-router 0.1.17 (fixture
``tests/fixtures/fleet_kv_aware/runs.json``: the built-in workload's 105 requests on 2
replicas of 145 usable blocks; each request's send, first token and end as the client
recorded them, and the replicas' counters).

The funnel replays the records' order with each first token (``with_first_tokens``): in
``apart`` every request ended before the next was sent, so every new group tied and went to
the router's first worker, which thrashed: 0 hits, 105 requests on one replica (replica 1
there: the router listed it first). In ``overlapping`` (the client had no core of its own,
and requests took longer) a new group arriving while the first worker ran a request went to
the other, and every repeat found its group: 44,800 of 73,920 tokens hit, as measured. One
decision of 105 differs: request 26 was sent 10 ms before the client read the end of request
25 on replica 0, which the router had already seen end, so the router sent it to replica 0
where the model, following the client's clock, sends it to replica 1: 78 / 27 requests
predicted, 81 / 24 measured, the same hit rate.
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from analysis.fleet import with_first_tokens
from analysis.fleet_kv import measured_events
from scenarios.fleet import workload
from scenarios.fleet.model import predict_fleet
from scenarios.fleet.requests import trace_fleet_requests

RUNS = json.loads((Path(__file__).parents[1] / "fixtures/fleet_kv_aware/runs.json").read_text())[
    "runs"
]


def frame(rows: list[list[int]]) -> pd.DataFrame:
    return pd.DataFrame(
        {
            "index": [r[0] for r in rows],
            "sent_ns": [r[1] for r in rows],
            "chunk_ns": [[r[2]] for r in rows],
            "end_ns": [r[3] for r in rows],
        }
    )


#: Each run and the requests per replica the model predicts for it.
CASES = [("apart", [105, 0]), ("overlapping", [78, 27])]


@pytest.mark.parametrize(("name", "predicted_requests"), CASES)
def test_the_model_gives_each_runs_measured_hits(name: str, predicted_requests: list[int]) -> None:
    run = RUNS[name]
    sent = frame(run["rows"])
    assert list(sent["index"]) == list(range(105))
    events = with_first_tokens(measured_events(sent), sent)
    assert sum(1 for kind, _ in events if kind == "first") == 105
    requests = trace_fleet_requests(workload.fleet_workload_trace(), 128)
    (kv,) = predict_fleet(requests, 2, 145, 128, ["vllm-router:kv_aware"], events).policies
    assert kv.exact
    assert (sum(kv.low.hit_tokens), sum(kv.low.query_tokens)) == (run["hits"], run["queries"])
    assert kv.low.requests_per_replica() == predicted_requests


def test_first_tokens_go_between_their_requests_start_and_end() -> None:
    """Row 0 sent at 0, first token at 5, end 9; row 1 sent at 5, first token 7, end 8; row
    2 sent at 6 with no token (it failed), ended at 8. Starts at their sends, ends at theirs
    (first on a tie), a first token before any event at its own ns; row 2 has no first-token
    event, its end stands for it."""
    sent = pd.DataFrame({"sent_ns": [0, 5, 6], "chunk_ns": [[5, 6], [7], []], "end_ns": [9, 8, 8]})
    events = with_first_tokens(measured_events(sent), sent)
    assert events == [
        ("start", 0), ("first", 0), ("start", 1), ("start", 2), ("first", 1), ("end", 1),
        ("end", 2), ("end", 0),
    ]  # fmt: skip
