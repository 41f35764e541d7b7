"""``loadgen report RUN_DIR``: rebuild a run's report from its raw files, re-seal its manifest."""

from __future__ import annotations

from pathlib import Path

import click

from loadgen.cli.run_and_report import print_summary

_REPORT_OUTPUTS = ("report.md", "report.json", "plots/")


@click.command()
@click.argument("run_dir", type=click.Path(exists=True, file_okay=False, path_type=Path))
def report(run_dir: Path) -> None:
    """Rebuild the report of RUN_DIR from its raw files (and re-seal its manifest).

    Refuses when raw files changed since the run sealed them (the report would not be
    re-derivable from what the run wrote), and re-seals only after a successful rebuild.
    """
    from analysis.load import read_json_file
    from analysis.report import build_report
    from loadgen.manifest import verify_manifest, write_manifest
    from loadgen.progress import make_console
    from loadgen.rundir import MANIFEST_FILE, PLAN_FILE, RUN_FILE

    if not (run_dir / PLAN_FILE).exists():
        raise click.ClickException(f"{run_dir} has no {PLAN_FILE}: not a run directory")
    if (run_dir / MANIFEST_FILE).exists():
        changed = [p for p in verify_manifest(run_dir) if not p.startswith(_REPORT_OUTPUTS)]
        if changed:
            raise click.ClickException(
                "raw files differ from the run's manifest, so a rebuilt report would not "
                "be re-derivable from what the run wrote:\n  " + "\n  ".join(changed)
            )
    info = read_json_file(run_dir / RUN_FILE, "run").data
    console = make_console()
    try:
        result = build_report(run_dir)
    except Exception as exc:
        raise click.ClickException(f"report failed: {type(exc).__name__}: {exc}") from None
    write_manifest(run_dir, str(info.get("status", "unknown")), list(info.get("command") or []))
    print_summary(result, console)
    for problem in result.file_problems:  # what was skipped: the report rests on the rest
        console.print(f"[yellow]skipped: {problem}[/yellow]")
    click.echo(str(run_dir / "report.md"))
