"""slo-goodput's report parts (``analysis.reports.ScenarioReport``): details, columns, Markdown,
plots and verdicts, each from its module in this package."""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

from analysis.load import RunData
from analysis.markdown import f, pct
from analysis.models import CaseSummary
from analysis.reports import Evaluator, PhaseColumn, ScenarioReport
from analysis.reports.slo_goodput.details import slo_goodput_details
from analysis.reports.slo_goodput.models import SLOGoodputDetails
from analysis.reports.slo_goodput.plots import draw_plots
from analysis.reports.slo_goodput.render import markdown_lines
from analysis.reports.slo_goodput.verdicts import EVALUATORS


class SLOGoodputReport(ScenarioReport[SLOGoodputDetails]):
    evaluators: ClassVar[dict[type, Evaluator]] = EVALUATORS

    def details(self, run: RunData, cases: dict[str, CaseSummary]) -> SLOGoodputDetails | None:
        return slo_goodput_details(run)

    def phase_columns(self, details: SLOGoodputDetails | None) -> list[PhaseColumn]:
        points = {p.phase: p for p in (details.points if details is not None else [])}

        def cell(key: str) -> Any:
            def text(_case: str, phase: str) -> str:
                p = points.get(phase)
                if p is None:
                    return ""
                value = getattr(p, key)
                return pct(value) if key == "attainment" else f(value, 2)

            return text

        return [
            PhaseColumn("offered req/s", "failed", cell("offered_rps")),
            PhaseColumn("completed req/s", "failed", cell("completed_rps")),
            PhaseColumn("goodput req/s", "failed", cell("goodput_rps")),
            PhaseColumn("attainment %", "failed", cell("attainment")),
        ]

    def markdown(self, details: SLOGoodputDetails | None) -> list[str]:
        return markdown_lines(details) if details is not None else []

    def plots(
        self,
        run: RunData,
        cases: dict[str, CaseSummary],
        details: SLOGoodputDetails | None,
        out_dir: Path,
    ) -> list[Path]:
        if details is None or not details.points:
            return []
        case = next(c for c in run.cases if c.name == details.case)
        return draw_plots(case, details, out_dir)

    def phase_goodput(
        self, details: SLOGoodputDetails | None
    ) -> dict[tuple[str, str], float | None]:
        """Each rate's goodput over its measurement window (``SweepPoint.goodput_rps``)."""
        if details is None:
            return {}
        return {(details.case, p.phase): p.goodput_rps for p in details.points}


REPORT = SLOGoodputReport()
