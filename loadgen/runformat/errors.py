"""The error every check a reader makes before reading a run raises: a directory it cannot
read as a run (``loadgen.runformat.opening``), its message one line naming the directory."""

from __future__ import annotations


class UnreadableRun(ValueError):
    """A directory a reader cannot read as a run: another format version
    (``FormatVersionError``), a run that ended before its plan was made
    (``UnplannedRunError``), or no run at all (``NotARunError``)."""
