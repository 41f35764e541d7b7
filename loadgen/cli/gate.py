"""``loadgen gate SCENARIO``: run a scenario alternately on a baseline and a candidate vLLM
(``loadgen.run.gate_order``), then compare the pooled runs as ``loadgen compare`` does; with
``--self-test F``, two gates of the baseline's vLLM against itself, one with a planted slowdown
(``loadgen.cli.gate_self_test``)."""

from __future__ import annotations

import contextlib
import json
import sys
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import click
from pydantic import Field, FilePath, field_validator, model_validator
from rich.markup import escape

from loadgen.cli.compare import compare_exit_code, fail_compare
from loadgen.cli.run_and_report import check_out_dir, new_run_dir, run_and_report
from loadgen.cli.scenario_commands import ScenarioGroup, nominal_check
from loadgen.runformat.layout import GATE_SIDES, LOOKS_FILE, PAIRS_FILE, gate_run_dir
from server.cli_options import ModelOptions
from server.engines import check_version
from server.frozen import FrozenModel
from server.net.exit_codes import GateExit, code_lines

if TYPE_CHECKING:
    from collections.abc import Callable

    from rich.console import Console

    from loadgen.kept_servers import KeptServers
    from scenarios.base import Scenario
    from scenarios.plan import Plan

    PlanTransform = Callable[[Plan], Plan]

#: Scenario knobs a gate sets per side itself.
_GATE_OWNED = ("vllm", "engine_python")
#: Most runs a side: every run starts its own server and sends the whole scenario, so at the
#: shortest scenario's few minutes a run 100 runs a side already take hours.
MAX_GATE_REPEATS = 100
#: Most pairs of a sequential gate without --max-repeats: at the synthetic machine's noisier
#: spread (σ_req 0.45) the paired TTFT MDE falls to 5.7 % at 8 pairs (docs/gate-paired.md), under
#: the 7 % tolerance on the medians, so an A/A gate can end "no regression" by 8; 10 leaves two
#: pairs of margin, and 9 looks at 1 − 0.05/9 each cost only z 2.77 against 2.58 at 5 looks.
DEFAULT_MAX_REPEATS = 10
#: A sequential gate's (and each self-test gate's) time bound without --max-minutes (minutes): a
#: CI job's budget for one decision. The looks planned are those that fit it
#: (``analysis.gate_sequential.looks_in_time``), so a short bound gives few looks, each at a
#: higher confidence, instead of splitting α over 2..10 pairs it has no time to run.
DEFAULT_MAX_MINUTES = 20.0
#: A self-test's planted slowdown must be in [MIN, MAX). Below 1 % no gate on these machines
#: could see it (the paired TTFT MDE is several percent, docs/gate-paired.md), so the planted
#: gate could never end in a regression and the self-test would measure nothing; a slowdown
#: that rounds to 0 % would also print as one. Beyond 200 % any gate sees it.
MIN_SELF_TEST_SLOWDOWN = 0.01
MAX_SELF_TEST_SLOWDOWN = 2.0


def parse_slowdown(text: str) -> float:
    """``--self-test``'s slowdown as a fraction: ``15%`` or ``0.15`` → 0.15.

    Raises:
        ValueError: not a number, or not in [:data:`MIN_SELF_TEST_SLOWDOWN`,
            :data:`MAX_SELF_TEST_SLOWDOWN`) (one line).
    """
    raw = text.strip()
    try:
        value = float(raw[:-1]) / 100 if raw.endswith("%") else float(raw)
    except ValueError:
        raise ValueError(
            f"--self-test {text!r}: give a percent (15%) or a fraction (0.15)"
        ) from None
    if not MIN_SELF_TEST_SLOWDOWN <= value < MAX_SELF_TEST_SLOWDOWN:  # NaN fails too
        raise ValueError(
            f"--self-test {text!r} is a slowdown of {value * 100:g}%: it must be at least "
            f"{MIN_SELF_TEST_SLOWDOWN:.0%} (a smaller one is below the minimum detectable "
            f"effect on these machines) and below {MAX_SELF_TEST_SLOWDOWN:.0%} (15% or 0.15 is "
            "a 15 % slowdown)"
        )
    return value


class GateParams(FrozenModel):
    """The gate's own options (each a ``--flag``, beside the scenario's)."""

    baseline_vllm: str = Field(
        min_length=1, description="vLLM version of the baseline (the project's or `make engine`)."
    )
    candidate_vllm: str | None = Field(
        default=None,
        min_length=1,
        description="vLLM of the candidate (required, except with --self-test).",
    )
    repeats: int = Field(
        default=2,
        ge=1,
        le=MAX_GATE_REPEATS,
        description="Runs per side, alternated (with --until-decided: before the first look).",
    )
    until_decided: bool = Field(
        default=False,
        description="Add alternated pairs until every key metric is decided, --max-repeats "
        "per side or --max-minutes; each look in looks.jsonl, its intervals at the confidence "
        "split over the planned looks (Bonferroni).",
    )
    max_repeats: int | None = Field(
        default=None,
        ge=1,
        le=MAX_GATE_REPEATS,
        description=f"With --until-decided: most runs per side (default {DEFAULT_MAX_REPEATS}: "
        "where the paired MDE falls below the default tolerances, docs/gate-decisions.md).",
    )
    max_minutes: float | None = Field(
        default=None,
        gt=0,
        le=7 * 24 * 60,
        description="With --until-decided: add no pair that would end past this many minutes "
        "from the gate's start (estimated from the pairs so far); the error bound holds "
        f"(default {DEFAULT_MAX_MINUTES:g}; per gate with --self-test).",
    )
    self_test: str | None = Field(
        default=None,
        description="Measure the gate's power here: an A/A gate and one whose candidate is "
        "the same vLLM behind a gateway slowing it by this much (15% or 0.15; at least "
        f"{MIN_SELF_TEST_SLOWDOWN:.0%}: no gate here detects less; below "
        f"{MAX_SELF_TEST_SLOWDOWN:.0%}), each until decided; exit 0 when both are decided "
        "right.",
    )
    order: Literal["abba", "abab"] = Field(
        default="abba", description="abba: A B B A … (cancels linear drift); abab."
    )
    blocks: Literal["phase", "run"] = Field(
        default="phase",
        description="phase: both runs of a pair at once, one phase a side in turn (A B, B A "
        "… per phase; each side on its own servers), the phase pair the interval's unit; "
        "run: whole runs in turn.",
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

    @property
    def sequential(self) -> bool:
        """Whether the gate looks pair by pair (``--until-decided``; a self-test's gates do)."""
        return self.until_decided or self.self_test is not None

    @property
    def most_pairs(self) -> int:
        """The most pairs of a sequential gate (``--max-repeats`` or its default)."""
        return self.max_repeats or max(DEFAULT_MAX_REPEATS, self.repeats)

    @property
    def time_bound_min(self) -> float | None:
        """The sequential gate's time bound in minutes (:data:`DEFAULT_MAX_MINUTES` when unset;
        ``None`` for a gate of fixed pairs)."""
        if self.max_minutes is None and self.sequential:
            return DEFAULT_MAX_MINUTES
        return self.max_minutes

    @field_validator("baseline_vllm", "candidate_vllm")
    @classmethod
    def _version(cls, value: str | None) -> str | None:
        # Before it reaches a path or the `make engine` command an error would suggest.
        return None if value is None else check_version(value)

    @model_validator(mode="after")
    def _looks(self) -> GateParams:
        for value, flag in ((self.max_repeats, "--max-repeats"), (self.max_minutes,
                                                                   "--max-minutes")):  # fmt: skip
            if value is not None and not self.sequential:
                raise ValueError(f"{flag} needs --until-decided")
        if self.sequential and self.most_pairs < self.repeats:
            raise ValueError(f"--until-decided needs --max-repeats ≥ --repeats ({self.repeats})")
        if self.sequential and self.repeats < 2:
            raise ValueError("--until-decided needs --repeats ≥ 2: with one run per side no "
                             "run-to-run shift can show (docs/gate-decisions.md)")  # fmt: skip
        if self.self_test is None and self.candidate_vllm is None:
            raise ValueError("--candidate-vllm is required (or --self-test F)")
        return self

    @model_validator(mode="after")
    def _self_test(self) -> GateParams:
        if self.self_test is None:
            return self
        parse_slowdown(self.self_test)
        if self.candidate_vllm not in (None, self.baseline_vllm):
            raise ValueError("--self-test runs the baseline's vLLM on both sides: drop "
                             f"--candidate-vllm {self.candidate_vllm}")  # fmt: skip
        if self.candidate_vllm_args is not None:
            raise ValueError("--self-test runs the same server on both sides: drop "
                             "--candidate-vllm-args")  # fmt: skip
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
    if not gate.sequential:
        return
    looks = planned_looks(gate.repeats, gate.most_pairs)
    if not look_confidence(confidence, looks) < 1:
        raise click.UsageError(
            f"the gate file's confidence {confidence} split over {looks} looks rounds to 1 for "
            "each look: lower --max-repeats or the confidence"
        )


def gate_sides(
    scenario: Scenario, gate: GateParams, values: dict[str, Any], candidate_vllm: str
) -> dict[str, Any]:
    """Each side's validated scenario parameters: the baseline's vLLM, and ``candidate_vllm``
    with ``--candidate-vllm-args`` after the shared ``--vllm-args``; each checked against the
    scenario's nominal plan.

    Raises:
        click.UsageError: a side's parameters or plan are refused (``nominal_check``).
    """
    options = ModelOptions(scenario.Params, skip=_GATE_OWNED)
    extra = gate.candidate_vllm_args
    candidate_args = " ".join(a for a in (values.get("vllm_args"), extra) if a) or None
    sides = {
        "baseline": options.build(values, base={"vllm": gate.baseline_vllm}),
        "candidate": options.build(
            {**values, "vllm_args": candidate_args}, base={"vllm": candidate_vllm}
        ),
    }
    for params in sides.values():
        nominal_check(scenario, params, gate.allow_long_schedule)
    return sides


@contextlib.contextmanager
def kept_sides(out: Path, gate: GateParams) -> Iterator[dict[str, KeptServers]]:
    """Each side's kept servers (their files under ``out/servers/SIDE``; none with
    ``--restart-servers``), all stopped on exit; one memory account for both sides, so
    either side's idle servers make room (``loadgen.kept_servers.ServerMemory``)."""
    from loadgen.kept_servers import KeptServers, ServerMemory

    memory = ServerMemory()
    kept = (
        {} if gate.restart_servers
        else {s: KeptServers(out / "servers" / s, memory) for s in GATE_SIDES}
    )  # fmt: skip
    try:
        yield kept
    finally:
        for servers in kept.values():
            servers.stop_all()


def _gate_command(scenario: Scenario, values: dict[str, Any]) -> None:
    from loadgen.progress import make_console

    gate = _GATE_OPTIONS.build(values)
    _look_level(gate)
    if gate.self_test is not None:
        from loadgen.cli.gate_self_test import self_test

        sys.exit(self_test(scenario, gate, values))
    assert gate.candidate_vllm is not None  # validated
    sides = gate_sides(scenario, gate, values, gate.candidate_vllm)
    out = gate.out or new_run_dir(f"gate-{scenario.name}")
    check_out_dir(out)
    console = make_console()
    with kept_sides(out, gate) as kept:
        sys.exit(run_gate(scenario, gate, sides, out, kept, console))


def run_gate(
    scenario: Scenario, gate: GateParams, sides: dict[str, Any], out: Path,
    kept: dict[str, KeptServers], console: Console,
    transforms: Mapping[str, PlanTransform] | None = None,
) -> int:  # fmt: skip
    """The gate's runs in order into ``out``, then its comparison (or looks): its exit code.
    ``transforms``: per side, a change to every run's plan (a self-test's gateways).

    Exits (``SystemExit``) with ``GateExit.RUN_NOT_OK`` when a run did not end ok, and with
    ``CompareExit.CANNOT_COMPARE`` when its report or the comparison fails."""
    from loadgen.run import gate_order

    repeats, transforms = gate.repeats, transforms or {}
    started_s = time.monotonic()
    order = gate_order(repeats, gate.order)
    shown_order = " ".join("A" if s == "baseline" else "B" for s in order)
    console.print(f"gate {out}: {shown_order} ({gate.blocks} blocks)")
    run_pair = _pair_runner(scenario, gate, sides, out, kept, console, transforms)
    for i in range(repeats):
        run_pair(order[2 * i : 2 * i + 2])

    def compare(confidence: float | None = None) -> int:
        return compare_exit_code(out / GATE_SIDES[0], out / GATE_SIDES[1], out, gate.gate,
                                 gate.strict, confidence=confidence,
                                 paired=not gate.unpaired)  # fmt: skip

    if not gate.sequential:
        return compare()
    return _until_decided(out, gate, run_pair, compare, console, started_s)


def _pair_runner(
    scenario: Scenario, gate: GateParams, sides: dict[str, Any], out: Path,
    kept: dict[str, KeptServers], console: Console, transforms: Mapping[str, PlanTransform],
) -> Callable[[list[str]], None]:  # fmt: skip
    """A function that runs the gate's next pair, its sides in the given order: whole runs in
    turn (``--blocks run``) or both runs phase by phase (``loadgen.cli.gate_pair``); each
    pair's line goes to ``pairs.jsonl``. A run that did not end ok stops the gate with
    ``GateExit.RUN_NOT_OK``, never 1 (a regression); a report that failed, with
    ``CompareExit.CANNOT_COMPARE``."""
    from loadgen.cli.gate_pair import run_pair_and_report

    done = [0]

    def check(side: str, run_dir: Path, status: str, report: object) -> None:
        if status != "ok":
            shown = escape(str(run_dir))
            console.print(f"[red]{side} run {shown} ended {status}: the gate stops[/red]")
            sys.exit(GateExit.RUN_NOT_OK)
        if report is None:  # complete records, but the analysis cannot read them
            fail_compare(f"the report of {side} run {run_dir} failed (said above)")

    def run_pair(order: list[str]) -> None:
        done[0] += 1
        dirs = {side: gate_run_dir(out, side, done[0]) for side in order}
        line: dict[str, Any] = {"pair": done[0], "blocks": gate.blocks, "first": order[0]}
        if gate.blocks == "run":
            for side in order:
                status, report = run_and_report(scenario, sides[side], dirs[side], None,
                                                GateExit.RUN_NOT_OK, kept.get(side),
                                                transforms.get(side))  # fmt: skip
                check(side, dirs[side], status, report)
        else:
            ended, turns = run_pair_and_report(scenario, sides, dirs, order[0], console,
                                               GateExit.RUN_NOT_OK, kept, transforms)  # fmt: skip
            line["turns"] = [[t.side, t.phase] for t in turns]
            for side in order:
                check(side, dirs[side], *ended[side])
        with (out / PAIRS_FILE).open("a", encoding="utf-8") as f:
            f.write(json.dumps(line) + "\n")

    return run_pair


def _until_decided(
    out: Path, gate: GateParams, run_pair: Callable[[list[str]], None],
    compare: Callable[[float], int], console: Console, started_s: float,
) -> int:  # fmt: skip
    """Add pairs in the gate's order until decided (``analysis.gate_sequential``)."""
    from analysis.gate_file import load_gate
    from analysis.gate_sequential import decision_of, run_until_decided
    from loadgen.run import gate_order

    def add_pair(k: int) -> None:
        run_pair(gate_order(k, gate.order)[-2:])

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
        gate.repeats, gate.most_pairs, load_gate(gate.gate).confidence, add_pair, look,
        out / LOOKS_FILE, show, started_s, max_minutes=gate.time_bound_min,
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
