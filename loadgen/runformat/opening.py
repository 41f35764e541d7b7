"""Opening a run directory: the one check every reader makes before it reads a run
(``loadgen report``, ``validate``, ``export``, ``compare``, ``gate``, and ``analysis``'s
loaders), so that each says the same thing about the same directory.

:func:`open_run`, in this order:

1. the run's format version must be readable (:func:`loadgen.runformat.run_format_version`:
   this version, or 0 through its migration), else :class:`FormatVersionError`;
2. a run with ``plan.json`` is open: its format version is returned;
3. a run that ended before its plan was made (:func:`unplanned_reason`: ``run.json`` says
   failed or interrupted, no ``plan.json``, no record file) is complete as it is and holds
   nothing to read: :class:`UnplannedRunError`;
4. anything else without ``plan.json`` is not a run: :class:`NotARunError`.

Every error's message is one line naming the directory. ``plan.json`` itself is read by
:func:`read_plan` (its version-0 migration included).
"""

from __future__ import annotations

from pathlib import Path

from pydantic import ValidationError

from loadgen.runformat import migrate_v0
from loadgen.runformat.errors import UnreadableRun
from loadgen.runformat.layout import CASES_DIR, PLAN_FILE, REQUESTS_FILE, RUN_FILE
from loadgen.runformat.reading import read_json_file, read_json_object
from loadgen.runformat.rows import RunInfo
from loadgen.runformat.version import run_format_version
from scenarios.plan import Plan
from scenarios.registry import plan_from_data


class NotARunError(UnreadableRun):
    """A directory without ``plan.json`` that is no run that ended before its plan."""


class UnplannedRunError(UnreadableRun):
    """A run that ended before its plan was made (its server could not be started or
    reached, say): complete as it is, with no case, record or report.

    Attributes:
        reason: why, without the directory (``the run ended before it was planned …``).
    """

    def __init__(self, run_dir: Path, reason: str) -> None:
        super().__init__(f"{run_dir}: {reason}")
        self.reason = reason


class RunFileError(ValueError):
    """``plan.json`` is unreadable or not a valid plan: nothing can be analysed without it; the
    message names the file and what is wrong with it."""


def unplanned_reason(run_dir: Path) -> str | None:
    """Why ``run_dir`` holds a run that ended before its plan was made (``run.json`` says
    failed or interrupted, there is no ``plan.json`` and no case wrote records), or ``None``."""
    if (run_dir / PLAN_FILE).exists() or not (run_dir / RUN_FILE).exists():
        return None
    stem = REQUESTS_FILE.removesuffix(".jsonl")
    if any((run_dir / CASES_DIR).glob(f"*/{stem}*.jsonl")):
        return None  # requests were sent: a plan was made, and its file is missing
    run = read_json_file(run_dir / RUN_FILE, RunInfo)
    if run.problem or not run.exists or run.data.status not in ("failed", "interrupted"):
        return None
    why = f": {run.data.error}" if run.data.error else ""
    return f"the run ended before it was planned (status {run.data.status}{why}); no case ran"


def open_run(run_dir: Path) -> int:
    """The run format version of the run in ``run_dir``, after the checks of the module
    docstring.

    Raises:
        FormatVersionError: its format version is neither this one nor 0.
        UnplannedRunError: it ended before its plan was made.
        NotARunError: it has no ``plan.json`` otherwise.
    """
    version = run_format_version(run_dir)
    if (run_dir / PLAN_FILE).exists():
        return version
    reason = unplanned_reason(run_dir)
    if reason is not None:
        raise UnplannedRunError(run_dir, reason)
    raise NotARunError(f"{run_dir} has no {PLAN_FILE}: not a run directory")


def read_plan(run_dir: Path) -> Plan:
    """The run's plan (``plan.json``), after :func:`open_run` (a version-0 plan goes through
    its migration).

    Raises:
        UnreadableRun: as :func:`open_run`.
        RunFileError: ``plan.json`` is empty, not JSON, not an object or not a valid plan.
    """
    version = open_run(run_dir)
    path = run_dir / PLAN_FILE
    data, _, problem = read_json_object(path)
    if data is None:
        why = (problem or "").removeprefix(f"{PLAN_FILE} ").removesuffix("; read as empty")
        raise RunFileError(f"{path} {why}")
    if version == migrate_v0.FROM_VERSION:
        data = migrate_v0.plan(data)
    try:
        return plan_from_data(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(str(x) for x in err["loc"]) or "plan"
        raise RunFileError(
            f"{path} is not a valid plan ({exc.error_count()} error(s), first: {where}: "
            f"{err['msg']})"
        ) from None
