"""``loadgen validate RUN_DIR``: the integrity rule every reader applies, plus the seal and the
report; exit codes a CI script can gate on (docs/run-integrity.md)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from server.net.exit_codes import ValidateExit, code_lines

_HELP = f"""Check RUN_DIR: files present and as sealed, each what its name says, records as many
as the phases sent, stamps in order, values finite, failures counted.

\b
Exit codes:
{code_lines(ValidateExit)}
"""


@click.command(help=_HELP)
@click.argument("run_dir", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
@click.option("--strict", is_flag=True, help="Exit 1 on any warning too (figures that need care).")
def validate(run_dir: Path, as_json: bool, strict: bool) -> None:
    """Check RUN_DIR (the help text, with the exit codes: ``_HELP``)."""
    from analysis.validate import ValidationResult, validate_run
    from loadgen.runformat import FormatVersionError
    from loadgen.runformat.layout import RUN_MARKERS

    if not any((run_dir / name).is_file() for name in RUN_MARKERS):  # nothing a run wrote
        click.echo(f"error: {run_dir}: no run here (none of {', '.join(RUN_MARKERS)})", err=True)
        sys.exit(ValidateExit.USAGE)
    try:
        result = validate_run(run_dir)
    except FormatVersionError as exc:  # the one check every reader makes: one line
        click.echo(f"error: {exc}", err=True)
        sys.exit(ValidateExit.USAGE)
    except Exception as exc:  # a bug or a file nobody foresaw: invalid, said in one line
        result = ValidationResult(
            problems=[f"validation could not finish: {type(exc).__name__}: {exc}"]
        )
    if not result.ok or (strict and result.warnings):
        code = ValidateExit.INVALID
    else:
        code = ValidateExit.ATTENTION if result.attention else ValidateExit.VALID
    if as_json:
        click.echo(
            json.dumps(
                {
                    "ok": result.ok,
                    "exit_code": int(code),
                    "problems": result.problems,
                    "attention": result.attention,
                    "warnings": result.warnings,
                    "facts": result.facts,
                }
            )
        )
    else:
        for name, facts in result.facts.items():
            click.echo(f"{name}: {_fact_line(facts)}")
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


def _fact_line(facts: object) -> str:
    """One case's facts as the console shows them: ``status ok, requests 29, failed 0``
    (a mapping's items in order, ``key value``); anything else as its text."""
    if isinstance(facts, dict):
        return ", ".join(f"{key} {value}" for key, value in facts.items())
    return str(facts)
