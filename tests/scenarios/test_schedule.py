"""scenarios.schedule: how long a plan's own clock keeps a run going (arrivals + settle
waits), worked by hand, and the limit on it."""

from __future__ import annotations

import math

import pytest

from scenarios.arrivals import AllAtOnce, ClosedLoop, OpenLoop, TraceArrival, arrivals_within
from scenarios.late import LateBindingError
from scenarios.plan import CaseSpec, PhaseSpec, Plan
from scenarios.schedule import (
    ScheduleTooLongError,
    check_schedule,
    human_duration,
    plan_schedule,
)
from scenarios.workloads import UniquePrompts


def _phase(name: str, arrival: object, requests: int = 5, settle_s: float = 1.0) -> PhaseSpec:
    workload = UniquePrompts(prompt_tokens=1, requests=requests, output_tokens=1)
    return PhaseSpec(name=name, workload=workload, arrival=arrival, settle_s=settle_s)  # type: ignore[arg-type]


def test_each_arrival_kind_has_its_least_span() -> None:
    # Constant gaps of 1/0.5 = 2 s: the 5th request is due at 8 s.
    assert OpenLoop(rate_rps=0.5, pattern="constant").min_span_s(5) == 8.0
    # A ramp of 10 s: 4 steady gaps of 2 s end at u = 8 s ≥ T/2, so t = u + T/2 = 13 s.
    assert OpenLoop(rate_rps=0.5, pattern="constant", ramp_s=10).min_span_s(5) == 13.0
    assert OpenLoop(rate_rps=0.5, duration_s=30).min_span_s(None) == 30.0
    # 4 senders over a 2 s ramp: the last starts at 3 × 2/4 = 1.5 s.
    assert ClosedLoop(concurrency=4, ramp_s=2).min_span_s(10) == 1.5
    assert ClosedLoop(concurrency=4, duration_s=30).min_span_s(None) == 30.0  # its clock's plan
    assert AllAtOnce().min_span_s(10) == 0.0
    # A timed start at 4 s of trace time and a turn 6 s after it, at speedup 2: 2 s, then
    # 2 + 6/2 = 5 s (delays compressed too); without compression 2 + 6 = 8 s.
    trace = dict(offsets_ms=(4000.0, None), follows=(None, 0), delays_ms=(0.0, 6000.0))
    assert TraceArrival(speedup=2, **trace).min_span_s() == 5.0  # type: ignore[arg-type]
    assert TraceArrival(speedup=2, compress_delays=False, **trace).min_span_s() == 8.0  # type: ignore[arg-type]
    # Overflow is a figure, not an exception.
    assert OpenLoop(rate_rps=5e-324, pattern="constant").min_span_s(3) == math.inf


def _plan(*phases: PhaseSpec) -> Plan:
    return Plan(scenario="s", description="", params={},
                cases=(CaseSpec(name="c", url="http://h"),), phases=phases)  # fmt: skip


def test_the_run_schedule_is_the_sum_of_its_phases_and_settles() -> None:
    # 8 s + 1 s settle, then 0 + 2 s settle.
    plan = _plan(_phase("a", OpenLoop(rate_rps=0.5, pattern="constant")),
                 _phase("b", AllAtOnce(), settle_s=2))  # fmt: skip
    assert [(p.phase, p.seconds) for p in plan_schedule(plan)] == [("a", 9.0), ("b", 2.0)]
    check_schedule(plan)  # 11 s: far below 24 h


def test_a_schedule_above_a_day_is_refused_with_the_figure_unless_allowed() -> None:
    # 50,000 requests at 0.5 req/s: 49,999 × 2 s + 1 s = 99,999 s = 27.8 h.
    plan = _plan(_phase("slow", OpenLoop(rate_rps=0.5, pattern="constant"), requests=50_000))
    with pytest.raises(ScheduleTooLongError) as info:
        check_schedule(plan)
    assert str(info.value) == (
        "the schedule of this run would take 27.8 h (phase slow of case c); the limit is 24 h; "
        "pass --allow-long-schedule to run it anyway"
    )
    check_schedule(plan, allow_long=True)


def test_just_above_the_limit_the_seconds_are_shown() -> None:
    # 43,201 requests at 0.5 req/s: 43,200 × 2 s + 1 s settle = 86,401 s, which reads "24 h".
    plan = _plan(_phase("slow", OpenLoop(rate_rps=0.5, pattern="constant"), requests=43_201))
    with pytest.raises(ScheduleTooLongError, match=r"would take 86,401 s \(24 h\) \(phase slow"):
        check_schedule(plan)


def test_a_late_bound_rate_with_too_many_arrivals_fails_its_case_not_the_machine() -> None:
    # 1,000 req/s × 200 s = 200,000 expected arrivals, above 100,000 in a phase: refused before
    # a single offset is drawn (the rate was a fraction of a measured throughput).
    with pytest.raises(LateBindingError, match=r"^1000 req/s over 200 s is 200,000 requests"):
        arrivals_within(OpenLoop(rate_rps=1000, duration_s=200), 200)


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(0.5, "0.5 s"), (95, "95 s"), (150, "2.5 min"), (99_000, "27.5 h"), (1e6, "11.6 days"),
     (6.3e10, "1,998 years"), (1e300, "3.17e+292 years"), (math.inf, "longer than a float holds")],
)  # fmt: skip
def test_durations_are_shown_in_the_unit_a_reader_takes_in(seconds: float, text: str) -> None:
    assert human_duration(seconds) == text
