"""``loadgen compare BASELINE CANDIDATE``: classify every metric of two runs (or pools of runs),
write compare.md/.json/.html and plots, print the page's URL, exit non-zero on a regression."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, NoReturn

import click
from rich.markup import escape

from loadgen.cli.output_paths import check_output_dir, write_error_exit
from loadgen.cli.pages import show_page
from loadgen.cli.run_and_report import new_run_dir
from loadgen.runformat.atomic import RunWriteError
from server.net.errors import describe_exception
from server.net.exit_codes import CompareExit, code_lines


def _parse_pairs(pairs: tuple[str, ...]) -> dict[str, str]:
    out = {}
    for item in pairs:
        base, sep, cand = item.partition("=")
        if not sep or not base or not cand:
            raise click.BadParameter(
                f"{item!r} is not BASELINE_CASE=CANDIDATE_CASE", param_hint="--pair"
            )
        out[base] = cand
    return out


def fail_compare(why: str) -> NoReturn:
    """Say in one line why the comparison could not be made; exit
    ``CompareExit.CANNOT_COMPARE`` (2, the usage-error code, never 1, which CI reads as a
    regression)."""
    click.echo(f"error: could not compare: {why}", err=True)
    sys.exit(CompareExit.CANNOT_COMPARE)


def compare_exit_code(
    baseline: Path,
    candidate: Path,
    out: Path,
    gate_file: Path | None,
    strict: bool,
    allow_workload_mismatch: bool = False,
    pairs: dict[str, str] | None = None,
    allow_incomplete: bool = False,
    confidence: float | None = None,
    paired: bool = False,
) -> int:
    """``_compare_and_report``'s exit code; an unexpected error (a bug, a file nobody
    foresaw) becomes one line and ``CompareExit.CANNOT_COMPARE``, never a traceback whose exit
    code 1 CI would read as a regression; a file that cannot be written is one line naming it
    (``loadgen.cli.output_paths``)."""
    try:
        return _compare_and_report(
            baseline, candidate, out, gate_file, strict, allow_workload_mismatch, pairs,
            allow_incomplete, confidence, paired,
        )  # fmt: skip
    except click.ClickException:
        raise  # usage errors: click prints them and exits 2
    except RunWriteError as exc:  # a write error, as in every command: one line, exit 1
        write_error_exit(exc)
    except Exception as exc:
        fail_compare(describe_exception(exc))


def _compare_and_report(
    baseline: Path,
    candidate: Path,
    out: Path,
    gate_file: Path | None,
    strict: bool,
    allow_workload_mismatch: bool = False,
    pairs: dict[str, str] | None = None,
    allow_incomplete: bool = False,
    confidence: float | None = None,
    paired: bool = False,
) -> int:
    """Compare, write compare.md/.json/plots into ``out``, print the findings; the exit code.
    ``confidence`` replaces the gate file's (a sequential gate's per-look level); ``paired``:
    the sides are one gate's block pairs, decided by their paired key metrics."""
    from rich.table import Table

    from analysis.compare import CompareError, compare_paths
    from analysis.compare_report import metric_rows, write_comparison
    from analysis.gate_decision import decide, exit_code, undecided_line
    from analysis.gate_file import GateFileError, load_gate
    from loadgen.progress import make_console
    from loadgen.runformat.layout import COMPARE_HTML

    try:
        gate = load_gate(gate_file)
        if confidence is not None:
            gate = gate.model_copy(update={"confidence": confidence})
        comparison = compare_paths(
            baseline, candidate, gate, allow_workload_mismatch=allow_workload_mismatch,
            pairs=pairs, allow_incomplete=allow_incomplete, paired=paired,
        )  # fmt: skip
    except GateFileError as exc:
        raise click.UsageError(str(exc)) from None
    except CompareError as exc:  # a run that cannot be compared: no usage banner, one line
        fail_compare(str(exc))
    path = write_comparison(comparison, out, strict)
    code = exit_code(comparison, strict)
    console = make_console()
    loud = ("regression", "improvement", "missing")
    shown = [m for m in comparison.metrics if m.classification in loud]
    of = " (per phase, information)" if comparison.paired is not None else ""
    table = Table(title=f"{comparison.scenario}: regressions, improvements, missing metrics{of}")
    for col in ("case", "phase", "metric", "baseline", "candidate", "change", "interval", "tol",
                "class"):  # fmt: skip
        table.add_column(col, justify="right")
    for m, row in zip(shown, metric_rows(shown), strict=True):
        style = {"regression": "red", "missing": "magenta"}.get(m.classification)
        table.add_row(m.case, *row[:8], style=style)
    if shown:
        console.print(table)
    inconclusive = [m for m in comparison.metrics if m.classification == "inconclusive"]
    if inconclusive:
        what = "metric(s)" if not of else "per-phase metric(s) (information: the paired key " \
            "metrics decide)"  # fmt: skip
        console.print(f"{len(inconclusive)} {what} inconclusive: compare.md says why")
    for v in comparison.verdicts:
        if v.classification != "no change":
            console.print(
                f"verdict {v.case}: {v.check}: {v.baseline} → {v.candidate} ({v.classification})"
            )
    for note in comparison.notes + [f"not compared: {u}" for u in comparison.unpaired]:
        console.print(f"[yellow]{escape(note)}[/yellow]")
    counts = ", ".join(f"{k} {n}" for k, n in comparison.counts.items())
    console.print(
        f"baseline vLLM {', '.join(comparison.baseline.vllm_versions)} vs candidate vLLM "
        f"{', '.join(comparison.candidate.vllm_versions)}: {counts}"
    )
    _print_paired(console, comparison)
    decision = decide(comparison, strict)
    for u in decision.undecided[:20]:
        console.print(f"[yellow]undecided {escape(undecided_line(u))}[/yellow]")
    if len(decision.undecided) > 20:
        console.print(f"… {len(decision.undecided) - 20} more undecided key metrics: compare.md")
    style = {0: "green", 1: "red"}.get(code, "yellow")
    console.print(f"[bold {style}]{escape(decision.line)}[/bold {style}]")
    console.print(f"{escape(str(path))} (exit code {code})")
    show_page("compare", out / COMPARE_HTML)
    return code


def _print_paired(console: Any, comparison: Any) -> None:
    """One line per paired key metric: class, change, interval and MDE."""
    for m in comparison.paired or []:
        figures = ""
        if None not in (m.change, m.low, m.high, m.mde):
            figures = f" ({m.change:.4g} in [{m.low:.4g}, {m.high:.4g}], MDE {m.mde:.3g})"
        console.print(f"paired {m.case} {m.metric}: {m.classification}{figures}")


_HELP = f"""Compare CANDIDATE against BASELINE (each a run directory, or a directory of runs
that are pooled) and classify every metric: regression, improvement, no change, inconclusive.

\b
Exit codes:
{code_lines(CompareExit)}
"""


@click.command(help=_HELP)
@click.argument("baseline", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.argument("candidate", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option(
    "--gate",
    "gate_file",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    default=None,
    help="Gate file (TOML) overriding analysis/gate_defaults.toml.",
)
@click.option(
    "--strict",
    is_flag=True,
    help="Every gated metric is key, not only the gate file's key metrics.",
)
@click.option(
    "--out",
    type=click.Path(path_type=Path),
    default=None,
    help="Where compare.md/.json and plots go (default: runs/compare-<UTC time>).",
)
@click.option(
    "--allow-workload-mismatch",
    is_flag=True,
    help="Compare even when the plans' workload hashes differ.",
)
@click.option(
    "--pair",
    "pairs",
    multiple=True,
    metavar="BASE=CAND",
    help="Pair differently named cases (repeatable).",
)
@click.option(
    "--allow-incomplete",
    is_flag=True,
    help="Compare runs that did not complete (every figure from them is marked).",
)
@click.option(
    "--paired",
    is_flag=True,
    help="The sides are one gate's block pairs (run-N beside run-N): decide on the paired "
    "key metrics (docs/gate-paired.md).",
)
def compare(
    baseline: Path,
    candidate: Path,
    gate_file: Path | None,
    strict: bool,
    out: Path | None,
    allow_workload_mismatch: bool,
    pairs: tuple[str, ...],
    allow_incomplete: bool,
    paired: bool,
) -> None:
    """Compare (the help text, with the exit codes: ``_HELP``)."""
    from analysis.compare import CompareError
    from analysis.compare_runs import distinct_sides
    from analysis.gate_file import GateFileError, load_gate

    parsed = _parse_pairs(pairs)
    try:  # a bad gate file is a bad flag: named before the output path is looked at
        load_gate(gate_file)
    except GateFileError as exc:
        raise click.UsageError(str(exc)) from None
    try:  # sides without a run, or sharing one: said before any output directory is made
        distinct_sides(baseline, candidate)
    except CompareError as exc:
        fail_compare(str(exc))
    out = out or new_run_dir("compare")
    check_output_dir(out, "--out")
    sys.exit(
        compare_exit_code(baseline, candidate, out, gate_file, strict, allow_workload_mismatch,
                           parsed, allow_incomplete, paired=paired)
    )  # fmt: skip
