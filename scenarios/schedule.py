"""How long a plan's own clock keeps a run going, and the limit on it.

A rate of 1e-9 req/s, a speedup of 1e-9 or a trace spanning 10^12 ms are each a legal number,
yet their schedule would take years: the run would sit waiting for its next send with no
sign of why. Each phase's *schedule* is the time its own clock plans whatever the server
does (the due time of its last request, a ramp, a duration: ``min_span_s`` of its arrival)
plus its settle waits; the run's is the sum over every case. Above :data:`MAX_SCHEDULE_S` a
plan is refused before anything starts, with the figure, unless the user passes
``--allow-long-schedule``; above :data:`HARD_MAX_SCHEDULE_S` it is refused in any case (the
offsets a schedule that long needs leave the int64 nanoseconds the run format keeps).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from scenarios.common import MAX_RUN_S
from scenarios.plan import PhaseSpec, Plan

#: The longest schedule run without asking: one day (``MAX_RUN_S``), the ceiling of any
#: single duration or timeout flag.
MAX_SCHEDULE_S = MAX_RUN_S
#: The longest schedule run at all, with ``--allow-long-schedule``: a year.
HARD_MAX_SCHEDULE_S = 365 * 86400.0
#: The flag that lifts :data:`MAX_SCHEDULE_S`.
ALLOW_FLAG = "--allow-long-schedule"


class ScheduleTooLongError(ValueError):
    """A plan whose schedule is above the limit (the message has the figure and the way on)."""


@dataclass(frozen=True)
class PhaseSchedule:
    """One phase's share of a run's schedule (seconds; ``inf`` when it overflows)."""

    case: str
    phase: str
    seconds: float


def phase_schedule_s(phase: PhaseSpec) -> float:
    """The least time ``phase`` takes on its own clock (s): arrivals plus settle waits; a
    late-bound rate counts as its duration, or 0 when it has none yet."""
    span = phase.arrival.min_span_s(phase.workload.requests)
    return (span or 0.0) + phase.settle_s + phase.settle_until_idle_s


def plan_schedule(plan: Plan) -> list[PhaseSchedule]:
    """Every phase of every case with its schedule, in run order."""
    return [
        PhaseSchedule(case.name, phase.name, phase_schedule_s(phase))
        for case in plan.cases
        for phase in plan.phases_of(case)
    ]


def human_duration(seconds: float) -> str:
    """``95`` → ``"95 s"``, ``99000`` → ``"27.5 h"``, ``1e6`` → ``"11.6 days"``, ``6.3e10``
    → ``"1,998 years"``, ``inf`` → ``"longer than a float holds"``."""
    if not math.isfinite(seconds):
        return "longer than a float holds"
    year, day = 365 * 86400.0, 86400.0
    value, unit = next(
        (seconds / size, unit)
        for size, unit, least in ((year, "years", 2 * year), (day, "days", 2 * day),
                                  (3600.0, "h", 3600.0), (60.0, "min", 120.0), (1.0, "s", 0.0))
        if seconds >= least
    )  # fmt: skip
    return f"{value:,.0f} {unit}" if 1000 <= value < 1e6 else f"{value:.3g} {unit}"


def check_schedule(plan: Plan, allow_long: bool = False) -> None:
    """Refuse ``plan`` when its schedule is above the limit.

    Raises:
        ScheduleTooLongError: the run's schedule (the sum of :func:`plan_schedule`) is above
            :data:`MAX_SCHEDULE_S` (unless ``allow_long``) or :data:`HARD_MAX_SCHEDULE_S`.
    """
    phases = plan_schedule(plan)
    total = sum(p.seconds for p in phases)
    limit = HARD_MAX_SCHEDULE_S if allow_long else MAX_SCHEDULE_S
    if total <= limit:
        return
    longest = max(phases, key=lambda p: p.seconds)
    where = (
        f"phase {longest.phase} of case {longest.case}: {human_duration(longest.seconds)}"
        if len(phases) > 1
        else f"phase {longest.phase} of case {longest.case}"
    )
    if allow_long:
        way = f"even with {ALLOW_FLAG} the limit is {human_duration(HARD_MAX_SCHEDULE_S)}"
    else:
        way = f"the limit is {human_duration(MAX_SCHEDULE_S)}; pass {ALLOW_FLAG} to run it anyway"
    shown = human_duration(total)
    if shown == human_duration(limit):  # just above the limit: the seconds tell them apart
        shown = f"{total:,.0f} s ({shown})"
    raise ScheduleTooLongError(f"the schedule of this run would take {shown} ({where}); {way}")
