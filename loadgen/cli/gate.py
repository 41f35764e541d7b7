"""``loadgen gate SCENARIO``: run a scenario alternately on a baseline and a candidate vLLM
(``loadgen.run.gate_order``), then compare the pooled runs as ``loadgen compare`` does."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click
from rich.markup import escape

from loadgen.cli.compare import compare_exit_code, fail_compare
from loadgen.cli.run_and_report import check_out_dir, new_run_dir, run_and_report
from loadgen.cli.scenario_commands import ScenarioGroup, nominal_check
from loadgen.runformat.layout import GATE_SIDES, LOOKS_FILE, gate_run_dir
from server.cli_options import ModelOptions

if TYPE_CHECKING:
    from collections.abc import Callable

    from rich.console import Console

    from scenarios.base import Scenario

#: Scenario knobs a gate sets per side itself.
_GATE_OWNED = ("vllm", "engine_python")


def _gate_command(scenario: Scenario, values: dict[str, Any]) -> None:
    from loadgen.progress import make_console
    from loadgen.run import gate_order

    repeats = int(values["repeats"])
    max_repeats = values.get("max_repeats")
    if max_repeats is not None and not values.get("until_decided"):
        raise click.UsageError("--max-repeats needs --until-decided")
    if values.get("until_decided") and (max_repeats or 0) < repeats:
        raise click.UsageError(f"--until-decided needs --max-repeats ≥ --repeats ({repeats})")
    if values.get("until_decided") and repeats < 2:
        raise click.UsageError("--until-decided needs --repeats ≥ 2: with one run per side no "
                               "run-to-run shift can show (docs/gate-decisions.md)")  # fmt: skip
    options = ModelOptions(scenario.Params, skip=_GATE_OWNED)
    extra = values.get("candidate_vllm_args")
    candidate_args = " ".join(a for a in (values.get("vllm_args"), extra) if a) or None
    sides = {
        "baseline": options.build(values, base={"vllm": values["baseline_vllm"]}),
        "candidate": options.build(
            {**values, "vllm_args": candidate_args}, base={"vllm": values["candidate_vllm"]}
        ),
    }
    for params in sides.values():
        nominal_check(scenario, params)
    out = values.get("out") or new_run_dir(f"gate-{scenario.name}")
    check_out_dir(out)
    console = make_console()
    sequence = gate_order(repeats, values["order"])
    console.print(f"gate {out}: {' '.join('A' if s == 'baseline' else 'B' for s in sequence)}")
    seen = {"baseline": 0, "candidate": 0}

    def run_side(side: str) -> None:
        seen[side] += 1
        run_dir = gate_run_dir(out, side, seen[side])
        status, report = run_and_report(scenario, sides[side], run_dir)
        if status != "ok":
            shown = escape(str(run_dir))
            console.print(f"[red]{side} run {shown} ended {status}: the gate stops[/red]")
            sys.exit(4)
        if report is None:  # complete records, but the analysis cannot read them
            fail_compare(f"the report of {side} run {run_dir} failed (said above)")

    for side in sequence:
        run_side(side)

    def compare(confidence: float | None = None) -> int:
        return compare_exit_code(out / GATE_SIDES[0], out / GATE_SIDES[1], out,
                                 values.get("gate_file"), bool(values.get("strict")),
                                 confidence=confidence)  # fmt: skip

    if not values.get("until_decided"):
        sys.exit(compare())
    most = int(max_repeats or repeats)
    sys.exit(_until_decided(out, repeats, most, values, run_side, compare, console))


def _until_decided(
    out: Path, repeats: int, max_repeats: int, values: dict[str, Any],
    run_side: Callable[[str], None], compare: Callable[[float], int], console: Console,
) -> int:  # fmt: skip
    """Add pairs in the gate's order until decided (``analysis.gate_sequential``)."""
    from analysis.gate_file import load_gate
    from analysis.gate_sequential import decision_of, run_until_decided
    from loadgen.run import gate_order

    def add_pair(k: int) -> None:
        for side in gate_order(k, values["order"])[-2:]:
            run_side(side)

    def look(confidence: float) -> Any:
        compare(confidence)
        return decision_of(out)

    def show(entry: Any) -> None:
        console.print(
            f"look {entry.look}/{entry.looks} at {entry.pairs} pairs "
            f"({entry.confidence:.2%} per look): {entry.headline}; {entry.why}"
        )

    decision = run_until_decided(
        repeats, max_repeats, load_gate(values.get("gate_file")).confidence, add_pair, look,
        out / LOOKS_FILE, show,
    )  # fmt: skip
    return int(decision.exit_code)


class _GateGroup(ScenarioGroup):
    """``loadgen gate SCENARIO``: the scenario's options plus the gate's own."""

    def scenario_command(self, name: str, scenario: Scenario) -> click.Command:
        def callback(**values: Any) -> None:
            _gate_command(scenario, values)

        own: list[click.Parameter] = [
            click.Option(["--baseline-vllm"], required=True,
                         help="vLLM version of the baseline (the project's or `make engine`)."),
            click.Option(["--candidate-vllm"], required=True, help="vLLM of the candidate."),
            click.Option(["--repeats"], type=click.IntRange(min=1), default=2, show_default=True,
                         help="Runs per side, alternated (with --until-decided: before the "
                         "first look)."),
            click.Option(["--until-decided"], is_flag=True,
                         help="Add alternated pairs until every key metric is decided or "
                         "--max-repeats per side; each look in looks.jsonl, its intervals at "
                         "the confidence split over the planned looks (Bonferroni)."),
            click.Option(["--max-repeats"], type=click.IntRange(min=1), default=None,
                         help="With --until-decided: most runs per side."),
            click.Option(["--order"], type=click.Choice(["abba", "abab"]), default="abba",
                         show_default=True, help="abba: A B B A … (cancels linear drift); abab."),
            click.Option(["--candidate-vllm-args"], default=None,
                         help="Extra vLLM arguments for the candidate only."),
            click.Option(["--gate", "gate_file"], default=None,
                         type=click.Path(exists=True, dir_okay=False, path_type=Path),
                         help="Gate file (TOML) overriding analysis/gate_defaults.toml."),
            click.Option(["--strict"], is_flag=True,
                         help="Every gated metric is key, not only the gate file's."),
            click.Option(["--out", "out"], type=click.Path(path_type=Path), default=None,
                         help="Gate directory (default: runs/gate-<scenario>-<UTC time>)."),
        ]  # fmt: skip
        options = ModelOptions(scenario.Params, skip=_GATE_OWNED).options()
        return click.Command(name, callback=callback, params=[*options, *own],
                             help=f"Regression gate on {name}: {scenario.summary}")  # fmt: skip


@click.group(cls=_GateGroup)
def gate() -> None:
    """Run a scenario alternately on a baseline and a candidate vLLM, then compare the pooled
    runs (compare.md); with --until-decided, pair by pair until decided. Exit codes as
    `loadgen compare` (0 no regression, 1 regression, 3 inconclusive), and 4 when a run did
    not complete."""
