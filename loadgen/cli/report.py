"""``loadgen report RUN_DIR``: rebuild a run's report from its raw files, re-seal its manifest."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

import click
from rich.markup import escape

from loadgen.cli.opening import open_or_exit
from loadgen.cli.output_paths import probe_dir, write_error_exit
from loadgen.cli.pages import show_page
from loadgen.cli.run_and_report import print_summary
from server.net.errors import describe_exception
from server.net.exit_codes import ReportExit

if TYPE_CHECKING:
    from analysis.integrity import IntegrityError


def refuse(exc: IntegrityError) -> NoReturn:
    """Refuse a broken run (exit 1): one ``cannot publish:`` line per kind of record that
    cannot be true, with its count, else one line naming the first problem."""
    for line in exc.implausible:
        click.echo(f"cannot publish: {line}", err=True)
    if len(exc.implausible) < len(exc.problems) or not exc.implausible:
        click.echo(f"Error: refused: {exc}", err=True)
    sys.exit(ReportExit.REFUSED)


@click.command()
@click.argument("run_dir", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option(
    "--reseal",
    "reason",
    metavar="REASON",
    default=None,
    help="Re-seal although the files no longer match the manifest (or it is missing); the "
    "manifest, report and validate record that it was resealed, when and why.",
)
@click.option(
    "--open",
    "open_page",
    is_flag=True,
    help="Open report.html in a browser (where one exists; its file:// URL is printed anyway).",
)
def report(run_dir: Path, reason: str | None, open_page: bool) -> None:
    """Rebuild the report of RUN_DIR from its raw files (and re-seal its manifest): report.md,
    report.json, report.html and the plots; print report.html's file:// URL.

    Refuses (exit 1, one line) when the files differ from the run's manifest (the report would
    not be re-derivable from what the run wrote) unless --reseal REASON is given, and when the
    run is broken by the integrity rule that `loadgen validate` applies (docs/run-integrity.md):
    a broken run gets no figures and is never sealed, --reseal or not. Exit 2 for a run format
    this loadgen cannot read and a directory that is no run.
    """
    from analysis.integrity import IntegrityError, manifest_changes
    from analysis.report import build_report
    from loadgen.progress import make_console
    from loadgen.runformat import Reseal, RunInfo, RunWriteError
    from loadgen.runformat.atomic import staged_writes
    from loadgen.runformat.layout import MANIFEST_FILE, REPORT_HTML, REPORT_MD, RUN_FILE
    from loadgen.runformat.manifest import unverified_seal, utc_now, write_manifest
    from loadgen.runformat.reading import read_json_file

    open_or_exit(run_dir, "report")
    if reason is not None and not reason.strip():
        raise click.UsageError("--reseal needs a reason (why the files changed)")
    if reason is not None and any(ord(c) < 32 or ord(c) == 127 for c in reason):
        # The reason is written into report.md and printed: one line of plain text, so it
        # cannot forge a second "Resealed" line or send terminal escapes.
        raise click.UsageError("--reseal takes one line of text (no newlines or control "
                               "characters)")  # fmt: skip
    # The report's outputs are the run's own: only checked to be writable, before any work.
    probe_dir(run_dir, f"run directory {run_dir}")
    changed = manifest_changes(run_dir, rebuilding=True)
    info = read_json_file(run_dir / RUN_FILE, RunInfo).data
    sealed = (run_dir / MANIFEST_FILE).exists()
    reseal = None
    if reason is not None:
        what = changed if sealed else [f"{MANIFEST_FILE} was missing"]
        reseal = Reseal(at=utc_now(), reason=reason.strip(), changed=what)
    elif not sealed:
        # Nothing can check these files against what the run wrote: the seal says so.
        reseal = unverified_seal(info.status)
    elif changed:
        more = f" (and {len(changed) - 1} more)" if len(changed) > 1 else ""
        raise click.ClickException(
            f"refused: raw files differ from the run's manifest ({changed[0]}{more}), so a "
            "rebuilt report would not be re-derivable from what the run wrote; "
            "`loadgen report --reseal REASON` re-seals on purpose"
        )
    console = make_console()
    try:
        # The report and the manifest that hashes it as one set: a write that fails (a full
        # disk) leaves the previous report and manifest, which still agree, not half of each.
        with staged_writes():
            result = build_report(run_dir, reseal)
            write_manifest(run_dir, info.status or "unknown", list(info.command or []), reseal)
    except IntegrityError as exc:
        refuse(exc)
    except RunWriteError as exc:  # one line: the file and the OS error (exit 1)
        write_error_exit(exc)
    except Exception as exc:
        raise click.ClickException(f"report failed: {describe_exception(exc)}") from None
    print_summary(result, console)
    for problem in result.file_problems:  # read as empty (run.json): the report says so
        console.print(f"[yellow]note: {escape(problem)}[/yellow]")
    if reseal is not None:
        console.print(f"[yellow]resealed: {escape(reseal.reason)}[/yellow]")
    click.echo(str(run_dir / REPORT_MD))
    show_page("report", run_dir / REPORT_HTML, open_page)
