"""``loadgen validate RUN_DIR``: the integrity rule every reader applies, plus the seal and the
report; exit codes a CI script can gate on (docs/run-integrity.md)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

#: ``validate``'s exit codes: valid; invalid; usage (and an unreadable run format); valid but
#: needs attention (``analysis.integrity.ATTENTION_EXIT``: not a clean, complete run).
VALID_EXIT, INVALID_EXIT, USAGE_EXIT = 0, 1, 2


@click.command()
@click.argument("run_dir", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
@click.option("--strict", is_flag=True, help="Exit 1 on any warning too (figures that need care).")
def validate(run_dir: Path, as_json: bool, strict: bool) -> None:
    """Check RUN_DIR: files present and as sealed, each what its name says, records as many
    as the phases sent, stamps in order, values finite, failures counted.

    \b
    Exit codes:
      0  valid (warnings, if any, are printed: figures that need care)
      1  invalid: a problem (`report` and `compare` refuse such a run); with --strict also
         when there is any warning
      2  usage error, or a run format this loadgen cannot read
      4  valid, but not a clean, complete run: the run or a case failed or was interrupted,
         a phase is incomplete, requests were interrupted, or the run was resealed
    """
    from analysis.integrity import ATTENTION_EXIT
    from analysis.validate import ValidationResult, validate_run
    from loadgen.cli.opening import FORMAT_VERSION_EXIT
    from loadgen.runformat import FormatVersionError

    try:
        result = validate_run(run_dir)
    except FormatVersionError as exc:  # the one check every reader makes: one line
        click.echo(f"error: {exc}", err=True)
        sys.exit(FORMAT_VERSION_EXIT)
    except Exception as exc:  # a bug or a file nobody foresaw: invalid, said in one line
        result = ValidationResult(
            problems=[f"validation could not finish: {type(exc).__name__}: {exc}"]
        )
    if not result.ok or (strict and result.warnings):
        code = INVALID_EXIT
    else:
        code = ATTENTION_EXIT if result.attention else VALID_EXIT
    if as_json:
        click.echo(
            json.dumps(
                {
                    "ok": result.ok,
                    "exit_code": code,
                    "problems": result.problems,
                    "attention": result.attention,
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
        for item in result.attention:
            click.echo(f"attention: {item}", err=True)
        for problem in result.problems:
            click.echo(f"problem: {problem}", err=True)
        if result.ok:
            suffix = f" ({len(result.warnings)} warning(s))" if result.warnings else ""
            needs = (f", needs attention: {'; '.join(result.attention)}"
                     if result.attention else "")  # fmt: skip
            click.echo("valid" + suffix + needs)
        else:
            click.echo(f"INVALID: {len(result.problems)} problem(s)")
    sys.exit(code)
