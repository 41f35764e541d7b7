"""``loadgen gate SCENARIO``: run a scenario alternately on a baseline and a candidate vLLM
(``loadgen.run.gate_order``), then compare the pooled runs as ``loadgen compare`` does."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import click
from pydantic import Field, FilePath, model_validator
from rich.markup import escape

from loadgen.cli.compare import compare_exit_code, fail_compare
from loadgen.cli.run_and_report import check_out_dir, new_run_dir, run_and_report
from loadgen.cli.scenario_commands import ScenarioGroup, nominal_check
from loadgen.runformat.layout import GATE_SIDES, LOOKS_FILE, gate_run_dir
from server.cli_options import ModelOptions
from server.frozen import FrozenModel
from server.net.exit_codes import GateExit, code_lines

if TYPE_CHECKING:
    from collections.abc import Callable

    from rich.console import Console

    from loadgen.kept_servers import KeptServers
    from scenarios.base import Scenario

#: Scenario knobs a gate sets per side itself.
_GATE_OWNED = ("vllm", "engine_python")
#: Most runs a side: every run starts its own server and sends the whole scenario, so at the
#: shortest scenario's few minutes a run 100 runs a side already take hours.
MAX_GATE_REPEATS = 100


class GateParams(FrozenModel):
    """The gate's own options (each a ``--flag``, beside the scenario's)."""

    baseline_vllm: str = Field(
        min_length=1, description="vLLM version of the baseline (the project's or `make engine`)."
    )
    candidate_vllm: str = Field(min_length=1, description="vLLM of the candidate.")
    repeats: int = Field(
        default=2,
        ge=1,
        le=MAX_GATE_REPEATS,
        description="Runs per side, alternated (with --until-decided: before the first look).",
    )
    until_decided: bool = Field(
        default=False,
        description="Add alternated pairs until every key metric is decided or --max-repeats "
        "per side; each look in looks.jsonl, its intervals at the confidence split over the "
        "planned looks (Bonferroni).",
    )
    max_repeats: int | None = Field(
        default=None,
        ge=1,
        le=MAX_GATE_REPEATS,
        description="With --until-decided: most runs per side.",
    )
    order: Literal["abba", "abab"] = Field(
        default="abba", description="abba: A B B A … (cancels linear drift); abab."
    )
    candidate_vllm_args: str | None = Field(
        default=None, description="Extra vLLM arguments for the candidate only."
    )
    gate: FilePath | None = Field(
        default=None, description="Gate file (TOML) overriding analysis/gate_defaults.toml."
    )
    strict: bool = Field(
        default=False, description="Every gated metric is key, not only the gate file's."
    )
    restart_servers: bool = Field(
        default=False,
        description="Start a fresh server for every run, rather than keeping each side's "
        "servers up for the whole gate (their prefix caches reset before each case).",
    )
    unpaired: bool = Field(
        default=False,
        description="Decide on the per-phase [key_metrics] of the pooled sides, not on the "
        "paired key metrics of the block pairs (docs/gate-paired.md).",
    )
    out: Path | None = Field(
        default=None, description="Gate directory (default: runs/gate-<scenario>-<UTC time>)."
    )
    allow_long_schedule: bool = Field(
        default=False,
        description="Run a plan whose own schedule (arrivals and waits) is longer than 24 h "
        "(never above 365 days).",
    )

    @model_validator(mode="after")
    def _looks(self) -> GateParams:
        if self.max_repeats is not None and not self.until_decided:
            raise ValueError("--max-repeats needs --until-decided")
        if self.until_decided and (self.max_repeats or 0) < self.repeats:
            raise ValueError(f"--until-decided needs --max-repeats ≥ --repeats ({self.repeats})")
        if self.until_decided and self.repeats < 2:
            raise ValueError("--until-decided needs --repeats ≥ 2: with one run per side no "
                             "run-to-run shift can show (docs/gate-decisions.md)")  # fmt: skip
        return self


_GATE_OPTIONS = ModelOptions(GateParams)


def _look_level(gate: GateParams) -> None:
    """Refuse, before any run, a sequential gate whose per-look confidence cannot be used
    (it rounds to 1 with many looks and a confidence near 1), or whose gate file is bad."""
    from analysis.gate_file import GateFileError, load_gate
    from analysis.gate_sequential import look_confidence, planned_looks

    try:
        confidence = load_gate(gate.gate).confidence
    except GateFileError as exc:
        raise click.UsageError(f"--gate: {exc}") from None
    if not gate.until_decided or gate.max_repeats is None:
        return
    looks = planned_looks(gate.repeats, gate.max_repeats)
    if not look_confidence(confidence, looks) < 1:
        raise click.UsageError(
            f"the gate file's confidence {confidence} split over {looks} looks rounds to 1 for "
            "each look: lower --max-repeats or the confidence"
        )


def _gate_command(scenario: Scenario, values: dict[str, Any]) -> None:
    from loadgen.progress import make_console
    from loadgen.run import gate_order

    gate = _GATE_OPTIONS.build(values)
    _look_level(gate)
    options = ModelOptions(scenario.Params, skip=_GATE_OWNED)
    extra = gate.candidate_vllm_args
    candidate_args = " ".join(a for a in (values.get("vllm_args"), extra) if a) or None
    sides = {
        "baseline": options.build(values, base={"vllm": gate.baseline_vllm}),
        "candidate": options.build(
            {**values, "vllm_args": candidate_args}, base={"vllm": gate.candidate_vllm}
        ),
    }
    for params in sides.values():
        nominal_check(scenario, params, gate.allow_long_schedule)
    out = gate.out or new_run_dir(f"gate-{scenario.name}")
    check_out_dir(out)
    console = make_console()
    sequence = gate_order(gate.repeats, gate.order)
    console.print(f"gate {out}: {' '.join('A' if s == 'baseline' else 'B' for s in sequence)}")
    from loadgen.kept_servers import KeptServers, ServerMemory

    seen = {"baseline": 0, "candidate": 0}
    memory = ServerMemory()  # one for both sides: either side's idle servers make room
    kept = (
        {} if gate.restart_servers else {s: KeptServers(out / "servers" / s, memory) for s in seen}
    )
    try:
        _run_gate(scenario, gate, sides, out, seen, kept, console)
    finally:
        for servers in kept.values():
            servers.stop_all()


def _run_gate(
    scenario: Scenario, gate: GateParams, sides: dict[str, Any], out: Path,
    seen: dict[str, int], kept: dict[str, KeptServers], console: Console,
) -> None:  # fmt: skip
    """The gate's runs in order, then its comparison (or looks); exits with the gate's code."""
    from loadgen.run import gate_order

    repeats, max_repeats = gate.repeats, gate.max_repeats
    started_s = time.monotonic()

    def run_side(side: str) -> None:
        seen[side] += 1
        run_dir = gate_run_dir(out, side, seen[side])
        # A run that did not end ok stops the gate with its own code, never 1 (a regression).
        status, report = run_and_report(scenario, sides[side], run_dir, None,
                                        GateExit.RUN_NOT_OK, kept.get(side))  # fmt: skip
        if status != "ok":
            shown = escape(str(run_dir))
            console.print(f"[red]{side} run {shown} ended {status}: the gate stops[/red]")
            sys.exit(GateExit.RUN_NOT_OK)
        if report is None:  # complete records, but the analysis cannot read them
            fail_compare(f"the report of {side} run {run_dir} failed (said above)")

    for side in gate_order(repeats, gate.order):
        run_side(side)

    def compare(confidence: float | None = None) -> int:
        return compare_exit_code(out / GATE_SIDES[0], out / GATE_SIDES[1], out, gate.gate,
                                 gate.strict, confidence=confidence,
                                 paired=not gate.unpaired)  # fmt: skip

    if not gate.until_decided:
        sys.exit(compare())
    most = int(max_repeats or repeats)
    sys.exit(_until_decided(out, repeats, most, gate, run_side, compare, console, started_s))


def _until_decided(
    out: Path, repeats: int, max_repeats: int, gate: GateParams,
    run_side: Callable[[str], None], compare: Callable[[float], int], console: Console,
    started_s: float | None = None,
) -> int:  # fmt: skip
    """Add pairs in the gate's order until decided (``analysis.gate_sequential``)."""
    from analysis.gate_file import load_gate
    from analysis.gate_sequential import decision_of, run_until_decided
    from loadgen.run import gate_order

    def add_pair(k: int) -> None:
        for side in gate_order(k, gate.order)[-2:]:
            run_side(side)

    def look(confidence: float) -> Any:
        compare(confidence)
        return decision_of(out)

    def show(entry: Any) -> None:
        minutes = "" if entry.elapsed_s is None else f", {entry.elapsed_s / 60:.1f} min"
        seen = [f"{k} {v:.1%}" for k, v in entry.mde.items() if "_ms" in k]
        console.print(
            f"look {entry.look}/{entry.looks} at {entry.pairs} pairs "
            f"({entry.confidence:.2%} per look{minutes}): {entry.headline}; {entry.why}"
            + (f"; MDE {', '.join(seen)}" if seen else "")
        )

    decision = run_until_decided(
        repeats, max_repeats, load_gate(gate.gate).confidence, add_pair, look,
        out / LOOKS_FILE, show, started_s,
    )  # fmt: skip
    return int(decision.exit_code)


class _GateGroup(ScenarioGroup):
    """``loadgen gate SCENARIO``: the scenario's options plus the gate's own."""

    def scenario_command(self, name: str, scenario: Scenario) -> click.Command:
        def callback(**values: Any) -> None:
            _gate_command(scenario, values)

        options = ModelOptions(scenario.Params, skip=_GATE_OWNED).options()
        own = _GATE_OPTIONS.options()
        return click.Command(name, callback=callback, params=[*options, *own],
                             help=f"Regression gate on {name}: {scenario.summary}")  # fmt: skip


_HELP = f"""Run a scenario alternately on a baseline and a candidate vLLM, then compare the
pooled runs (compare.md); with --until-decided, pair by pair until decided.

\b
Exit codes:
{code_lines(GateExit)}
"""


@click.group(cls=_GateGroup, help=_HELP)
def gate() -> None:
    """Gate (the help text, with the exit codes: ``_HELP``)."""
