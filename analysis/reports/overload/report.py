"""overload's report parts (``analysis.reports.ScenarioReport``): details, columns, Markdown,
the closing answer, the plot and verdicts, each from its module in this package."""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar

from analysis.load import RunData
from analysis.markdown import f, pct
from analysis.models import CaseSummary
from analysis.reports import Evaluator, PhaseColumn, ScenarioReport
from analysis.reports.overload.details import overload_details
from analysis.reports.overload.models import OverloadDetails
from analysis.reports.overload.plots import draw_plots
from analysis.reports.overload.render import closing_lines, markdown_lines
from analysis.reports.overload.verdicts import EVALUATORS


class OverloadReport(ScenarioReport[OverloadDetails]):
    evaluators: ClassVar[dict[type, Evaluator]] = EVALUATORS

    def details(self, run: RunData, cases: dict[str, CaseSummary]) -> OverloadDetails | None:
        return overload_details(run)

    def phase_columns(self, details: OverloadDetails | None) -> list[PhaseColumn]:
        points = {(p.arm, p.phase): p for p in (details.points if details else [])}

        def goodput(case: str, phase: str) -> str:
            p = points.get((case, phase))
            return f(p.goodput_rps, 2) if p else ""

        def rejected(case: str, phase: str) -> str:
            p = points.get((case, phase))
            return pct(p.rejected_share) if p else ""

        return [
            PhaseColumn("goodput req/s", "failed", goodput),
            PhaseColumn("rejected", "failed", rejected),
        ]

    def markdown(self, details: OverloadDetails | None) -> list[str]:
        return markdown_lines(details) if details is not None else []

    def closing(self, details: OverloadDetails | None) -> list[str]:
        return closing_lines(details) if details is not None else []

    def plots(
        self,
        run: RunData,
        cases: dict[str, CaseSummary],
        details: OverloadDetails | None,
        out_dir: Path,
    ) -> list[Path]:
        if details is None or not details.points:
            return []
        return draw_plots(details, out_dir)


REPORT = OverloadReport()
