"""``loadgen run SCENARIO``: one subcommand per scenario, its options from the scenario's Params
model (``server.cli_options``) plus the run's own (``--out``, ``--strict``, ``--workers``,
``--ray``); bad input is refused (exit 2) before any server starts or any load is sent."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from loadgen.cli.run_and_report import check_out_dir, new_run_dir, run_and_report
from loadgen.cli.scenario_commands import ScenarioGroup, nominal_check
from server.cli_options import ModelOptions
from server.net.exit_codes import RunExit

if TYPE_CHECKING:
    from loadgen.workers.process import WorkersConfig
    from scenarios.base import Scenario


class _RunGroup(ScenarioGroup):
    """``loadgen run SCENARIO``: one subcommand per scenario, options from its Params model."""

    def scenario_command(self, name: str, scenario: Scenario) -> click.Command:
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
            click.Option(["--allow-long-schedule"], is_flag=True,
                         help="Run a plan whose own schedule (arrivals and waits) is longer "
                         "than 24 h (never above 365 days)."),
            click.Option(["--workers"], default=None, metavar="N|auto",
                         help="Load-generator worker processes, each with its own event loop "
                         "and share of every phase (default 1: this process; auto: the cores "
                         "available to it). With --ray: actors (default one per node)."),
        ]  # fmt: skip
        return click.Command(
            name,
            callback=callback,
            params=[*ModelOptions(scenario.Params).options(), *common],
            help=scenario.summary,
        )


@click.group(cls=_RunGroup)
def run() -> None:
    """Run a scenario: start the server(s), send the load, scrape metrics, write the report."""


#: Most load-generator workers: each is a process (or a Ray actor) with its own interpreter
#: and event loop; 256 is beyond the cores of any one host here and a quarter of the 1,024
#: requests a run may hold in flight at once, so more would mostly sit idle.
MAX_WORKERS = 256


def workers_option(text: str | None) -> int | None:
    """``--workers``: a count from 1 to :data:`MAX_WORKERS`, ``auto`` (the cores this process
    may run on, ``os.sched_getaffinity``), or ``None`` when not given.

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
    if int(text) > MAX_WORKERS:
        raise click.BadParameter(f"{text} workers: at most {MAX_WORKERS}",
                                 param_hint="--workers")  # fmt: skip
    return int(text)


def _workers_config(scenario: Scenario, values: dict[str, Any]) -> WorkersConfig:
    """The run's :class:`loadgen.workers.process.WorkersConfig`, refused before anything
    starts when the scenario cannot be split or Ray is asked for but not installed."""
    from loadgen.workers.process import WorkersConfig

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


def _run_command(scenario: Scenario, values: dict[str, Any]) -> None:
    params = ModelOptions(scenario.Params).build(values)
    workers = _workers_config(scenario, values)
    nominal_check(scenario, params, bool(values.get("allow_long_schedule")))
    run_dir = values.get("out") or new_run_dir(scenario.name)
    check_out_dir(run_dir)
    status, report = run_and_report(scenario, params, run_dir, workers)
    if status != "ok" or report is None:
        sys.exit(RunExit.FAILED)  # a run whose report failed is not ok, whatever its records say
    if values.get("strict") and report and report.summary.verdict_summary.failed:
        sys.exit(RunExit.CHECK_FAILED)
