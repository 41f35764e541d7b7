"""The capacity answer's step-cost fit tells a fleet's replicas apart behind vllm-router,
which names none in its answers: each request's replica is read from the replicas' own logs
(``analysis.replica_attribution.served_by``), as the cache funnel reads it."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from analysis.fleet import FleetData
from analysis.fleet_engine_fit import unqueued
from analysis.reports.trace_replay.capacity import served_upstreams
from tests.analysis.test_replica_attribution import IDS, LOG0, LOG1

URLS = ("http://127.0.0.1:1", "http://127.0.0.1:2")
FLEET = FleetData("vllm-router:round_robin", URLS, ([], []))


def frame() -> pd.DataFrame:
    """a, b, c, e (LOG0: a and e on replica 0; LOG1: b and c on replica 1), sent at 0, 100,
    2000 and 2100 ms, each in flight 1 s; the router named no replica."""
    return pd.DataFrame({
        "case": "c", "request_id": IDS, "upstream": [None] * 4, "status": "ok",
        "sent_ns": [0, 100 * 10**6, 2000 * 10**6, 2100 * 10**6],
        "end_ns": [1000 * 10**6, 1100 * 10**6, 3000 * 10**6, 3100 * 10**6],
    })  # fmt: skip


def test_the_replicas_logs_name_each_requests_replica(tmp_path: Path) -> None:
    (tmp_path / "vllm_requests.log").write_text(LOG0)
    (tmp_path / "replicas/1").mkdir(parents=True)
    (tmp_path / "replicas/1/vllm_requests.log").write_text(LOG1)
    named = served_upstreams(tmp_path, FLEET, frame())
    assert list(named["upstream"]) == [URLS[0], URLS[1], URLS[1], URLS[0]]
    # b (sent at 100 ms while a ran until 1000 ms) and e (2100 ms, c until 3000 ms) were on
    # the other replica: all four found theirs idle. As one replica, b and e queued.
    assert list(unqueued(named)["request_id"]) == ["a", "e", "b", "c"]
    assert list(unqueued(frame())["request_id"]) == ["a", "c"]


def test_without_the_logs_or_a_fleet_the_frame_is_unchanged(tmp_path: Path) -> None:
    (tmp_path / "vllm_requests.log").write_text(LOG0)  # replica 1 has none: undecided
    assert served_upstreams(tmp_path, FLEET, frame())["upstream"].isna().all()
    assert served_upstreams(tmp_path, None, frame())["upstream"].isna().all()
