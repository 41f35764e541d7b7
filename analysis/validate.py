"""``loadgen validate RUN``: is a run directory complete, unaltered and internally consistent?

The checks of its raw data are the one integrity rule every reader applies
(``analysis.integrity.check_run``: its problems, what needs attention, its warnings); on top,
``validate`` checks what only a finished, sealed run has: ``manifest.json`` (a run without one
is invalid: it was never sealed), ``report.json`` (present, of this report format version, a
well-typed report (``analysis.report_file``; one written before reports recorded their
version is checked as before, untyped), no non-finite value, its failure counts equal to the
records'). Validation never raises for a broken run.

A run whose format version is neither this one nor 0 is not validated: ``validate_run`` raises
``FormatVersionError`` (the command says so in one line).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from analysis.integrity import check_run
from analysis.report_file import ReportFileError, read_report
from loadgen.runformat.layout import MANIFEST_FILE, REPORT_JSON
from loadgen.runformat.reading import read_json_object


@dataclass
class ValidationResult:
    """Problems (empty = valid), what needs attention in a valid run (its status not ok, an
    incomplete phase, interrupted requests, a re-seal), warnings, and facts gathered on the
    way (counts per case)."""

    problems: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    facts: dict[str, object] = field(default_factory=dict)
    attention: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems


def validate_run(run_dir: Path) -> ValidationResult:
    """Validate ``run_dir``; never raises for a broken run (it reports problems instead).

    Raises:
        FormatVersionError: the run's format version is neither this one nor 0.
    """
    found = check_run(run_dir)
    result = ValidationResult(list(found.problems), list(found.warnings), dict(found.facts),
                              list(found.attention))  # fmt: skip
    if not found.sealed:
        result.problems.insert(0, f"{MANIFEST_FILE} missing: the run is incomplete")
    path = run_dir / REPORT_JSON
    if found.unplanned:
        return result  # no case ran: there is nothing a report could say
    if not path.exists():
        result.problems.append(f"{REPORT_JSON} missing")
        return result
    report, _, problem = read_json_object(path)
    if problem:
        result.problems.append(problem)
        return result
    try:
        json.loads(path.read_text(),
                   parse_constant=lambda c: (_ for _ in ()).throw(ValueError(c)))  # fmt: skip
    except ValueError as exc:
        result.problems.append(f"{REPORT_JSON}: non-finite value ({exc})")
        return result
    if report is not None and "format_version" in report:
        try:
            read_report(run_dir)
        except ReportFileError as exc:
            result.problems.append(str(exc))
            return result
    cases = (report or {}).get("cases")
    for name, facts in found.facts.items():
        entry = cases.get(name) if isinstance(cases, dict) else None
        reported = entry.get("requests_failed") if isinstance(entry, dict) else None
        failed = facts.get("failed") if isinstance(facts, dict) else None
        if reported is not None and failed is not None and reported != failed:
            result.problems.append(f"{name}: report says {reported} failed, records say {failed}")
    return result
