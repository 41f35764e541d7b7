"""trace-replay's report: hit rates measured against the prefix-cache model's prediction, the
trace's rate kept, latency and goodput per speedup, and the capacity answer.

Modules: ``details`` (the figures and their definitions), ``verdicts``, ``render``
(Markdown), ``plots``.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import ClassVar

from analysis.load import RunData
from analysis.markdown import f
from analysis.models import CaseSummary
from analysis.reports import Evaluator, PhaseColumn, ScenarioReport
from analysis.reports.trace_replay.details import TraceReplayDetails, trace_details
from analysis.reports.trace_replay.plots import trace_plots
from analysis.reports.trace_replay.render import (
    case_lines,
    closing_lines,
    fleet_capacity_lines,
    trace_lines,
)
from analysis.reports.trace_replay.verdicts import (
    hit_rate_gain_verdict,
    hit_rate_verdict,
    kill_verdict,
    kv_events_verdict,
    lateness_verdict,
    rate_verdict,
    ttft_lower_verdict,
)
from scenarios.fleet_cases import (
    FleetHitRateGain,
    FleetKillAccounted,
    FleetKvEventsMatch,
    FleetTtftLower,
)
from scenarios.trace_replay import TraceHitRatePredicted, TraceRateKept, TraceSendLateness


class TraceReplayReport(ScenarioReport[TraceReplayDetails]):
    evaluators: ClassVar[dict[type, Evaluator]] = {
        TraceHitRatePredicted: hit_rate_verdict,
        TraceRateKept: rate_verdict,
        TraceSendLateness: lateness_verdict,
        FleetKvEventsMatch: kv_events_verdict,
        FleetKillAccounted: kill_verdict,
        FleetHitRateGain: hit_rate_gain_verdict,
        FleetTtftLower: ttft_lower_verdict,
    }

    def details(self, run: RunData, cases: dict[str, CaseSummary]) -> TraceReplayDetails:
        return trace_details(run, cases)

    def phase_columns(self, details: TraceReplayDetails | None) -> list[PhaseColumn]:
        if details is None:
            return []

        def cell(key: str) -> Callable[[str, str], str]:
            def text(case: str, phase: str) -> str:
                figures = details.cases[case].phases.get(phase) if case in details.cases else None
                return f(getattr(figures, key) if figures else None, 3)

            return text

        return [
            PhaseColumn("hit (counters)", "failed", cell("hit_rate_counters")),
            PhaseColumn("hit (predicted)", "failed", cell("predicted_hit_rate")),
        ]

    def markdown(self, details: TraceReplayDetails | None) -> list[str]:
        return [] if details is None else trace_lines(details) + fleet_capacity_lines(details)

    def case_markdown(self, details: TraceReplayDetails | None, case: str) -> list[str]:
        if details is None or case not in details.cases:
            return []
        return case_lines(details.cases[case])

    def closing(self, details: TraceReplayDetails | None) -> list[str]:
        return [] if details is None else closing_lines(details)

    def plots(
        self,
        run: RunData,
        cases: dict[str, CaseSummary],
        details: TraceReplayDetails | None,
        out_dir: Path,
    ) -> list[Path]:
        return trace_plots(run, details, out_dir)

    def phase_goodput(
        self, details: TraceReplayDetails | None
    ) -> dict[tuple[str, str], float | None]:
        """Each speedup's goodput under ``--slo`` (``PhaseFigures.goodput_rps``)."""
        if details is None:
            return {}
        return {(case, phase): figures.goodput_rps
                for case, c in details.cases.items()
                for phase, figures in c.phases.items()}  # fmt: skip


REPORT = TraceReplayReport()
