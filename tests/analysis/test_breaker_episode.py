"""The breaker episode's figures and verdict from a gateway log, faults and records."""

from __future__ import annotations

import json
from pathlib import Path

from analysis.breaker import episode, transitions
from analysis.checks import evaluate
from analysis.load import CaseData
from scenarios.checks import BreakerEpisode

S = 1_000_000_000
A, B = "http://127.0.0.1:1001", "http://127.0.0.1:1002"
LOG = f"""\
2026-11-30 14:44:01 INFO gateway.app: started
2026-11-30 14:44:12 WARNING gateway.breaker: breaker {B}: closed -> open at 112.500 s (3 consecutive failures)
2026-11-30 14:44:15 INFO gateway.breaker: breaker {B}: open -> half_open at 115.600 s (cool-down over)
2026-11-30 14:44:15 WARNING gateway.breaker: breaker {B}: half_open -> open at 115.700 s (probe failed)
2026-11-30 14:44:31 INFO gateway.breaker: breaker {B}: open -> half_open at 131.000 s (cool-down over)
2026-11-30 14:44:31 INFO gateway.breaker: breaker {B}: half_open -> closed at 131.200 s (probe succeeded)
"""  # noqa: E501


def _write(tmp: Path) -> tuple[CaseData, dict]:
    (tmp / "gateway.log").write_text(LOG)
    faults = [
        {"fault": "kill_replica", "replica": 1, "url": B, "killed_ns": 110 * S,
         "stopped_ns": 111 * S},
        {"fault": "restarted", "replica": 1, "url": B, "healthy_ns": 130 * S, "startup_s": 19.0},
    ]  # fmt: skip
    (tmp / "faults.jsonl").write_text("".join(json.dumps(f) + "\n" for f in faults))
    records = []
    for i in range(40):  # one request per second from t = 100 s
        sent = 100 * S + i * S
        down = 110 * S <= sent < 113 * S and i % 2 == 0  # 2 failures before the breaker opened
        records.append({
            "request_id": f"r{i}", "phase": "episode", "sent_ns": sent,
            "status": "error" if down else "ok",
            "upstream": None if down else (A if (i % 2 or 110 * S <= sent < 131 * S) else B),
        })  # fmt: skip
    phase = {"phase": "episode", "start_ns": 100 * S, "last_end_ns": 140 * S, "end_ns": 141 * S}
    return CaseData("episode", {}, records, [phase], [], []), phase


def test_transitions_are_read_with_their_monotonic_times(tmp_path: Path) -> None:
    found = transitions(tmp_path / "missing.log")
    assert found == []
    (tmp_path / "gateway.log").write_text(LOG)
    found = transitions(tmp_path / "gateway.log")
    assert [(t["from"], t["to"]) for t in found] == [
        ("closed", "open"), ("open", "half_open"), ("half_open", "open"),
        ("open", "half_open"), ("half_open", "closed"),
    ]  # fmt: skip
    assert found[0]["t_ns"] == 112_500_000_000
    assert found[0]["upstream"] == B


def test_episode_counts_goodput_and_traffic_per_upstream(tmp_path: Path) -> None:
    case, phase = _write(tmp_path)
    ep = episode(case, tmp_path, phase)
    assert (ep["requests"], ep["ok"], ep["failed"]) == (40, 38, 2)
    assert ep["goodput_req_s"] == 38 / 40
    assert ep["faults"][0]["killed_s"] == 10.0
    assert ep["faults"][1]["healthy_s"] == 30.0
    assert ep["transitions"][0]["t_s"] == 12.5
    assert ep["per_second"][10]["failed"] == 1


def test_verdict_passes_for_open_probe_close(tmp_path: Path) -> None:
    case, phase = _write(tmp_path)
    report_case = {"phases": {"episode": {}}, "breaker": [episode(case, tmp_path, phase)]}
    (verdict,) = evaluate((BreakerEpisode(case="episode", phase="episode", replica=1),),
                          {"episode": report_case})  # fmt: skip
    assert verdict.passed is True
    assert "open 12.50 s, first half-open 15.60 s, closed 31.20 s" in verdict.detail


def test_verdict_fails_when_the_breaker_never_closes(tmp_path: Path) -> None:
    case, phase = _write(tmp_path)
    (tmp_path / "gateway.log").write_text("\n".join(LOG.splitlines()[:4]) + "\n")
    report_case = {"phases": {"episode": {}}, "breaker": [episode(case, tmp_path, phase)]}
    (verdict,) = evaluate((BreakerEpisode(case="episode", phase="episode", replica=1),),
                          {"episode": report_case})  # fmt: skip
    assert verdict.passed is False
    assert "closed never" in verdict.detail
