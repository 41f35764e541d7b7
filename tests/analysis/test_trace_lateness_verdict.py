"""trace-replay's send-lateness verdict: PASS below the limit, FAIL above it, and undecided,
naming the machine's limit, when the load generator had no core of its own (a fleet of as
many replicas as cores: ``loadgen.placement.NO_FREE_CORE``). Hand-made case summaries."""

from __future__ import annotations

from typing import Any

from analysis.models import CaseSummary, PhaseSummary, Stats
from analysis.reports.trace_replay.verdicts import lateness_verdict
from analysis.timing_trust import no_core_for_the_client
from loadgen.placement import choose_placement
from scenarios.trace_replay import TraceSendLateness

CHECK = TraceSendLateness(case="c", phase="speedup-1x", max_p99_ms=5.0)
#: What a fleet of 2 replicas on a 2-core machine records (choose_placement's own words).
NO_CORE = choose_placement("auto", {0, 1}, True, {0, 1})
#: A single server on core 0: the client real-time on core 1.
CORE_1 = choose_placement("auto", {0, 1}, True, {0})


def _case(p99_ms: float, placement: Any, lag_ms: float = 858.0) -> CaseSummary:
    phase = PhaseSummary.model_construct(
        phase="speedup-1x", send_lateness_ms=Stats(count=105, p99=p99_ms), late_sends=38,
        loop_lag_max_ms=lag_ms,
    )  # fmt: skip
    client = {"policy": "SCHED_FIFO 1" if placement.realtime else "SCHED_OTHER",
              "cpus": None, "reason": placement.reason, "problem": None}  # fmt: skip
    return CaseSummary.model_construct(name="c", phases={"speedup-1x": phase}, client=[client])


def test_late_sends_without_a_core_of_its_own_are_the_machines_limit() -> None:
    assert not NO_CORE.realtime and NO_CORE.cpus is None
    verdict = lateness_verdict(CHECK, _case(556.2, NO_CORE), None)
    assert verdict.passed is None
    assert verdict.detail.startswith("undecided, a limit of this machine: the load generator")
    assert "the server computes on every core this process may use (0,1)" in verdict.detail
    assert "event loop up to 858 ms late" in verdict.detail
    assert "p99 556.200 ms over 105 sends; late sends (> 10 ms after their time) 38" in (
        verdict.detail
    )


def test_late_sends_with_a_core_of_its_own_fail() -> None:
    verdict = lateness_verdict(CHECK, _case(6.0, CORE_1), None)
    assert verdict.passed is False
    assert verdict.detail == "p99 6.000 ms over 105 sends; late sends (> 10 ms after their time) 38"


def test_sends_on_time_pass_wherever_the_client_ran() -> None:
    assert lateness_verdict(CHECK, _case(4.9, NO_CORE), None).passed is True
    assert lateness_verdict(CHECK, _case(4.9, CORE_1), None).passed is True


def test_no_core_is_read_only_from_a_normal_priority_client() -> None:
    reason = NO_CORE.reason
    assert no_core_for_the_client([None]) is None
    assert no_core_for_the_client([{"policy": "SCHED_OTHER", "reason": reason}]) == reason
    assert no_core_for_the_client([{"policy": "SCHED_FIFO 1", "reason": reason}]) is None
    assert no_core_for_the_client([{"policy": "SCHED_OTHER", "reason": CORE_1.reason}]) is None
