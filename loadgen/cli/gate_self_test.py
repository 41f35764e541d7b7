"""``loadgen gate SCENARIO --self-test F``: the gate's power measured on the machine it runs on.

Two sequential gates of the baseline's vLLM against itself, each as ``--until-decided`` (at
most ``--max-repeats`` pairs, default 10, and ``--max-minutes``, default 20 per gate), each in
its own subdirectory of the gate directory, every case behind the project's gateway
(``loadgen.planted``): ``aa/`` (no slowdown on either side; must end NO REGRESSION), then
``planted/`` (the candidate's gateway slows every answer's first token by F; must end
REGRESSION naming TTFT). Both gates share each side's kept servers (``loadgen.kept_servers``:
started once, their prefix caches reset before every case), so the planted gate pays no server
start. ``self_test.json``, ``self_test.md`` and ``self_test.html`` hold the answer
(``analysis.gate_self_test``); the exit code is 0 when both were decided as expected, else
``GateExit.SELF_TEST_WRONG``; a run that fails stops it with ``GateExit.RUN_NOT_OK`` as in any
gate.
"""

from __future__ import annotations

from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click
from rich.markup import escape

from loadgen.cli.compare import fail_compare
from loadgen.cli.gate import GateParams, gate_sides, kept_sides, parse_slowdown, run_gate
from loadgen.cli.run_and_report import check_out_dir, new_run_dir
from loadgen.cli.scenario_commands import nominal_capacity
from server.net.exit_codes import GateExit

if TYPE_CHECKING:
    from pydantic import BaseModel

    from analysis.gate_self_test import GateName
    from scenarios.base import Scenario


def _check_plan(scenario: Scenario, params: BaseModel, slowdown: float) -> None:
    """Refuse, before any run, a scenario whose cases cannot be put behind the gateway.

    Raises:
        click.UsageError: a case has a third-party proxy, replicas without a relay, or a
            gateway with its own slowdown (``loadgen.planted``).
    """
    from loadgen.planted import SelfTestPlanError, behind_gateway

    try:
        plan = scenario.plan(params, nominal_capacity(scenario.sizing_case(params)))
    except ValueError:
        return  # an attached server's nominal plan: the run checks its real one
    try:
        behind_gateway(plan, slowdown)
    except SelfTestPlanError as exc:
        raise click.UsageError(f"--self-test: {exc}") from None


def self_test(scenario: Scenario, gate: GateParams, values: dict[str, Any]) -> int:
    """Run the self-test (module docstring); its exit code.

    Raises:
        click.UsageError: bad flags or a scenario the self-test cannot gate (nothing started).
        SystemExit: a run that did not end ok (``GateExit.RUN_NOT_OK``) or a comparison that
            could not be made (``CompareExit.CANNOT_COMPARE``), as in any gate.
    """
    from analysis.gate_self_test import gate_slowdowns, headline, summarize, write_self_test
    from loadgen.planted import behind_gateway, side_transforms
    from loadgen.progress import make_console

    assert gate.self_test is not None
    slowdown = parse_slowdown(gate.self_test)
    sides = gate_sides(scenario, gate, values, gate.baseline_vllm)
    _check_plan(scenario, sides["baseline"], slowdown)
    out = gate.out or new_run_dir(f"gate-self-test-{scenario.name}")
    check_out_dir(out)
    console = make_console()
    bound = gate.time_bound_min
    console.print(
        f"self-test {escape(str(out))}: vLLM {gate.baseline_vllm} against itself, A/A then a "
        f"planted {slowdown:.0%} slowdown; each gate ≤ {gate.most_pairs} pairs"
        + (f" and ≤ {bound:g} min" if bound is not None else "")
    )
    with kept_sides(out, gate) as kept:
        for name, planted in gate_slowdowns(slowdown):
            transforms = {
                side: partial(behind_gateway, slowdown=f)
                for side, f in side_transforms(planted).items()
            }
            console.print(f"[bold]self-test gate {name}[/bold] (candidate slowdown {planted:.0%})")
            try:
                run_gate(scenario, gate, sides, out / name, kept, console, transforms)
            except SystemExit as exc:  # interrupted, a run not ok, no comparison
                _write_stopped(out, scenario.name, gate, slowdown, name, exc)
                raise
    try:
        result = summarize(out, scenario.name, gate.baseline_vllm, slowdown, gate.most_pairs,
                           bound, int(GateExit.SELF_TEST_WRONG))  # fmt: skip
    except ValueError as exc:  # a gate left no look: one line, never a traceback
        fail_compare(str(exc))
    path = write_self_test(result, out)
    for g in result.gates:
        minutes = "?" if g.minutes is None else f"{g.minutes:.1f}"
        mark = "[green]correct[/green]" if g.correct else "[red]WRONG[/red]"
        console.print(
            f"{g.name}: expected {g.expected}, decided {g.headline} ({mark}) in {g.pairs} "
            f"pairs, {minutes} min; {escape(g.stop)}"
        )
    style = "green" if result.correct else "red"
    console.print(f"[bold {style}]{escape(headline(result))}[/bold {style}]")
    console.print(f"{escape(str(path))} (exit code {result.exit_code})")
    return result.exit_code


def _write_stopped(
    out: Path, scenario: str, gate: GateParams, slowdown: float, name: GateName,
    exc: SystemExit,
) -> None:  # fmt: skip
    """Leave ``self_test.json``/``.md``/``.html`` saying the self-test stopped in gate ``name``
    (``exc``: its exit), so the directory never looks like a self-test still to be read."""
    from analysis.gate_self_test import headline, stopped_early, write_self_test
    from loadgen.runformat import RunWriteError

    code = exc.code if isinstance(exc.code, int) else 1
    known = {int(c): c.meaning for c in GateExit}
    why = f"stopped with exit code {code}" + (f" ({known[code]})" if code in known else "")
    result = stopped_early(out, scenario, gate.baseline_vllm, slowdown, gate.most_pairs,
                           gate.time_bound_min, name, why, code)  # fmt: skip
    try:
        write_self_test(result, out)
    except RunWriteError as error:  # the exit already under way says what went wrong
        click.echo(f"error: {error}", err=True)
        return
    click.echo(headline(result), err=True)
