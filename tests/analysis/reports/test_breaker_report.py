"""breaker's report: the episode's figures and verdict from gateway events, faults and records."""

from __future__ import annotations

import json
from pathlib import Path

from analysis.checks import evaluate
from analysis.load import CaseData, load_case
from analysis.reports.breaker.report import REPORT, BreakerDetails, episode
from loadgen.runformat import FORMAT_VERSION, PhaseRow, RunInfo
from loadgen.runformat.layout import RUN_FILE, append_jsonl, write_json
from scenarios.breaker import BreakerEpisode
from scenarios.plan import CaseSpec
from tests.support.summary_builders import case, phase

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


EVENTS = [
    (112.5, "closed", "open", "3 consecutive failures"),
    (115.6, "open", "half_open", "cool-down elapsed"),
    (115.7, "half_open", "open", "probe failed"),
    (131.0, "open", "half_open", "cool-down elapsed"),
    (131.2, "half_open", "closed", "probe succeeded"),
]


def _events(rows: list[tuple[float, str, str, str]]) -> str:
    return "".join(
        json.dumps({"t_ns": round(t * S), "event": "breaker_transition", "upstream": B,
                    "from": a, "to": b, "reason": why}) + "\n"
        for t, a, b, why in rows
    )  # fmt: skip


def _write(
    tmp: Path, events: str | None = None, version: int = FORMAT_VERSION
) -> tuple[CaseData, PhaseRow]:
    """A case directory of a run of format ``version`` with events (or only the gateway's
    log, as version-0 runs from before the events file had), faults and 40 records."""
    (tmp / "gateway.log").write_text(LOG)
    if events is not None:
        (tmp / "gateway_events.jsonl").write_text(events)
    run = tmp.parent.parent
    write_json(run / RUN_FILE, RunInfo(format_version=version))
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
            "request_id": f"r{i}", "case": "episode", "phase": "episode", "index": i,
            "group": None, "scheduled_ns": sent, "sent_ns": sent,
            "prompt_tokens_sent": 8, "max_tokens": 4,
            "status": "error" if down else "ok",
            "upstream": None if down else (A if (i % 2 or 110 * S <= sent < 131 * S) else B),
        })  # fmt: skip
    with open(tmp / "requests.jsonl", "w") as fh:
        fh.writelines(json.dumps(r) + "\n" for r in records)
    row = PhaseRow(phase="episode", start_ns=100 * S, last_end_ns=140 * S, end_ns=141 * S)
    append_jsonl(tmp / "phases.jsonl", row)
    case_data = load_case(run, CaseSpec(name=tmp.name))
    assert len(case_data.records) == 40 and case_data.phases == [row]
    return case_data, row


def _case_dir(tmp: Path) -> Path:
    path = tmp / "cases" / "episode"
    path.mkdir(parents=True)
    return path


def test_transitions_come_from_the_events_file_with_their_monotonic_times(tmp_path: Path) -> None:
    case_data, _ = _write(_case_dir(tmp_path), _events(EVENTS))
    assert case_data.transitions_source == "events"
    assert [(t.from_state, t.to_state) for t in case_data.transitions] == [
        ("closed", "open"), ("open", "half_open"), ("half_open", "open"),
        ("open", "half_open"), ("half_open", "closed"),
    ]  # fmt: skip
    assert case_data.transitions[0].t_ns == 112_500_000_000
    assert case_data.transitions[0].upstream == B


def test_a_version_0_run_without_the_events_file_reads_the_gateway_log_through_the_migration(
    tmp_path: Path,
) -> None:
    case_data, _ = _write(_case_dir(tmp_path), version=0)
    assert case_data.transitions_source == "log"
    # The log's "at 112.500 s" on the monotonic clock: 112.5 × 1e9 ns.
    assert [t.t_ns for t in case_data.transitions][:2] == [112_500_000_000, 115_600_000_000]
    assert [(t.from_state, t.to_state) for t in case_data.transitions][:2] == [
        ("closed", "open"), ("open", "half_open")]  # fmt: skip


def test_a_version_1_run_never_reads_the_gateway_log(tmp_path: Path) -> None:
    case_data, _ = _write(_case_dir(tmp_path))
    assert (case_data.transitions, case_data.transitions_source) == ([], None)


def test_episode_counts_goodput_and_traffic_per_upstream(tmp_path: Path) -> None:
    case_data, phase_row = _write(_case_dir(tmp_path), _events(EVENTS))
    ep = episode(case_data, phase_row)
    assert (ep.requests, ep.ok, ep.failed) == (40, 38, 2)
    assert ep.goodput_req_s == 38 / 40
    assert ep.faults[0].killed_s == 10.0
    assert ep.faults[1].healthy_s == 30.0
    assert ep.transitions[0].t_s == 12.5
    assert ep.per_second[10].failed == 1


def _verdict(tmp_path: Path, events: list[tuple[float, str, str, str]]) -> tuple[bool | None, str]:
    case_data, phase_row = _write(_case_dir(tmp_path), _events(events))
    details = BreakerDetails(episodes=[episode(case_data, phase_row)])
    check = BreakerEpisode(case="episode", phase="episode", replica=1)
    (verdict,) = evaluate((check,), {"episode": case("episode", phase("episode"))}, REPORT,
                          details)  # fmt: skip
    return verdict.passed, verdict.detail


def test_verdict_passes_for_open_probe_close(tmp_path: Path) -> None:
    passed, detail = _verdict(tmp_path, EVENTS)
    assert passed is True
    assert "open 12.50 s, first half-open 15.60 s, closed 31.20 s" in detail


def test_verdict_fails_when_the_breaker_never_closes(tmp_path: Path) -> None:
    passed, detail = _verdict(tmp_path, EVENTS[:3])
    assert passed is False
    assert "closed never" in detail


def test_a_probe_that_closes_just_before_the_restart_is_stamped_healthy_still_counts(
    tmp_path: Path,
) -> None:
    # Seen on a real run: the breaker closed at 30.84 s (its probe got an answer) while the
    # restart's health poll returned, and stamped healthy_s, at 31.96 s. Here: healthy at
    # 30.0 s relative; the close at 29.5 s (131.2 → 129.5 s absolute) must still count.
    events = [*EVENTS[:3], (129.3, "open", "half_open", "cool-down elapsed"),
              (129.5, "half_open", "closed", "probe succeeded")]  # fmt: skip
    passed, detail = _verdict(tmp_path, events)
    assert passed is True
    assert "closed 29.50 s" in detail


def test_requests_never_sent_are_not_failures_and_no_events_leave_the_verdict_undecided(
    tmp_path: Path,
) -> None:
    cdir = _case_dir(tmp_path)
    case_data, phase_row = _write(cdir, _events(EVENTS))
    # The run was cut short: 4 more planned requests got not_sent records (no send stamp).
    with open(cdir / "requests.jsonl", "a") as fh:
        for i in range(40, 44):
            fh.write(json.dumps({"request_id": f"r{i}", "case": "episode", "phase": "episode",
                                 "index": i, "group": None, "scheduled_ns": 140 * S,
                                 "prompt_tokens_sent": 8, "max_tokens": 4,
                                 "status": "not_sent"}) + "\n")  # fmt: skip
    case_data = load_case(tmp_path, CaseSpec(name="episode"))
    ep = episode(case_data, phase_row)
    # Still 38 ok of the 40 sent (success ratio 0.95), the 4 unsent beside them.
    assert (ep.requests, ep.ok, ep.failed, ep.not_sent) == (40, 38, 2, 0 + 4)
    assert ep.success_ratio == 38 / 40
    # Without an events file and a gateway log nothing says what the breaker did.
    (cdir / "gateway_events.jsonl").unlink()
    blind = episode(load_case(tmp_path, CaseSpec(name="episode")), phase_row)
    check = BreakerEpisode(case="episode", phase="episode", replica=1)
    (verdict,) = evaluate((check,), {"episode": case("episode", phase("episode"))}, REPORT,
                          BreakerDetails(episodes=[blind]))  # fmt: skip
    assert (verdict.passed, verdict.detail) == (
        None, "no breaker transitions recorded (no gateway events file, no gateway log)"
    )  # fmt: skip
