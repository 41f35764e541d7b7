"""``loadgen validate RUN_DIR``: files present, hashes match, values finite, failures counted."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click


@click.command()
@click.argument("run_dir", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
@click.option("--strict", is_flag=True, help="Exit with code 1 on warnings too.")
def validate(run_dir: Path, as_json: bool, strict: bool) -> None:
    """Check RUN_DIR: files present, hashes match, values finite, failures counted.

    Exit code 0 when valid (warnings are printed: figures that need care), 1 when invalid
    (or, with --strict, when there are warnings).
    """
    from analysis.validate import ValidationResult, validate_run
    from loadgen.cli.report import refuse_unreadable_version

    refuse_unreadable_version(run_dir)

    try:
        result = validate_run(run_dir)
    except Exception as exc:  # a bug or a file nobody foresaw: invalid, said in one line
        result = ValidationResult(
            problems=[f"validation could not finish: {type(exc).__name__}: {exc}"]
        )
    if as_json:
        click.echo(
            json.dumps(
                {
                    "ok": result.ok,
                    "problems": result.problems,
                    "warnings": result.warnings,
                    "facts": result.facts,
                }
            )
        )
    else:
        for name, facts in result.facts.items():
            click.echo(f"{name}: {facts}")
        for warning in result.warnings:
            click.echo(f"warning: {warning}", err=True)
        for problem in result.problems:
            click.echo(f"problem: {problem}", err=True)
        if result.ok:
            suffix = f" ({len(result.warnings)} warning(s))" if result.warnings else ""
            click.echo("valid" + suffix)
        else:
            click.echo(f"INVALID: {len(result.problems)} problem(s)")
    if not result.ok or (strict and result.warnings):
        sys.exit(1)
