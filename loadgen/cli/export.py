"""``loadgen export RUN``: per-request records as CSV or Parquet, or each phase as the JSON
``vllm bench serve --save-result`` writes (``analysis.export``)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import click

from loadgen.cli.opening import open_or_exit


def _percentiles(text: str) -> list[float]:
    """``--percentiles``: each in (0, 100) and given once (two equal values would write one
    field twice), ``scenarios.values.parse_percentiles``."""
    from scenarios.values import parse_percentiles

    try:
        return parse_percentiles(text)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--percentiles") from None


def _is_stdout(path: Path) -> bool:
    """Whether ``path`` is this process's standard output (``/dev/stdout``, ``/dev/fd/1``,
    or the pipe or terminal it is connected to)."""
    try:
        a, b = os.stat(path), os.fstat(sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):
        return False
    return (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino)


@click.command("export")
@click.argument("run_dir", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option(
    "--format", "fmt", type=click.Choice(["csv", "parquet", "vllm-bench"]), default="csv",
    show_default=True, help="csv/parquet: one row per request; vllm-bench: one JSON per phase.",
)  # fmt: skip
@click.option(
    "--out", type=click.Path(path_type=str), default=None,
    help="File (csv, parquet) or directory (vllm-bench); default: inside RUN_DIR/export. "
    "Never elsewhere inside a run directory; a file's directory must exist.",
)  # fmt: skip
@click.option(
    "--percentiles", default="99", show_default=True,
    help="vllm-bench: the pXX fields written (vLLM's --metric-percentiles).",
)  # fmt: skip
def export(run_dir: Path, fmt: str, out: str | None, percentiles: str) -> None:
    """Export RUN_DIR's records (csv, parquet) or phases (vllm-bench).

    Refuses (exit 1, one line) a run that `loadgen validate` calls broken
    (docs/run-integrity.md): its records give no figures. Exit 2 for a run format this
    loadgen cannot read and a directory that is no run.
    """
    from analysis.export import write_requests, write_vllm_bench
    from analysis.integrity import IntegrityError
    from loadgen.cli.output_paths import check_output_dir, check_output_file, write_error_exit
    from loadgen.runformat import RunFileError, RunWriteError
    from loadgen.runformat.layout import EXPORT_DIR

    wanted = _percentiles(percentiles)
    open_or_exit(run_dir, "export")
    default = run_dir / EXPORT_DIR / ("vllm-bench" if fmt == "vllm-bench" else f"requests.{fmt}")
    target = Path(out) if out else default
    if fmt == "vllm-bench":
        check_output_dir(target, "--out", own_run=run_dir)
    else:  # as typed: "--out dir.csv/" names a directory
        check_output_file(out or default, "--out", create_dir=out is None, own_run=run_dir)
    try:
        if fmt == "vllm-bench":
            for path in write_vllm_bench(run_dir, target, wanted):
                click.echo(path)
            return
        written = write_requests(run_dir, target, fmt)
        # The path goes where the data did not: into a stdout that holds the data it would
        # be a line of garbage after the CSV or the Parquet footer.
        click.echo(written, err=_is_stdout(target))
    except ImportError as exc:
        raise click.UsageError(f"--format {fmt} needs a package that is missing: {exc}") from None
    except RunFileError as exc:
        raise click.UsageError(str(exc)) from None
    except IntegrityError as exc:
        raise click.ClickException(f"refused: {exc}") from None
    except RunWriteError as exc:  # one line, no traceback: the file and the OS error
        write_error_exit(exc)
