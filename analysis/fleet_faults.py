"""A fleet case whose replica was killed mid-phase (``--kill-replica K@T``, docs/fleet.md):
what happened to every planned request and to the killed replica's routing keys.

- **Requests**: every planned request of the phase must end exactly once in the records: a
  completion (``ok``), a failure with its reason (``error``, ``aborted``, ``interrupted``), or
  ``not_sent``. A planned id with no record is *lost*; an id with two records is *counted
  twice*. Failures are grouped by their reason (the record's ``error``, cut to 80 characters).
- **Keys** (the gateway's ``routing_decisions.jsonl``, one row per attempt): a key is
  *remapped* when a decision after the kill sent it off its own replica because that replica
  could not take traffic (``why = passed-on-breaker``, ``home`` = the killed replica). Per
  key: its home, where it went, how many decisions moved it, and the first such decision's
  time after the kill. Also counted: decisions after the kill that still went to the killed
  replica (before its breaker opened) and retries (``attempt`` 1: the first choice refused the
  connection).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from analysis.load import read_jsonl
from loadgen.runformat import FaultRow, RequestRecord, RoutingDecisionRow
from loadgen.runformat.layout import FAULTS_FILE, ROUTING_DECISIONS_FILE

#: Failure reasons are grouped by their first characters (a reason names the request's URL
#: or id further on).
REASON_CHARS = 80


class RemappedKey(BaseModel):
    """One routing key moved off the killed replica (module doc)."""

    model_config = ConfigDict(frozen=True)

    key: str
    home: int
    moved_to: list[int]
    decisions: int
    first_after_kill_s: float


class KillFigures(BaseModel):
    """The kill of one fleet case's phase (module doc); times in seconds after the kill."""

    model_config = ConfigDict(frozen=True)

    replica: int
    url: str
    killed_ns: int
    planned: int
    completed: int
    failed: int
    not_sent: int
    failure_reasons: dict[str, int]
    lost: list[str]
    counted_twice: list[str]
    decisions_after_kill: int
    to_killed_after_kill: int
    retries: int
    remapped_keys: list[RemappedKey]

    @property
    def accounted(self) -> bool:
        """Every planned request ended exactly once."""
        return not self.lost and not self.counted_twice


def _requests(planned_ids: Sequence[str], records: Sequence[RequestRecord]) -> dict[str, object]:
    seen = Counter(r.request_id for r in records)
    statuses = Counter(r.status for r in records)
    reasons = Counter(
        (r.error or r.status)[:REASON_CHARS] for r in records if r.status not in ("ok", "not_sent")
    )
    return {
        "planned": len(planned_ids),
        "completed": statuses["ok"],
        "not_sent": statuses["not_sent"],
        "failed": sum(n for s, n in statuses.items() if s not in ("ok", "not_sent")),
        "failure_reasons": dict(sorted(reasons.items())),
        "lost": [i for i in planned_ids if i not in seen],
        "counted_twice": sorted(i for i, n in seen.items() if n > 1),
    }


def remapped_keys(
    decisions: Sequence[RoutingDecisionRow], replica: int, killed_ns: int
) -> list[RemappedKey]:
    """The keys whose decisions after ``killed_ns`` moved them off ``replica`` because it
    could not take traffic, in order of their first move."""
    moved: dict[str, list[RoutingDecisionRow]] = {}
    for d in decisions:
        if (
            d.t_ns >= killed_ns
            and d.key is not None
            and d.why == "passed-on-breaker"
            and d.home == replica
        ):
            moved.setdefault(d.key, []).append(d)
    return [
        RemappedKey(
            key=key,
            home=replica,
            moved_to=sorted({d.replica for d in rows}),
            decisions=len(rows),
            first_after_kill_s=(rows[0].t_ns - killed_ns) / 1e9,
        )
        for key, rows in sorted(moved.items(), key=lambda kv: kv[1][0].t_ns)
    ]


def kill_figures(
    cdir: Path, planned_ids: Sequence[str], records: Sequence[RequestRecord]
) -> KillFigures | None:
    """The kill recorded in ``cdir``'s ``faults.jsonl`` (its first ``kill_replica`` row), the
    phase's ``planned_ids`` and its ``records``; ``None`` when no kill was recorded."""
    faults = read_jsonl(cdir / FAULTS_FILE, FaultRow).rows
    kill = next((f for f in faults if f.fault == "kill_replica" and f.killed_ns is not None), None)
    if kill is None or kill.killed_ns is None:
        return None
    decisions = read_jsonl(cdir / ROUTING_DECISIONS_FILE, RoutingDecisionRow).rows
    after = [d for d in decisions if d.t_ns >= kill.killed_ns]
    return KillFigures(
        replica=kill.replica, url=kill.url, killed_ns=kill.killed_ns,
        decisions_after_kill=len(after),
        to_killed_after_kill=sum(1 for d in after if d.replica == kill.replica),
        retries=sum(1 for d in decisions if d.attempt > 0),
        remapped_keys=remapped_keys(decisions, kill.replica, kill.killed_ns),
        **_requests(planned_ids, records),  # type: ignore[arg-type]
    )  # fmt: skip
