"""One gate pair run phase by phase: the baseline's and the candidate's runs of pair N go in
one event loop, one side working at a time, turns handed over at every phase end in
phase-level ABBA order (``loadgen.turns``), then each run's report and manifest as
``loadgen run`` writes them (``loadgen.cli.run_and_report``).

Each side keeps its own servers (``loadgen.kept_servers``), so each side's prefix cache sees
exactly its scenario's sequence of phases (cold → warm → pollution → revisit …): the other
side's phases run between them on the other server. The two runs share one console, each line
marked with its side (``A``: baseline, ``B``: candidate).
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click
from rich.markup import escape

from loadgen.cli.run_and_report import finalize, print_summary
from loadgen.turns import Baton, Turn

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from rich.console import Console

    from analysis.report import Report
    from loadgen.kept_servers import KeptServers
    from loadgen.run import RunResult
    from scenarios.base import Scenario
    from scenarios.plan import Plan

#: How each side's lines are marked on the shared console.
SIDE_LABELS = {"baseline": "A ", "candidate": "B "}


def interleaved_info(side: str, first: str, pair: int, other_run: str) -> dict[str, Any]:
    """``run.json``'s ``interleaved`` for ``side``'s run of pair ``pair`` (``RunInfo``)."""
    return {"blocks": "phase", "pair": pair, "first": first, "with": other_run}


def run_pair_and_report(
    scenario: Scenario,
    params: Mapping[str, Any],
    run_dirs: Mapping[str, Path],
    first: str,
    console: Console,
    failed_exit: int,
    kept: Mapping[str, KeptServers],
    transforms: Mapping[str, Callable[[Plan], Plan]],
) -> tuple[dict[str, tuple[str, Report | None]], list[Turn]]:
    """Run both sides of one gate pair phase by phase (module docstring), then build each
    run's report and write its manifest: per side (status, report), and the turns taken.

    Args:
        params: each side's validated scenario parameters; run_dirs: each side's run
            directory (``SIDE/run-N``); first: the side whose turn comes first.
        failed_exit: the exit code when the pair is interrupted or a file cannot be written.
        kept, transforms: per side, its kept servers and a change to its plan (may be empty).

    Exits with ``failed_exit`` when interrupted (Ctrl-C or SIGTERM: both runs' records, reports
    and manifests are written first) or when a file of either run could not be written.
    """
    from loadgen.progress import RichProgress
    from loadgen.redact import redact_command
    from loadgen.run import cancel_on_sigterm, group_signals_restored, run_scenario
    from loadgen.runformat import RunWriteError
    from server.net.loop import run_event_loop

    sides = (first, next(s for s in params if s != first))
    pair = int(run_dirs[first].name.rsplit("-", 1)[-1])
    command = redact_command(["loadgen", *sys.argv[1:]])
    baton = Baton(*sides)
    progress = {s: RichProgress(console, SIDE_LABELS.get(s, f"{s} ")) for s in sides}
    ended: dict[str, tuple[str, str | None, RunWriteError | None]] = {
        s: ("interrupted", "interrupted (Ctrl-C or SIGTERM)", None) for s in sides
    }

    def side_run(side: str) -> Callable[[], Any]:
        hooks = progress[side].hooks()

        async def between(case: str, phase: str) -> None:
            await baton.hand_over(side, f"{case}/{phase}")

        hooks.between_phases = between
        other = next(s for s in sides if s != side)
        info = interleaved_info(side, first, pair, f"{other}/{run_dirs[other].name}")
        return lambda: run_scenario(scenario, params[side], run_dirs[side], command, hooks,
                                    None, kept.get(side), transforms.get(side), info)  # fmt: skip

    async def both() -> list[RunResult | BaseException]:
        return await asyncio.gather(*(baton.run(s, side_run(s)) for s in sides),
                                    return_exceptions=True)  # fmt: skip

    console.print(f"pair {pair}: phase by phase, {'A' if first == 'baseline' else 'B'} first")
    with group_signals_restored():
        try:
            for side, result in zip(sides, run_event_loop(cancel_on_sigterm(both())), strict=True):
                if isinstance(result, RunWriteError):  # before its run began: run.json failed
                    ended[side] = ("failed", str(result), result)
                elif isinstance(result, BaseException):
                    raise result
                else:
                    ended[side] = (result.status, result.error, result.write_error)
        except (KeyboardInterrupt, asyncio.CancelledError):
            console.print("[red]interrupted: writing what was recorded[/red]")
        finally:
            for p in progress.values():
                p.close()
            finals = {s: finalize(run_dirs[s], ended[s][0], command) for s in sides}
    return _outcomes(sides, run_dirs, ended, finals, console, failed_exit), baton.turns


def _outcomes(
    sides: tuple[str, str],
    run_dirs: Mapping[str, Path],
    ended: Mapping[str, tuple[str, str | None, Any]],
    finals: Mapping[str, tuple[Report | None, str | None, Any]],
    console: Console,
    failed_exit: int,
) -> dict[str, tuple[str, Report | None]]:
    """Each side's summary and (status, report) once both runs ended; exits as
    :func:`run_pair_and_report` says."""
    out: dict[str, tuple[str, Report | None]] = {}
    for side in sides:
        status, error, write_error = ended[side]
        report, report_error, manifest_error = finals[side]
        write_error = write_error or manifest_error
        if write_error is not None:
            click.echo(f"error: {write_error}", err=True)
            sys.exit(failed_exit)
        if report is not None:
            print_summary(report, console)
        if error:
            console.print(f"[red]{side} run {status}: {escape(str(error))}[/red]")
        if report_error is not None:
            console.print(f"[red]{side} report failed: {escape(report_error)}[/red]")
        shown = escape(str(run_dirs[side]))
        console.print(f"run directory: [bold]{shown}[/bold] (status {status})")
        out[side] = (status, report)
    if any(status == "interrupted" for status, _ in out.values()):
        sys.exit(failed_exit)
    return out
