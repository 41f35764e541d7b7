"""``loadgen``: the command line. Thin: build a config, validate it, call one entry point.

Heavy modules (pandas, matplotlib, aiohttp) are imported inside commands so ``--help`` is quick.
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

import click

from loadgen.params_cli import options_for, params_from_options

DEFAULT_RUNS_ROOT = Path("runs")


def _scenarios() -> dict[str, Any]:
    from scenarios.registry import SCENARIOS

    return SCENARIOS


def _asyncio_run(coro: Any) -> Any:
    try:
        import uvloop

        return uvloop.run(coro)
    except ImportError:  # pragma: no cover - uvloop is a dependency
        return asyncio.run(coro)


@click.group()
def main() -> None:
    """Testbed and load generator for LLM inference servers (vLLM first)."""


@main.command("list")
def list_scenarios() -> None:
    """List the built-in scenarios."""
    for name, scenario in sorted(_scenarios().items()):
        click.echo(f"{name:<18} {scenario.summary}")


class _RunGroup(click.Group):
    """``loadgen run SCENARIO``: one subcommand per scenario, options from its Params model."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(_scenarios())

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        scenario = _scenarios().get(name)
        if scenario is None:
            return None

        def callback(**values: Any) -> None:
            _run_command(scenario, values)

        common: list[click.Parameter] = [
            click.Option(["--out", "out"], type=click.Path(path_type=Path), default=None,
                         help="Run directory (default: runs/<scenario>-<UTC time>)."),
            click.Option(["--strict"], is_flag=True,
                         help="Exit with code 3 when a verdict fails (for CI gates)."),
        ]  # fmt: skip
        return click.Command(
            name,
            callback=callback,
            params=[*options_for(scenario.Params), *common],
            help=scenario.summary,
        )

    def resolve_command(
        self, ctx: click.Context, args: list[str]
    ) -> tuple[str | None, click.Command | None, list[str]]:
        if args and not args[0].startswith("-") and args[0] not in _scenarios():
            known = ", ".join(sorted(_scenarios()))
            raise click.UsageError(f"unknown scenario {args[0]!r}; known: {known}")
        return super().resolve_command(ctx, args)


@main.group(cls=_RunGroup)
def run() -> None:
    """Run a scenario: start the server(s), send the load, scrape metrics, write the report."""


def _check_cache_sizes(cases: list[Any], max_model_len: int) -> None:
    """Reject caches too small for vLLM to start with the embedded model, before any start.

    vLLM refuses to start unless the cache holds one full-length sequence
    (``max_model_len`` tokens); with the embedded model's KV bytes per token (of the chosen
    variant, 57,344 B for both) that is known here, so the error comes at once instead of
    after a 25 s failed start.
    """
    from server.sizes import format_size

    for case in cases:
        per_token = case.server.kv_bytes_per_token() if case.server is not None else None
        if per_token is None:
            continue  # attached, or a model whose KV geometry we do not know
        tokens = case.server.kv_cache_bytes // per_token
        if tokens < max_model_len:
            need = format_size(-(-max_model_len * per_token // 2**20) * 2**20)
            raise click.UsageError(
                f"case {case.name}: a {format_size(case.server.kv_cache_bytes)} KV cache holds "
                f"{tokens} tokens of the embedded model ({per_token:,} B each), fewer than "
                f"--max-model-len {max_model_len}; vLLM would refuse to start. "
                f"Use at least {need} or a smaller --max-model-len."
            )


def _nominal_check(scenario: Any, params: Any) -> None:
    """Build the plan against the capacity the cache size implies, before anything starts.

    Catches parameter combinations the scenario rejects without sending any load.
    """
    from scenarios.plan import CaseSpec
    from server.capacity import KVCapacity
    from server.model_variant import KV_BYTES_PER_TOKEN

    sizing: CaseSpec = scenario.sizing_case(params)
    if sizing.server is None:
        return  # attached: the real capacity is read before the plan is made
    _check_cache_sizes([sizing], sizing.server.max_model_len)
    # A model of unknown geometry is sized as if it were the embedded one (nominal only).
    per_token = sizing.server.kv_bytes_per_token() or KV_BYTES_PER_TOKEN
    tokens = sizing.server.kv_cache_bytes // per_token
    nominal = KVCapacity(tokens, 16, tokens // 16, sizing.server.kv_cache_bytes, "nominal")
    try:
        plan = scenario.plan(params, nominal)
    except ValueError as exc:
        raise click.UsageError(str(exc)) from None
    _check_cache_sizes(list(plan.cases), sizing.server.max_model_len)


async def _cancel_on_sigterm(coro: Any) -> Any:
    """Run ``coro``; SIGTERM cancels it like Ctrl-C does, so servers stop and files close."""
    import signal

    task = asyncio.current_task()
    assert task is not None
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, task.cancel)
    try:
        return await coro
    finally:
        loop.remove_signal_handler(signal.SIGTERM)


def _run_command(scenario: Any, values: dict[str, Any]) -> None:
    from loadgen.progress import RichProgress
    from loadgen.run import new_run_dir, run_scenario

    params = params_from_options(scenario.Params, values)
    _nominal_check(scenario, params)
    run_dir = values.get("out") or new_run_dir(DEFAULT_RUNS_ROOT, scenario.name)
    if run_dir.exists() and not run_dir.is_dir():
        raise click.UsageError(f"--out {run_dir} is a file, not a directory")
    if run_dir.exists() and any(run_dir.iterdir()):
        raise click.UsageError(f"{run_dir} exists and is not empty; pick another --out")
    command = ["loadgen", *sys.argv[1:]]
    progress = RichProgress()
    progress.console.print(f"run directory: [bold]{run_dir}[/bold]")
    status, error = "interrupted", "interrupted (Ctrl-C or SIGTERM)"
    try:
        result = _asyncio_run(
            _cancel_on_sigterm(run_scenario(scenario, params, run_dir, command, progress.hooks()))
        )
        status, error = result.status, result.error
    except (KeyboardInterrupt, asyncio.CancelledError):
        progress.console.print("[red]interrupted: writing what was recorded[/red]")
    finally:
        progress.close()
        report = _finalize(run_dir, status, command, progress.console)
    if report is not None:
        _print_summary(report, progress.console)
    if error:
        progress.console.print(f"[red]run {status}: {error}[/red]")
    progress.console.print(f"run directory: [bold]{run_dir}[/bold] (status {status})")
    if status != "ok":
        sys.exit(1)
    if values.get("strict") and report and report.summary.verdict_summary.failed:
        sys.exit(3)


def _finalize(run_dir: Path, status: str, command: list[str], console: Any) -> Any | None:
    """Build the report from the raw files, then write the manifest (always, and last)."""
    from loadgen.manifest import write_manifest

    report = None
    if (run_dir / "plan.json").exists():
        try:
            from analysis.report import build_report

            report = build_report(run_dir)
        except Exception as exc:  # raw data stays; `loadgen report` can retry
            console.print(f"[red]report failed: {type(exc).__name__}: {exc}[/red]")
    write_manifest(run_dir, status, command)
    return report


def _print_summary(report: Any, console: Any) -> None:
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
        console.print(f"{mark[v.passed]} {v.case}: {v.check} — {v.detail}")


_REPORT_OUTPUTS = ("report.md", "report.json", "plots/")


@main.command()
@click.argument("run_dir", type=click.Path(exists=True, file_okay=False, path_type=Path))
def report(run_dir: Path) -> None:
    """Rebuild the report of RUN_DIR from its raw files (and re-seal its manifest).

    Refuses when raw files changed since the run sealed them (the report would not be
    re-derivable from what the run wrote), and re-seals only after a successful rebuild.
    """
    from analysis.report import build_report
    from loadgen.manifest import verify_manifest, write_manifest
    from loadgen.progress import make_console
    from loadgen.rundir import MANIFEST_FILE, PLAN_FILE, RUN_FILE, read_json

    if not (run_dir / PLAN_FILE).exists():
        raise click.ClickException(f"{run_dir} has no {PLAN_FILE}: not a run directory")
    if (run_dir / MANIFEST_FILE).exists():
        changed = [p for p in verify_manifest(run_dir) if not p.startswith(_REPORT_OUTPUTS)]
        if changed:
            raise click.ClickException(
                "raw files differ from the run's manifest, so a rebuilt report would not "
                "be re-derivable from what the run wrote:\n  " + "\n  ".join(changed)
            )
    info = read_json(run_dir / RUN_FILE) if (run_dir / RUN_FILE).exists() else {}
    console = make_console()
    try:
        result = build_report(run_dir)
    except Exception as exc:
        raise click.ClickException(f"report failed: {type(exc).__name__}: {exc}") from None
    write_manifest(run_dir, str(info.get("status", "unknown")), list(info.get("command", [])))
    _print_summary(result, console)
    click.echo(str(run_dir / "report.md"))


@main.command()
@click.argument("run_dir", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
@click.option("--strict", is_flag=True, help="Exit with code 1 on warnings too.")
def validate(run_dir: Path, as_json: bool, strict: bool) -> None:
    """Check RUN_DIR: files present, hashes match, values finite, failures counted.

    Exit code 0 when valid (warnings are printed: figures that need care), 1 when invalid
    (or, with --strict, when there are warnings).
    """
    from analysis.validate import validate_run

    result = validate_run(run_dir)
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


from loadgen.server_cli import server  # noqa: E402

main.add_command(server)

from gateway.cli import gateway_command  # noqa: E402

main.add_command(gateway_command, "gateway")

if __name__ == "__main__":
    main()
