"""A replica killed mid-phase: every planned request ends exactly once (lost and doubled ids
named), and the keys the gateway moved off the killed replica are read from its decisions."""

from __future__ import annotations

from pathlib import Path

import msgspec

from analysis.fleet_faults import kill_figures, remapped_keys
from loadgen.runformat import FaultRow, RoutingDecisionRow
from tests.support.row_builders import record

KILL_NS = 10_000_000_000  # 10 s


def decision(t_s: float, key: str, replica: int, why: str, attempt: int = 0) -> RoutingDecisionRow:
    return RoutingDecisionRow(
        t_ns=int(t_s * 1e9), upstream=f"http://127.0.0.1:800{replica}", replica=replica,
        policy="prefix-hash", key=key, why=why, home=1 if key.startswith("b") else 0,
        attempt=attempt,
    )  # fmt: skip


# Keys a… live on replica 0, b… on replica 1, killed at 10 s. Before: b1 and b2 matched on 1.
# After: b1 still sent to 1 once (its breaker not yet open: the connection refused, retried
# on 0 as attempt 1), then b1 twice and b2 once passed on to 0 by the open breaker; a1 stays.
DECISIONS = [
    decision(9.0, "b1", 1, "matched"),
    decision(9.5, "b2", 1, "matched"),
    decision(10.2, "b1", 1, "matched"),
    decision(10.2, "b1", 0, "passed-on-breaker", attempt=1),
    decision(11.0, "a1", 0, "matched"),
    decision(11.5, "b2", 0, "passed-on-breaker"),
    decision(12.0, "b1", 0, "passed-on-breaker"),
]


def test_keys_moved_off_the_killed_replica_by_its_breaker_are_remapped() -> None:
    moved = remapped_keys(DECISIONS, 1, KILL_NS)
    assert [(k.key, k.home, k.moved_to, k.decisions) for k in moved] == [
        ("b1", 1, [0], 2),  # 10.2 s (the retry) and 12.0 s
        ("b2", 1, [0], 1),
    ]
    assert [round(k.first_after_kill_s, 6) for k in moved] == [0.2, 1.5]
    assert remapped_keys(DECISIONS, 0, KILL_NS) == []  # replica 0's keys never moved


def test_every_planned_request_is_accounted_once(tmp_path: Path) -> None:
    kill = FaultRow(fault="kill_replica", replica=1, url="http://127.0.0.1:8001",
                    killed_ns=KILL_NS, stopped_ns=KILL_NS + 5)  # fmt: skip
    (tmp_path / "faults.jsonl").write_bytes(msgspec.json.encode(kill) + b"\n")
    (tmp_path / "routing_decisions.jsonl").write_bytes(
        b"".join(msgspec.json.encode(d) + b"\n" for d in DECISIONS)
    )
    reset = "connection reset by peer while reading the response (http://127.0.0.1:8001)"
    rows = [
        record(request_id="p-L1", status="ok"),
        record(request_id="p-L2", status="error", error=reset),
        record(request_id="p-L3", status="not_sent"),
        record(request_id="p-L4", status="ok"),
        record(request_id="p-L4", status="ok"),
    ]
    k = kill_figures(tmp_path, ["p-L1", "p-L2", "p-L3", "p-L4", "p-L5"], rows)
    assert k is not None
    assert (k.planned, k.completed, k.failed, k.not_sent) == (5, 3, 1, 1)
    assert k.failure_reasons == {reset[:80]: 1}
    assert (k.lost, k.counted_twice, k.accounted) == (["p-L5"], ["p-L4"], False)
    # 5 decisions at or after 10 s; one still to replica 1; one retry; b1 and b2 remapped.
    assert (k.decisions_after_kill, k.to_killed_after_kill, k.retries) == (5, 1, 1)
    assert [r.key for r in k.remapped_keys] == ["b1", "b2"]
    assert kill_figures(tmp_path / "none", ["p-L1"], rows) is None
