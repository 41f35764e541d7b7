"""``loadgen``: the command line. Thin: build a config, validate it, call one entry point.

Heavy modules (pandas, matplotlib, aiohttp) are imported inside commands so ``--help`` is quick.
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any, NoReturn

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


class _ScenarioGroup(click.Group):
    """A group with one subcommand per scenario (``loadgen run``, ``loadgen gate``): lists
    them, names the known ones for an unknown name, and builds each with ``scenario_command``."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(_scenarios())

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        scenario = _scenarios().get(name)
        return None if scenario is None else self.scenario_command(name, scenario)

    def scenario_command(self, name: str, scenario: Any) -> click.Command:
        raise NotImplementedError

    def resolve_command(
        self, ctx: click.Context, args: list[str]
    ) -> tuple[str | None, click.Command | None, list[str]]:
        if args and not args[0].startswith("-") and args[0] not in _scenarios():
            known = ", ".join(sorted(_scenarios()))
            raise click.UsageError(f"unknown scenario {args[0]!r}; known: {known}")
        return super().resolve_command(ctx, args)


class _RunGroup(_ScenarioGroup):
    """``loadgen run SCENARIO``: one subcommand per scenario, options from its Params model."""

    def scenario_command(self, name: str, scenario: Any) -> click.Command:
        def callback(**values: Any) -> None:
            _run_command(scenario, values)

        common: list[click.Parameter] = [
            click.Option(["--out", "out"], type=click.Path(path_type=Path), default=None,
                         help="Run directory (default: runs/<scenario>-<UTC time>)."),
            click.Option(["--strict"], is_flag=True,
                         help="Exit with code 3 when a verdict fails (for CI gates)."),
            click.Option(["--ray"], default=None, metavar="ADDRESS|auto",
                         help="Place the workers as actors on this Ray cluster (auto: the one "
                         "this host belongs to); needs pip install '.[ray]'."),
            click.Option(["--workers"], default=None, metavar="N|auto",
                         help="Load-generator worker processes, each with its own event loop "
                         "and share of every phase (default 1: this process; auto: the cores "
                         "available to it). With --ray: actors (default one per node)."),
        ]  # fmt: skip
        return click.Command(
            name,
            callback=callback,
            params=[*options_for(scenario.Params), *common],
            help=scenario.summary,
        )


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
    _check_engine_flags(list(plan.cases))


def _check_engine_flags(cases: list[Any]) -> None:
    """Reject a server configuration the engine's vLLM release cannot take (a flag it lacks,
    a cache size an older CPU release cannot express), before any start."""
    from server.engine_flags import UnsupportedFlagError, adapt_command
    from server.engines import EngineNotFoundError, inspect_engine

    for case in cases:
        if case.server is None:
            continue
        try:
            engine = inspect_engine(case.server.python or sys.executable)
            adapt_command(case.server.command(engine.python, "MODEL", 0), engine)
        except (UnsupportedFlagError, EngineNotFoundError) as exc:
            raise click.UsageError(f"case {case.name}: {exc}") from None


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


def workers_option(text: str | None) -> int | None:
    """``--workers``: a count ≥ 1, ``auto`` (the cores this process may run on,
    ``os.sched_getaffinity``), or ``None`` when not given.

    Raises:
        click.BadParameter: anything else.
    """
    import os

    if text is None:
        return None
    if text == "auto":
        return len(os.sched_getaffinity(0))
    if not text.isdigit() or int(text) < 1:
        raise click.BadParameter(f"{text!r} is not a worker count ≥ 1 or 'auto'",
                                 param_hint="--workers")  # fmt: skip
    return int(text)


def _workers_config(scenario: Any, values: dict[str, Any]) -> Any:
    """The run's :class:`loadgen.workers.WorkersConfig`, refused before anything starts when
    the scenario cannot be split or Ray is asked for but not installed."""
    from loadgen.workers import WorkersConfig

    config = WorkersConfig(workers_option(values.get("workers")), values.get("ray"))
    if config.split and scenario.single_process_reason:
        raise click.UsageError(
            f"{scenario.name} runs in one process only (--workers 1, no --ray): "
            f"{scenario.single_process_reason}"
        )
    if config.ray is not None:
        import importlib.util

        if importlib.util.find_spec("ray") is None:
            raise click.UsageError("--ray needs Ray: pip install '.[ray]'")
    return config


def _run_command(scenario: Any, values: dict[str, Any]) -> None:
    params = params_from_options(scenario.Params, values)
    workers = _workers_config(scenario, values)
    _nominal_check(scenario, params)
    run_dir = values.get("out") or _new_run_dir(scenario.name)
    _check_out_dir(run_dir)
    status, report = _execute_run(scenario, params, run_dir, workers)
    if status != "ok" or report is None:
        sys.exit(1)  # a run whose report failed is not ok, whatever its records say
    if values.get("strict") and report and report.summary.verdict_summary.failed:
        sys.exit(3)


def _new_run_dir(name: str) -> Path:
    from loadgen.run import new_run_dir

    return new_run_dir(DEFAULT_RUNS_ROOT, name)


def _check_out_dir(run_dir: Path) -> None:
    if run_dir.exists() and not run_dir.is_dir():
        raise click.UsageError(f"--out {run_dir} is a file, not a directory")
    if run_dir.exists() and any(run_dir.iterdir()):
        raise click.UsageError(f"{run_dir} exists and is not empty; pick another --out")


def _execute_run(
    scenario: Any, params: Any, run_dir: Path, workers: Any = None
) -> tuple[str, Any | None]:
    """Run, build the report, write the manifest, print the summary: (status, report)."""
    from loadgen.progress import RichProgress
    from loadgen.redact import redact_command
    from loadgen.run import run_scenario

    command = redact_command(["loadgen", *sys.argv[1:]])
    progress = RichProgress()
    progress.console.print(f"run directory: [bold]{run_dir}[/bold]")
    status, error = "interrupted", "interrupted (Ctrl-C or SIGTERM)"
    try:
        result = _asyncio_run(
            _cancel_on_sigterm(
                run_scenario(scenario, params, run_dir, command, progress.hooks(), workers)
            )
        )
        status, error = result.status, result.error
    except (KeyboardInterrupt, asyncio.CancelledError):
        progress.console.print("[red]interrupted: writing what was recorded[/red]")
    finally:
        progress.close()
        report, report_error = _finalize(run_dir, status, command)
    if report is not None:
        _print_summary(report, progress.console)
    if error:
        progress.console.print(f"[red]run {status}: {error}[/red]")
    shown = status
    if report_error is not None:
        shown = f"{status}, report failed"
        progress.console.print(
            f"[red]report failed: {report_error}[/red]\n"
            "The records are intact; rebuild the report with "
            f"`loadgen report {run_dir}` once the cause is fixed."
        )
    progress.console.print(f"run directory: [bold]{run_dir}[/bold] (status {shown})")
    if status == "interrupted":
        sys.exit(1)
    return status, report


def _finalize(run_dir: Path, status: str, command: list[str]) -> tuple[Any | None, str | None]:
    """Build the report from the raw files, then write the manifest (always, and last):
    (the report or ``None``, why building it failed or ``None``). A run that never made a
    plan has no report and no report error (its status says why)."""
    from loadgen.manifest import write_manifest

    report, error = None, None
    if (run_dir / "plan.json").exists():
        try:
            from analysis.report import build_report

            report = build_report(run_dir)
        except Exception as exc:  # raw data stays; `loadgen report` can retry
            error = f"{type(exc).__name__}: {exc}"
    write_manifest(run_dir, status, command)
    return report, error


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
    _print_summary(result, console)
    for problem in result.file_problems:  # what was skipped: the report rests on the rest
        console.print(f"[yellow]skipped: {problem}[/yellow]")
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
    from analysis.validate import ValidationResult, validate_run

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


#: Exit code of ``loadgen compare``/``gate`` when they cannot compare (README "Exit codes"):
#: the usage-error code, never 1, which CI reads as a regression.
COMPARE_ERROR_EXIT = 2


def _fail_compare(why: str) -> NoReturn:
    """Say in one line why the comparison could not be made; exit ``COMPARE_ERROR_EXIT``."""
    click.echo(f"error: could not compare: {why}", err=True)
    sys.exit(COMPARE_ERROR_EXIT)


def _compare_exit_code(*args: Any, **kwargs: Any) -> int:
    """``_compare_and_report``'s exit code; an unexpected error (a bug, a file nobody
    foresaw) becomes one line and ``COMPARE_ERROR_EXIT``, never a traceback whose exit code 1
    CI would read as a regression."""
    try:
        return _compare_and_report(*args, **kwargs)
    except click.ClickException:
        raise  # usage errors: click prints them and exits 2
    except Exception as exc:
        _fail_compare(f"{type(exc).__name__}: {exc}")


def _compare_and_report(
    baseline: Path,
    candidate: Path,
    out: Path,
    gate_file: Path | None,
    strict: bool,
    allow_workload_mismatch: bool = False,
    pairs: dict[str, str] | None = None,
    allow_incomplete: bool = False,
) -> int:
    """Compare, write compare.md/.json/plots into ``out``, print the findings; the exit code."""
    from rich.table import Table

    from analysis.compare import CompareError, compare_paths, exit_code
    from analysis.compare_report import metric_rows, write_comparison
    from analysis.gate_file import GateFileError, load_gate
    from loadgen.progress import make_console

    try:
        gate = load_gate(gate_file)
        comparison = compare_paths(
            baseline, candidate, gate, allow_workload_mismatch=allow_workload_mismatch,
            pairs=pairs, allow_incomplete=allow_incomplete,
        )  # fmt: skip
    except (CompareError, GateFileError) as exc:
        raise click.UsageError(str(exc)) from None
    path = write_comparison(comparison, out, strict)
    code = exit_code(comparison, strict)
    console = make_console()
    loud = ("regression", "improvement", "missing")
    shown = [m for m in comparison.metrics if m.classification in loud]
    table = Table(title=f"{comparison.scenario}: regressions, improvements, missing metrics")
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
        console.print(f"{len(inconclusive)} metric(s) inconclusive: compare.md says why")
    for v in comparison.verdicts:
        if v.classification != "no change":
            console.print(
                f"verdict {v.case}: {v.check}: {v.baseline} → {v.candidate} ({v.classification})"
            )
    for note in comparison.notes + [f"not compared: {u}" for u in comparison.unpaired]:
        console.print(f"[yellow]{note}[/yellow]")
    counts = ", ".join(f"{k} {n}" for k, n in comparison.counts.items())
    console.print(
        f"baseline vLLM {', '.join(comparison.baseline.vllm_versions)} vs candidate vLLM "
        f"{', '.join(comparison.candidate.vllm_versions)}: {counts}"
    )
    console.print(f"{path} (exit code {code})")
    return code


@main.command()
@click.argument("baseline", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.argument("candidate", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option(
    "--gate",
    "gate_file",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    default=None,
    help="Gate file (TOML) overriding analysis/gate_defaults.toml.",
)
@click.option("--strict", is_flag=True, help="Exit 3 when a gated metric is inconclusive.")
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
def compare(
    baseline: Path,
    candidate: Path,
    gate_file: Path | None,
    strict: bool,
    out: Path | None,
    allow_workload_mismatch: bool,
    pairs: tuple[str, ...],
    allow_incomplete: bool,
) -> None:
    """Compare CANDIDATE against BASELINE (each a run directory, or a directory of runs that
    are pooled) and classify every metric: regression, improvement, no change, inconclusive.

    Exit code 0 when no gated metric or verdict regressed, 1 on a regression, 2 on usage
    errors (including runs whose workloads differ and runs that did not complete: status not
    ok, a case not ok, no manifest, an incomplete phase; --allow-incomplete compares them
    anyway) and when the runs cannot be compared at all (one line says why), 3 when a gated
    metric is missing from a run (or, with --strict, inconclusive).
    """
    out = out or _new_run_dir("compare")
    sys.exit(
        _compare_exit_code(baseline, candidate, out, gate_file, strict, allow_workload_mismatch,
                           _parse_pairs(pairs), allow_incomplete)
    )  # fmt: skip


#: Scenario knobs a gate sets per side itself.
_GATE_OWNED = ("vllm", "engine_python")


def gate_order(repeats: int, order: str) -> list[str]:
    """The sequence of sides: ``abab`` alternates (A B A B …); ``abba`` alternates in mirrored
    pairs (A B B A A B …), which also cancels a linear drift of the machine: with A B A B the
    candidate runs on average half a slot later than the baseline."""
    out: list[str] = []
    for i in range(repeats):
        pair = ["baseline", "candidate"]
        out += pair if order == "abab" or i % 2 == 0 else pair[::-1]
    return out


def _gate_command(scenario: Any, values: dict[str, Any]) -> None:
    from loadgen.progress import make_console

    repeats = int(values["repeats"])
    shared = {k: v for k, v in values.items() if k not in _GATE_OWNED}
    extra = values.get("candidate_vllm_args")
    sides = {
        "baseline": params_from_options(
            scenario.Params, {**shared, "vllm": values["baseline_vllm"]}
        ),
        "candidate": params_from_options(
            scenario.Params,
            {
                **shared,
                "vllm": values["candidate_vllm"],
                "vllm_args": " ".join(a for a in (values.get("vllm_args"), extra) if a) or None,
            },
        ),
    }
    for params in sides.values():
        _nominal_check(scenario, params)
    out = values.get("out") or _new_run_dir(f"gate-{scenario.name}")
    _check_out_dir(out)
    console = make_console()
    sequence = gate_order(repeats, values["order"])
    console.print(f"gate {out}: {' '.join('A' if s == 'baseline' else 'B' for s in sequence)}")
    seen = {"baseline": 0, "candidate": 0}
    for side in sequence:
        seen[side] += 1
        run_dir = out / side / f"run-{seen[side]}"
        status, report = _execute_run(scenario, sides[side], run_dir)
        if status != "ok":
            console.print(f"[red]{side} run {run_dir} ended {status}: the gate stops[/red]")
            sys.exit(4)
        if report is None:  # complete records, but the analysis cannot read them
            _fail_compare(f"the report of {side} run {run_dir} failed (said above)")
    sys.exit(
        _compare_exit_code(out / "baseline", out / "candidate", out, values.get("gate_file"),
                           bool(values.get("strict")))
    )  # fmt: skip


class _GateGroup(_ScenarioGroup):
    """``loadgen gate SCENARIO``: the scenario's options plus the gate's own."""

    def scenario_command(self, name: str, scenario: Any) -> click.Command:
        def callback(**values: Any) -> None:
            _gate_command(scenario, values)

        own: list[click.Parameter] = [
            click.Option(["--baseline-vllm"], required=True,
                         help="vLLM version of the baseline (the project's or `make engine`)."),
            click.Option(["--candidate-vllm"], required=True, help="vLLM of the candidate."),
            click.Option(["--repeats"], type=click.IntRange(min=1), default=2, show_default=True,
                         help="Runs per side, alternated."),
            click.Option(["--order"], type=click.Choice(["abba", "abab"]), default="abba",
                         show_default=True, help="abba: A B B A … (cancels linear drift); abab."),
            click.Option(["--candidate-vllm-args"], default=None,
                         help="Extra vLLM arguments for the candidate only."),
            click.Option(["--gate", "gate_file"], default=None,
                         type=click.Path(exists=True, dir_okay=False, path_type=Path),
                         help="Gate file (TOML) overriding analysis/gate_defaults.toml."),
            click.Option(["--strict"], is_flag=True,
                         help="Exit 3 when a gated metric is inconclusive."),
            click.Option(["--out", "out"], type=click.Path(path_type=Path), default=None,
                         help="Gate directory (default: runs/gate-<scenario>-<UTC time>)."),
        ]  # fmt: skip
        options = [o for o in options_for(scenario.Params) if o.name not in _GATE_OWNED]
        return click.Command(name, callback=callback, params=[*options, *own],
                             help=f"Regression gate on {name}: {scenario.summary}")  # fmt: skip


@main.group(cls=_GateGroup)
def gate() -> None:
    """Run a scenario alternately on a baseline and a candidate vLLM, then compare the pooled
    runs (compare.md). Exit codes as `loadgen compare`, and 4 when a run did not complete."""


from loadgen.server_cli import server  # noqa: E402

main.add_command(server)

from loadgen.export_cli import export  # noqa: E402

main.add_command(export)

from gateway.cli import gateway_command  # noqa: E402

main.add_command(gateway_command, "gateway")

if __name__ == "__main__":
    main()
