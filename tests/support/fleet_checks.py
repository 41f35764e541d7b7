"""Checks every real fleet run's report and directory must pass, whatever its workload: each
policy's hit-rate verdict, its funnel, and replicas started once and shared by every policy."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest


def check_funnels(report: dict[str, Any], policies: tuple[str, ...], phase: str, sent: int) -> None:
    """Every policy's "hit rate within" verdict passed, in ``policies`` order; in ``phase``
    each case's funnel spans 2 replicas that together got the ``sent`` requests, and the
    requests' own cached tokens agree with both replicas' counters (within 0.01)."""
    verdicts = [v for v in report["verdicts"] if "hit rate within" in v["check"]]
    assert [v["case"] for v in verdicts] == list(policies)
    assert all(v["passed"] is True for v in verdicts), json.dumps(verdicts, indent=2)
    for name in policies:
        row = report["details"]["cases"][name]["phases"][phase]
        funnel = row["fleet"]
        assert funnel["replicas"] == 2 and row["sent"] == sent
        # The counters of both replicas and the requests' own cached tokens agree.
        assert row["hit_rate_requests"] == pytest.approx(row["hit_rate_counters"], abs=0.01)
        assert sum(funnel["requests_per_replica"]) == sent


def check_replicas_started_once(run: Path, policies: tuple[str, ...], sent: int) -> None:
    """The first policy's case started both replicas and every later one reused them; each
    case scraped replica 1, and prefix-hash's gateway recorded one decision per request."""
    cases = run / "cases"
    started = sorted(p.parent.name for p in cases.glob("*/server-replica-1"))
    assert started == ["round-robin"]  # the first policy's case started them; the rest reused
    for name in policies:
        fleet = json.loads((cases / name / "fleet.json").read_text())
        assert len(fleet["replica_urls"]) == 2
        assert (cases / name / "replicas/1/metrics/samples.jsonl").stat().st_size > 0
    decisions = (cases / "prefix-hash/routing_decisions.jsonl").read_text().splitlines()
    assert len(decisions) == sent
    assert {json.loads(d)["policy"] for d in decisions} == {"prefix-hash"}
