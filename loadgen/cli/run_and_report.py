"""A run followed by its report and its manifest, as ``loadgen run`` and ``loadgen gate`` do it.

This joins the load generator (``loadgen.run``) and the analysis (``analysis.report``), which
only the composition root may import together; the run itself, its event loop and its
cancellation are ``loadgen.run``'s.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import click
from pydantic import BaseModel
from rich.markup import escape

from server.net.errors import describe_exception
from server.net.exit_codes import RunExit

if TYPE_CHECKING:
    from collections.abc import Callable

    from rich.console import Console

    from analysis.report import Report
    from loadgen.kept_servers import KeptServers
    from loadgen.runformat import RunWriteError
    from loadgen.workers.process import WorkersConfig
    from scenarios.base import Scenario
    from scenarios.plan import Plan

DEFAULT_RUNS_ROOT = Path("runs")


def new_run_dir(name: str) -> Path:
    """A fresh ``runs/<name>-<UTC time>`` (``loadgen.run.new_run_dir``)."""
    from loadgen.run import new_run_dir as fresh_run_dir

    return fresh_run_dir(DEFAULT_RUNS_ROOT, name)


def check_out_dir(run_dir: Path) -> None:
    """Refuse an ``--out`` that is a file, a directory with something in it, inside another
    run, or a place that takes no file (``loadgen.cli.output_paths``); the run creates it.

    Raises:
        BadOutputPath: naming the path and why (exit 2).
    """
    from loadgen.cli.output_paths import check_output_dir

    check_output_dir(run_dir, "--out", empty=True)


def run_and_report(
    scenario: Scenario,
    params: BaseModel,
    run_dir: Path,
    workers: WorkersConfig | None = None,
    failed_exit: int = RunExit.FAILED,
    kept: KeptServers | None = None,
    transform: Callable[[Plan], Plan] | None = None,
) -> tuple[str, Report | None]:
    """Run, build the report, write the manifest, print the summary: (status, report).

    Exits with code ``failed_exit`` (the calling command's: ``run``'s 1, ``gate``'s 4) when
    the run was interrupted (Ctrl-C or SIGTERM), after writing what was recorded, its report
    and its manifest; and with that code and one line on stderr naming the file and the OS
    error when a file of the run could not be written (``run.json`` says ``failed`` with that
    reason if it could still be written; no temporary file is left). ``kept``, ``transform``:
    servers kept across runs and a change to the plan (``loadgen.run.run_scenario``).
    """
    from loadgen.progress import RichProgress
    from loadgen.redact import redact_command
    from loadgen.run import cancel_on_sigterm, group_signals_restored, run_scenario
    from loadgen.runformat import RunWriteError
    from server.net.loop import run_event_loop

    command = redact_command(["loadgen", *sys.argv[1:]])
    progress = RichProgress()
    progress.console.print(f"run directory: [bold]{escape(str(run_dir))}[/bold]")
    status: str = "interrupted"
    error: str | None = "interrupted (Ctrl-C or SIGTERM)"
    write_error: RunWriteError | None = None
    with group_signals_restored():
        try:
            result = run_event_loop(
                cancel_on_sigterm(
                    run_scenario(
                        scenario,
                        params,
                        run_dir,
                        command,
                        progress.hooks(),
                        workers,
                        kept,
                        transform,
                    )
                )
            )
            status, error, write_error = result.status, result.error, result.write_error
        except RunWriteError as exc:  # before the run began: run.json itself failed
            status, error, write_error = "failed", str(exc), exc
        except (KeyboardInterrupt, asyncio.CancelledError):
            progress.console.print("[red]interrupted: writing what was recorded[/red]")
        finally:
            progress.close()
            report, report_error, manifest_error = finalize(run_dir, status, command)
    write_error = write_error or manifest_error
    if write_error is not None:
        # One line, the first write that failed; the report is not trusted to have been built.
        click.echo(f"error: {write_error}", err=True)
        sys.exit(failed_exit)
    if report is not None:
        print_summary(report, progress.console)
    if error:
        progress.console.print(f"[red]run {status}: {escape(str(error))}[/red]")
    shown = status
    if report_error is not None:
        shown = f"{status}, report failed"
        progress.console.print(
            f"[red]report failed: {report_error}[/red]\n"
            "The records are intact; rebuild the report with "
            f"`loadgen report {run_dir}` once the cause is fixed."
        )
    progress.console.print(f"run directory: [bold]{escape(str(run_dir))}[/bold] (status {shown})")
    if report is not None:
        from loadgen.cli.pages import show_page
        from loadgen.runformat.layout import REPORT_HTML

        show_page("report", run_dir / REPORT_HTML)
    if status == "interrupted":
        sys.exit(failed_exit)
    return status, report


def finalize(
    run_dir: Path, status: str, command: list[str]
) -> tuple[Report | None, str | None, RunWriteError | None]:
    """Build the report from the raw files, then write the manifest (always, and last):
    (the report or ``None``, why building it failed or ``None``, the manifest's write error
    or ``None``). A run that never made a plan has no report and no report error (its status
    says why). Never raises for a file it cannot write."""
    from loadgen.runformat import RunWriteError
    from loadgen.runformat.layout import PLAN_FILE
    from loadgen.runformat.manifest import write_manifest

    report, error = None, None
    if (run_dir / PLAN_FILE).exists():
        try:
            from analysis.report import build_report

            report = build_report(run_dir)
        except Exception as exc:  # raw data stays; `loadgen report` can retry
            error = describe_exception(exc)
    try:
        write_manifest(run_dir, status, command)
    except RunWriteError as exc:
        return report, error, exc
    return report, error, None


def print_summary(report: Report, console: Console) -> None:
    """The per-phase tables and the verdicts of a built ``analysis.report.Report``."""
    from rich.table import Table

    for title, headers, rows in report.console_tables():
        table = Table(title=title)
        for col in headers:
            table.add_column(col, justify="right")
        for row in rows:
            table.add_row(*row)
        console.print(table)
    mark = {
        True: "[green]PASS[/green]",
        False: "[red]FAIL[/red]",
        None: "[yellow]UNDECIDED[/yellow]",
    }
    for v in report.summary.verdicts:
        console.print(f"{mark[v.passed]} {escape(f'{v.case}: {v.check} — {v.detail}')}")
