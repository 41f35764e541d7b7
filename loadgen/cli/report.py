"""``loadgen report RUN_DIR``: rebuild a run's report from its raw files, re-seal its manifest."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from loadgen.cli.run_and_report import print_summary

_REPORT_OUTPUTS = ("report.md", "report.json", "plots/")

#: Exit code of ``report``/``validate`` for a run of a format version this loadgen cannot read.
FORMAT_VERSION_EXIT = 2


def refuse_unreadable_version(run_dir: Path) -> None:
    """Exit ``FORMAT_VERSION_EXIT`` with one line when ``run_dir``'s run format version is
    neither this loadgen's nor 0 (which is read through its migration)."""
    from loadgen.runformat import FormatVersionError, run_format_version

    try:
        run_format_version(run_dir)
    except FormatVersionError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(FORMAT_VERSION_EXIT)


@click.command()
@click.argument("run_dir", type=click.Path(exists=True, file_okay=False, path_type=Path))
def report(run_dir: Path) -> None:
    """Rebuild the report of RUN_DIR from its raw files (and re-seal its manifest).

    Refuses when raw files changed since the run sealed them (the report would not be
    re-derivable from what the run wrote), and re-seals only after a successful rebuild.
    """
    from analysis.load import read_json_file
    from analysis.report import build_report
    from loadgen.progress import make_console
    from loadgen.runformat import RunInfo
    from loadgen.runformat.layout import MANIFEST_FILE, PLAN_FILE, RUN_FILE
    from loadgen.runformat.manifest import verify_manifest, write_manifest

    if not (run_dir / PLAN_FILE).exists():
        raise click.ClickException(f"{run_dir} has no {PLAN_FILE}: not a run directory")
    refuse_unreadable_version(run_dir)
    if (run_dir / MANIFEST_FILE).exists():
        changed = [p for p in verify_manifest(run_dir) if not p.startswith(_REPORT_OUTPUTS)]
        if changed:
            raise click.ClickException(
                "raw files differ from the run's manifest, so a rebuilt report would not "
                "be re-derivable from what the run wrote:\n  " + "\n  ".join(changed)
            )
    info = read_json_file(run_dir / RUN_FILE, RunInfo).data
    console = make_console()
    try:
        result = build_report(run_dir)
    except Exception as exc:
        raise click.ClickException(f"report failed: {type(exc).__name__}: {exc}") from None
    write_manifest(run_dir, info.status or "unknown", list(info.command or []))
    print_summary(result, console)
    for problem in result.file_problems:  # what was skipped: the report rests on the rest
        console.print(f"[yellow]skipped: {problem}[/yellow]")
    click.echo(str(run_dir / "report.md"))
