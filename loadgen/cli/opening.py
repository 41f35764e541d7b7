"""What every command that reads a run says when it cannot read it, through the one check
(``loadgen.runformat.open_run``), in one line on stderr:

- another run format version: exit 2 (``OpenRunExit.CANNOT_READ``; use the loadgen that
  wrote it);
- not a run directory (no ``plan.json``): exit 2 (``OpenRunExit.CANNOT_READ``: a usage error);
- a run that ended before its plan was made: exit 1 (``OpenRunExit.NOTHING_IN_IT``), "there
  is nothing to report" (or export): it is complete, and holds nothing (``loadgen validate``
  calls it valid and needing attention, exit 4; ``compare`` cannot compare it, exit 2).

The codes are ``server.net.exit_codes``' (each command's table in docs/commands.md).
"""

from __future__ import annotations

import sys
from pathlib import Path

import click

from server.net.exit_codes import OpenRunExit


def open_or_exit(run_dir: Path, nothing_to: str) -> int:
    """The run format version of ``run_dir`` (``loadgen.runformat.open_run``), or exit with
    one line (module docstring); ``nothing_to``: what the command would do with the run
    (``report``, ``export``), named when the run ended before its plan was made."""
    from loadgen.runformat import FormatVersionError, NotARunError, UnplannedRunError, open_run

    try:
        return open_run(run_dir)
    except FormatVersionError as exc:
        code, line = OpenRunExit.CANNOT_READ, str(exc)
    except NotARunError as exc:
        code, line = OpenRunExit.CANNOT_READ, str(exc)
    except UnplannedRunError as exc:
        code, line = OpenRunExit.NOTHING_IN_IT, f"{exc}: there is nothing to {nothing_to}"
    click.echo(f"error: {line}", err=True)
    sys.exit(code)
