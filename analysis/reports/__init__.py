"""Scenario-declared report parts: each scenario's own section, columns, plots and verdicts.

A scenario named ``foo-bar`` may have a module ``analysis.reports.foo_bar`` defining
``REPORT``, an instance of a :class:`ScenarioReport` subclass; it is found by that name, so a
new scenario adds its analysis in its own module and nothing else in ``analysis`` changes. A
scenario without a module gets the generic report only.

A ``ScenarioReport`` declares:

- ``details(run, cases)``: its typed section (a pydantic model, dumped as the report's
  ``details``), computed from the raw run data and the generic case summaries;
- ``phase_columns(details)``: extra columns of the per-phase table (placed after a generic
  column), also printed on the console at the end of a run;
- ``case_markdown(details, case)`` and ``markdown(details)``: its Markdown, per case and after
  the cases; ``closing(details)``: lines the report ends with (after the verdicts and plots:
  the answer a reader came for);
- ``plots(run, cases, details, out_dir)``: its PNG plots;
- ``phase_goodput(details)``: the goodput (req/s) its section gives each case and phase, which
  ``loadgen compare`` and ``loadgen gate`` compare as ``goodput_req_s``;
- ``evaluators``: how each of its check kinds becomes a verdict.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Generic, TypeVar

from pydantic import BaseModel

from analysis.load import RunData
from analysis.models import CaseSummary, Verdict

D = TypeVar("D", bound=BaseModel)

#: (check, the case's generic summary, the scenario's details) → verdict.
Evaluator = Callable[[Any, CaseSummary, Any], Verdict]


@dataclass(frozen=True)
class PhaseColumn:
    """An extra column of the per-phase table: ``header``, placed right after the generic
    column ``after``; ``cell(case, phase)`` gives its text."""

    header: str
    after: str
    cell: Callable[[str, str], str]


class ScenarioReport(Generic[D]):
    """The generic report only; scenario modules subclass it and override what they add."""

    evaluators: ClassVar[dict[type, Evaluator]] = {}

    def details(self, run: RunData, cases: dict[str, CaseSummary]) -> D | None:
        """The scenario's typed section, or ``None`` when it has none."""
        return None

    def phase_columns(self, details: D | None) -> list[PhaseColumn]:
        return []

    def case_markdown(self, details: D | None, case: str) -> list[str]:
        return []

    def markdown(self, details: D | None) -> list[str]:
        return []

    def closing(self, details: D | None) -> list[str]:
        return []

    def plots(
        self, run: RunData, cases: dict[str, CaseSummary], details: D | None, out_dir: Path
    ) -> list[Path]:
        return []

    def phase_goodput(self, details: D | None) -> dict[tuple[str, str], float | None]:
        """Goodput in req/s per (case, phase) as the section computes it under the run's SLOs;
        empty for a scenario without SLOs (its phases have no goodput to compare)."""
        return {}


def report_for(scenario: str) -> ScenarioReport[Any]:
    """The report parts of ``scenario`` (``analysis.reports.<name with _>``), or the generic
    report when the scenario has no module.

    Raises:
        ImportError: the scenario's module exists but fails to import.
    """
    name = f"{__name__}.{scenario.replace('-', '_')}"
    try:
        module = importlib.import_module(name)
    except ModuleNotFoundError as exc:
        if exc.name != name:
            raise
        return ScenarioReport()
    report: ScenarioReport[Any] = module.REPORT
    return report
