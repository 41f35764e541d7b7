"""The one check of every output path a command is given, made before any work starts.

Every command that writes a file or a directory the user names (``run --out``, ``gate --out``,
``compare --out``, ``export --out``, ``trace stats --plot``, ``gateway --events-file`` and
``--decisions-file``) calls :func:`check_output_file` or :func:`check_output_dir` first, and
``report``, which rewrites the report inside the run, :func:`probe_dir`. A
path is refused with one line (``Error: OPTION PATH …``, exit 2: :class:`BadOutputPath`) when:

1. it lies inside a run directory (the path, or a directory above it, symlinks resolved, holds
   ``run.json``, ``plan.json`` or ``manifest.json``): a run's files are written only by the
   run's own writers. The one place a command may write into a run is the unsealed
   ``export/`` of the run it exports (``loadgen.runformat.manifest.UNSEALED_DIRS``);
2. a file is wanted and it is an existing directory or a path written as one (ending in
   ``/``, ``/.`` or ``/..``: ``--plot dir.png/`` once wrote a file named ``dir.png``), or a
   directory is wanted and it is an existing file;
3. a file is wanted with a suffix rule and its name does not end in the suffix (a plot is a
   PNG: ``--plot`` must end in ``.png``, so the file written is the file named, never a
   ``.png`` added to it);
4. a file is wanted and its directory does not exist (a directory the user names is created
   with its parents when the command writes; so is the directory of a default path the
   command chooses);
5. it holds a control character (a newline, ESC: printed as the path written, a terminal
   would run its escape sequences);
6. the place does not take a new file: a probe file is written and removed in the directory,
   or in the nearest existing directory above it that it will be created in (under
   ``/proc``, on a read-only filesystem, without permission); nothing is created by the
   check, so a command refused later leaves nothing behind.

An existing file that is not a regular file (``/dev/null``, ``/dev/stdout``, a pipe) is
written in place, as it is (a rename cannot replace it): a write that then fails there
(``/dev/full``: no space) is a write error like any other.

A write that fails after the check (the disk fills, ``/dev/full``) is one line naming the file
and the OS error, exit 1, in every command (``server.net.exit_codes.OutputExit``,
``loadgen.runformat.RunWriteError``).
"""

from __future__ import annotations

from pathlib import Path
from typing import NoReturn

import click

from server.net.exit_codes import OutputExit

#: The file :func:`probe_dir` writes and removes to learn that a directory takes new files
#: (``.tmp``: were it ever left, the manifest and every reader skip it).
WRITE_PROBE = ".write-probe.tmp"


class BadOutputPath(click.ClickException):
    """An output path refused by the check (module docstring): one line, exit 2."""

    exit_code = OutputExit.BAD_PATH


def _refuse_control_characters(path: Path | str, option: str) -> None:
    """A path holding a control character (a newline, ESC) is refused, shown escaped: it
    would be printed as the path written, and a terminal runs its escape sequences."""
    text = str(path)
    if any(ord(c) < 32 or ord(c) == 127 for c in text):
        shown = text.encode("unicode_escape").decode("ascii")
        raise BadOutputPath(f"{option} {shown} holds a control character; give a path without one")


def _refuse_inside_run(path: Path, option: str, own_run: Path | None) -> None:
    from loadgen.runformat.layout import EXPORT_DIR, enclosing_run

    run = enclosing_run(path)
    if run is None:
        return
    if own_run is not None and path.resolve().is_relative_to(own_run.resolve() / EXPORT_DIR):
        return  # the run's unsealed export/ directory: never read, never sealed
    where = (
        "is a run directory already"  # --out naming a finished run: not "inside" it
        if run.resolve() == path.resolve()
        else f"is inside the run directory {run}"
    )
    raise BadOutputPath(
        f"{option} {path} {where}: a run's files are written only by the run itself (give a "
        "path outside it)"
    )


def probe_dir(directory: Path, what: str) -> None:
    """Write and remove one small file in ``directory``, or, when it does not exist yet, in
    the nearest directory above it that does (where it will be created): a place that takes
    no new file is refused before any work, and nothing is left behind.

    Raises:
        BadOutputPath: ``{what} cannot be created or written: REASON``.
    """
    from loadgen.runformat.atomic import RunWriteError, write_text
    from server.net.jsonl import writing

    place = directory
    while not place.exists() and place != place.parent:
        place = place.parent
    try:
        write_text(place / WRITE_PROBE, "")
        with writing(place / WRITE_PROBE):
            (place / WRITE_PROBE).unlink()
    except RunWriteError as exc:
        reason = exc.os_error.strerror or str(exc.os_error)
        raise BadOutputPath(f"{what} cannot be created or written: {reason}") from None


def names_a_directory(text: str) -> bool:
    """Whether ``text``, a path as typed, names a directory by its spelling: it ends in a
    separator, ``/.`` or ``/..``, or is ``.`` or ``..`` (``pathlib`` drops the trailing
    ``/`` of ``dir.png/``, so the check reads the text)."""
    name = text.rstrip("/")
    return text.endswith("/") or name in ("", ".", "..") or name.endswith(("/.", "/.."))


def check_output_file(
    path: Path | str,
    option: str,
    *,
    suffix: str | None = None,
    create_dir: bool = False,
    own_run: Path | None = None,
) -> None:
    """Check ``path``, a file the command will write (module docstring); give it as typed
    (a ``str``) so that a trailing ``/`` is seen.

    Args:
        option: how the command line named it (``--out``, ``--plot``).
        suffix: the suffix its name must end in (``.png``), case-insensitive.
        create_dir: its directory is created when missing (a default path the command chose).
        own_run: the run the command reads, whose ``export/`` it may write into.

    Raises:
        BadOutputPath: the path is refused.
    """
    _refuse_control_characters(path, option)
    if isinstance(path, str) and names_a_directory(path):
        slash = " (it ends in /)" if path.endswith("/") else ""
        raise BadOutputPath(f"{option} {path} names a directory{slash}; give a file path")
    path = Path(path)
    _refuse_inside_run(path, option, own_run)
    if path.is_dir():
        raise BadOutputPath(f"{option} {path} is a directory; give a file path")
    if suffix is not None and path.suffix.lower() != suffix:
        raise BadOutputPath(f"{option} {path}: the file written is {suffix[1:].upper()}; give "
                            f"a path ending in {suffix}")  # fmt: skip
    if path.exists() and not path.is_file():
        return  # a device or a pipe: written in place, as it is
    parent = path.parent
    if not create_dir and not parent.is_dir():
        why = "is not a directory" if parent.exists() else "does not exist"
        raise BadOutputPath(f"{option} {path}: its directory {parent} {why}")
    probe_dir(parent, f"{option} {path}")


def check_output_dir(
    path: Path, option: str, *, empty: bool = False, own_run: Path | None = None
) -> None:
    """Check ``path``, a directory the command will write into (created with its parents when
    the command writes; module docstring); ``empty``: an existing directory must be empty (a
    run's or a gate's own directory).

    Raises:
        BadOutputPath: the path is refused.
    """
    _refuse_control_characters(path, option)
    _refuse_inside_run(path, option, own_run)
    if path.exists() and not path.is_dir():
        raise BadOutputPath(f"{option} {path} is a file, not a directory")
    if empty and path.exists() and any(path.iterdir()):
        raise BadOutputPath(f"{option} {path} exists and is not empty; pick another {option}")
    probe_dir(path, f"{option} {path}")


def write_error_exit(error: Exception) -> NoReturn:
    """Say a write that failed after the check in one line on stderr (``error: cannot write
    PATH: REASON (ERRNO)``) and exit ``OutputExit.WRITE_FAILED``."""
    click.echo(f"error: {error}", err=True)
    raise SystemExit(OutputExit.WRITE_FAILED)
