"""``report.json`` read back: the typed report (:class:`analysis.models.RunSummary`), its format
version checked first.

The report is a file of the run written by ``analysis.report.build_report`` (JSON of the
model's dump, NaN written as ``null``). A reader of it (``loadgen validate``, the HTML
rendering) calls :func:`read_report`: a file of another report format version is refused in
one line naming both versions (rebuilding it with ``loadgen report RUN`` writes the current
one); a file written before the version was recorded (no ``format_version``) is version 1,
the same shape.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import ValidationError

from analysis.models import REPORT_FORMAT_VERSION, RunSummary
from loadgen.runformat.layout import REPORT_JSON
from loadgen.runformat.reading import read_json_object


class ReportFileError(ValueError):
    """``report.json`` is missing, unreadable, of another format version or not a well-typed
    report; the message is one line naming the file."""


def report_format_version(report: dict[str, Any], path: Path) -> int:
    """The format version of a ``report.json`` object (1 when it has none).

    Raises:
        ReportFileError: a version other than :data:`REPORT_FORMAT_VERSION` (or not an
            integer).
    """
    found = report.get("format_version", 1)
    if type(found) is not int or found != REPORT_FORMAT_VERSION:
        raise ReportFileError(
            f"{path}: report format version {found!r}, this loadgen reads version "
            f"{REPORT_FORMAT_VERSION}; `loadgen report RUN` rebuilds it in this version"
        )
    return found


def read_report(run_dir: Path) -> RunSummary:
    """The report of the run in ``run_dir`` (its ``report.json``), typed.

    Raises:
        ReportFileError: see the class.
    """
    path = run_dir / REPORT_JSON
    report, exists, problem = read_json_object(path)
    if not exists:
        raise ReportFileError(f"{path} missing: `loadgen report RUN` builds it")
    if report is None:
        raise ReportFileError(f"{path}: {problem}")
    report_format_version(report, path)
    try:
        return RunSummary.model_validate(report)
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(str(x) for x in err["loc"]) or "report"
        raise ReportFileError(
            f"{path} is not a well-typed report ({exc.error_count()} error(s), first: "
            f"{where}: {err['msg']})"
        ) from None
