"""The run format's version: written into ``run.json``, checked by every reader.

A run of :data:`FORMAT_VERSION` is read as it is; a run of version 0 (every run written before
the version was recorded: ``run.json`` without ``format_version``) is read through the one
migration, :mod:`loadgen.runformat.migrate_v0`; any other version is refused
(:class:`FormatVersionError`, one line naming both versions).
"""

from __future__ import annotations

import json
from pathlib import Path

from loadgen.runformat.errors import UnreadableRun
from loadgen.runformat.layout import RUN_FILE

#: The version of the run format this code writes (``run.json``'s ``format_version``).
FORMAT_VERSION = 1
#: Versions a reader accepts: this one, and 0 through the migration.
READABLE_VERSIONS = (0, FORMAT_VERSION)


class FormatVersionError(UnreadableRun):
    """A run directory whose format version this code cannot read (the message is one line)."""


def run_format_version(run_dir: Path) -> int:
    """The format version of the run in ``run_dir``: ``run.json``'s ``format_version``, 0 when
    it has none (or ``run.json`` is missing or unreadable: a broken ``run.json`` is reported
    by the readers as such, the files beside it read as the version they were written as).

    Raises:
        FormatVersionError: the version is not one of :data:`READABLE_VERSIONS` (or not an
            integer).
    """
    try:
        info = json.loads((run_dir / RUN_FILE).read_text(encoding="utf-8", errors="replace"))
    except (OSError, ValueError):
        return 0
    found = info.get("format_version", 0) if isinstance(info, dict) else 0
    if type(found) is not int or found not in READABLE_VERSIONS:
        raise FormatVersionError(
            f"{run_dir}: run format version {found!r}, this loadgen reads version "
            f"{FORMAT_VERSION} (and 0 through its migration); use the loadgen that wrote it"
        )
    return found
