"""What every command that reads a run says when it cannot read it, through the one check
(``loadgen.runformat.open_run``), in one line on stderr:

- another run format version: exit 2 (``FORMAT_VERSION_EXIT``; use the loadgen that wrote it);
- not a run directory (no ``plan.json``): exit 2 (``NOT_A_RUN_EXIT``: a usage error);
- a run that ended before its plan was made: exit 1 (``UNPLANNED_EXIT``), "there is nothing
  to report" (or export): it is complete, and holds nothing (``loadgen validate`` calls it
  valid and needing attention, exit 4; ``compare`` cannot compare it, exit 2).
"""

from __future__ import annotations

import sys
from pathlib import Path

import click

#: Exit codes of a run a command cannot read (module docstring).
FORMAT_VERSION_EXIT = 2
NOT_A_RUN_EXIT = 2
UNPLANNED_EXIT = 1


def open_or_exit(run_dir: Path, nothing_to: str) -> int:
    """The run format version of ``run_dir`` (``loadgen.runformat.open_run``), or exit with
    one line (module docstring); ``nothing_to``: what the command would do with the run
    (``report``, ``export``), named when the run ended before its plan was made."""
    from loadgen.runformat import FormatVersionError, NotARunError, UnplannedRunError, open_run

    try:
        return open_run(run_dir)
    except FormatVersionError as exc:
        code, line = FORMAT_VERSION_EXIT, str(exc)
    except NotARunError as exc:
        code, line = NOT_A_RUN_EXIT, str(exc)
    except UnplannedRunError as exc:
        code, line = UNPLANNED_EXIT, f"{exc}: there is nothing to {nothing_to}"
    click.echo(f"error: {line}", err=True)
    sys.exit(code)
