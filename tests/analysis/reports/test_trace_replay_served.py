"""trace-replay's cache funnel counts the requests each replica served request by request
(the gateway's answers or, behind vllm-router, the replicas' logs) beside the counters'
totals, and shows a dash where which replica served each request is unknown."""

from __future__ import annotations

import pandas as pd

from analysis.fleet import FleetFunnel
from analysis.reports.trace_replay.details import CaseFigures, PhaseFigures, _with_served
from analysis.reports.trace_replay.render import funnel_lines

FUNNEL = FleetFunnel.model_construct(
    policy="vllm-router:cache_aware", replicas=2, pooled=0.25, spread=0.0, single=0.0,
    predicted=None, predicted_low=0.1, predicted_high=0.25, requests_per_replica=[3.0, 1.0],
    prefill_tokens_per_replica=[300.0, 100.0], requests_imbalance=1.5, prefill_imbalance=1.5,
    served_per_replica=None, served_basis=None,
)  # fmt: skip
SENT = pd.DataFrame({"request_id": ["p-L1", "p-L2", "p-L3", "p-L4"]})


def _lines(funnel: FleetFunnel) -> list[str]:
    phase = PhaseFigures.model_construct(
        phase="p", fleet=funnel, hit_rate_counters=0.2, hit_rate_requests=0.2
    )
    return funnel_lines(CaseFigures.model_construct(phases={"p": phase}))


def _row(funnel: FleetFunnel) -> list[str]:
    """The table's row of phase ``p``, cell by cell."""
    return [cell.strip() for cell in _lines(funnel)[2].splitlines()[2].strip("|").split("|")]


def test_each_replicas_requests_are_counted_one_by_one_where_known() -> None:
    # p-L1, p-L2 and p-L4 on replica 0, p-L3 on replica 1; p-L9 is another phase's
    by_id: dict[str, int | None] = {"p-L1": 0, "p-L2": 0, "p-L3": 1, "p-L4": 0, "p-L9": 1}
    served = _with_served(FUNNEL, (by_id, "the replicas' request logs (vllm_requests.log)"), SENT)
    assert served.served_per_replica == [3, 1]
    row = _row(served)
    assert row[8:10] == ["3 / 1", "3 / 1"]  # counters, then per request
    assert "counted request by request from the replicas' request logs" in _lines(served)[0]


def test_unknown_replicas_show_a_dash_and_say_why() -> None:
    served = _with_served(FUNNEL, (None, "replica 1 has no vllm_requests.log"), SENT)
    assert (served.served_per_replica, served.served_basis) == (
        None, "replica 1 has no vllm_requests.log")  # fmt: skip
    assert _row(served)[9] == "–"
    assert _lines(served)[0].endswith(
        "Requests per replica are not counted request by request: replica 1 has no "
        "vllm_requests.log."
    )
