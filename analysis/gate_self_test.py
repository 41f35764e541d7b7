"""A gate's self-test (``loadgen gate SCENARIO --self-test F``): was each of its two gates decided
as it must be, in how many pairs and minutes, and what change could it see.

The self-test runs two sequential gates of the same vLLM against itself, each in its own
subdirectory of the gate directory and each with every case behind the project's gateway
(``loadgen.planted``): **aa**, both gateways without a slowdown, which must end *no
regression*; and **planted**, the candidate's gateway holding every answer's first token so
that its TTFT is exactly (1 + F)× the server's and its inter-token gaps are the server's
(``gateway.proxy.pace``, scope ``first-token``), which must end *regression* naming TTFT. Every
figure here is read from each gate's ``looks.jsonl`` (its last look:
``analysis.gate_sequential.Look``), so it is re-derivable from the gate directory;
:func:`write_self_test` writes ``self_test.json`` (the :class:`SelfTest` model),
``self_test.md`` and ``self_test.html``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from analysis.gate_sequential import Look
from analysis.html.page import esc, markdown_html, page
from loadgen.runformat.atomic import write_text
from loadgen.runformat.layout import COMPARE_MD, LOOKS_FILE

SELF_TEST_FORMAT_VERSION = 1
SELF_TEST_JSON = "self_test.json"
SELF_TEST_MD = "self_test.md"
SELF_TEST_HTML = "self_test.html"
#: The two gates in the order they run: (subdirectory, what it must end as).
GATES: tuple[tuple[str, str], ...] = (
    ("aa", "NO REGRESSION"),
    ("planted", "REGRESSION naming TTFT"),
)
#: The key metrics a planted slowdown must be named by (their labels contain these): the
#: first token is the one it slows.
PLANTED_METRICS = ("ttft_ms",)

GateName = Literal["aa", "planted"]


def gate_slowdowns(slowdown: float) -> tuple[tuple[GateName, float], ...]:
    """The self-test's gates in the order they run, each with its candidate's slowdown (a
    fraction): ``aa`` with none, ``planted`` with ``slowdown``."""
    return (("aa", 0.0), ("planted", slowdown))


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class SelfTestGate(_Frozen):
    """One gate of a self-test, from its last look.

    Attributes:
        name: ``aa`` or ``planted`` (its subdirectory).
        slowdown: the candidate's gateway slowdown (a fraction; 0 for aa).
        expected: the decision it must reach, in words.
        headline, line, exit_code: the decision it reached (``analysis.gate_decision``).
        regressions: what it named as regressed.
        correct: whether the decision is the expected one.
        pairs: pairs (runs per side) it ran; ``looks``: looks it took.
        minutes: from the gate's start to its last look (``None``: not recorded).
        stop: why it stopped.
        mde: per paired key metric, the smallest change the last look could see (relative
            for ratios, in the figure's unit otherwise).
    """

    name: GateName
    slowdown: float
    expected: str
    headline: str
    line: str
    exit_code: int
    regressions: list[str] = Field(default_factory=list)
    correct: bool
    pairs: int
    looks: int
    minutes: float | None
    stop: str
    mde: dict[str, float] = Field(default_factory=dict)


class SelfTest(_Frozen):
    """``self_test.json``: the self-test's two gates and its answer.

    Attributes:
        format_version: :data:`SELF_TEST_FORMAT_VERSION`.
        scenario: the scenario gated; ``vllm`` the vLLM on both sides.
        slowdown: the planted slowdown F (a fraction).
        max_pairs, max_minutes: each gate's bounds (pairs per side; minutes, ``None``: none).
        gates: aa, then planted (only those that took a look when the self-test stopped).
        correct: both decided as expected; ``exit_code`` 0 then, else ``wrong_exit``, or
            the stopping gate's code.
        stopped: why the self-test ended before both gates decided (interrupted, a run not
            ok, no comparison), naming the gate; ``None`` when both ran to a decision.
    """

    format_version: int = SELF_TEST_FORMAT_VERSION
    scenario: str
    vllm: str
    slowdown: float
    max_pairs: int
    max_minutes: float | None
    gates: list[SelfTestGate]
    correct: bool
    exit_code: int
    stopped: str | None = None


def is_correct(name: str, look: Look) -> bool:
    """Whether ``look`` is the decision gate ``name`` must reach (module docstring)."""
    if name == "aa":
        return look.headline == "no regression"
    # A verdict's label can quote a metric ('revisit/warm ttft_ms p95 ≥ 1.2×'): only a metric
    # regression names what the slowdown planted.
    metrics = [r for r in look.regressions if ": verdict '" not in r]
    named = any(m in r for r in metrics for m in PLANTED_METRICS)
    return look.headline == "regression" and named


def last_look(gate_dir: Path) -> Look:
    """The last line of ``gate_dir``'s ``looks.jsonl``.

    Raises:
        ValueError: the file is missing, empty or not a look (one line naming it).
    """
    path = gate_dir / LOOKS_FILE
    try:
        lines = path.read_text().splitlines()
        return Look.model_validate_json(lines[-1])
    except (OSError, IndexError, ValueError) as exc:
        raise ValueError(f"{path}: no look to read ({type(exc).__name__})") from None


def gate_result(gate_dir: Path, name: GateName, slowdown: float) -> SelfTestGate:
    """One gate's figures from its last look (``gate_dir`` is its subdirectory).

    Raises:
        ValueError: see :func:`last_look`.
    """
    look = last_look(gate_dir)
    return SelfTestGate(
        name=name, slowdown=slowdown, expected=dict(GATES)[name],
        headline=look.headline.upper(), line=look.line, exit_code=look.exit_code,
        regressions=look.regressions, correct=is_correct(name, look), pairs=look.pairs,
        looks=look.look,
        minutes=None if look.elapsed_s is None else round(look.elapsed_s / 60, 2),
        stop=look.why, mde=look.mde,
    )  # fmt: skip


def summarize(
    out: Path, scenario: str, vllm: str, slowdown: float, max_pairs: int,
    max_minutes: float | None, wrong_exit: int,
) -> SelfTest:  # fmt: skip
    """The self-test of gate directory ``out`` (its ``aa/`` and ``planted/`` gates).

    Raises:
        ValueError: a gate left no look (see :func:`last_look`).
    """
    gates = [gate_result(out / name, name, f) for name, f in gate_slowdowns(slowdown)]
    correct = all(g.correct for g in gates)
    return SelfTest(
        scenario=scenario, vllm=vllm, slowdown=slowdown, max_pairs=max_pairs,
        max_minutes=max_minutes, gates=gates, correct=correct,
        exit_code=0 if correct else wrong_exit,
    )  # fmt: skip


def stopped_early(
    out: Path, scenario: str, vllm: str, slowdown: float, max_pairs: int,
    max_minutes: float | None, gate: GateName, why: str, exit_code: int,
) -> SelfTest:  # fmt: skip
    """The self-test of ``out`` when gate ``gate`` ended without a decision (``why``, in words,
    with the gate's ``exit_code``): the gates that took a look before it, and nothing
    claimed about the rest."""
    gates = []
    for name, planted in gate_slowdowns(slowdown):
        try:
            gates.append(gate_result(out / name, name, planted))
        except ValueError:
            break  # no look: this gate and the ones after it decided nothing
    return SelfTest(
        scenario=scenario, vllm=vllm, slowdown=slowdown, max_pairs=max_pairs,
        max_minutes=max_minutes, gates=gates, correct=False, exit_code=exit_code,
        stopped=f"gate {gate} {why}",
    )  # fmt: skip


def headline(result: SelfTest) -> str:
    """The self-test's one line (PASS, FAIL or STOPPED, and why)."""
    if result.stopped is not None:
        return f"SELF-TEST STOPPED: {result.stopped}: no answer, both gates must decide"
    wrong = [g.name for g in result.gates if not g.correct]
    if not wrong:
        return f"SELF-TEST PASS: both gates decided correctly (planted {result.slowdown:.0%})"
    return f"SELF-TEST FAIL: {', '.join(wrong)} not decided as expected"


def _mde(gate: SelfTestGate, metric: str) -> str:
    found = [f"{v:.1%}" for k, v in gate.mde.items() if f" {metric}" in k]
    return ", ".join(found) or "–"


def markdown_lines(result: SelfTest) -> list[str]:
    """``self_test.md`` as lines: the answer, the gates' table and each gate's MDEs."""
    bound = "no time bound" if result.max_minutes is None else f"{result.max_minutes:g} min"
    lines = [
        f"# Gate self-test: {result.scenario}, planted slowdown {result.slowdown:.0%}", "",
        f"**{headline(result)}** (exit code {result.exit_code})", "",
        f"vLLM {result.vllm} on both sides of both gates, every case behind the project's "
        "gateway (the same hop on both sides); the planted gate's candidate gateway makes TTFT "
        f"{1 + result.slowdown:g}× the server's and keeps its inter-token gaps (`--slowdown "
        f"{result.slowdown:g} --slowdown-scope first-token`). Each gate adds pairs until "
        f"decided, at most {result.max_pairs} pairs and {bound}; its comparison is in its "
        f"directory (`aa/{COMPARE_MD}`, `planted/{COMPARE_MD}`).", "",
        "| gate | candidate's slowdown | expected | decided | correct | pairs | minutes "
        "| TTFT MDE | TPOT MDE | stopped because |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]  # fmt: skip
    for g in result.gates:
        minutes = "–" if g.minutes is None else f"{g.minutes:.1f}"
        lines.append(
            f"| {g.name} | {g.slowdown:.0%} | {g.expected} | {g.headline} | "
            f"{'yes' if g.correct else '**no**'} | {g.pairs} | {minutes} | "
            f"{_mde(g, 'ttft_ms')} | {_mde(g, 'tpot_ms')} | {g.stop} |"
        )
    lines += ["", "## Every gate's decision and MDE per key metric", ""]
    for g in result.gates:
        lines += [f"**{g.name}**: {g.line}", ""]
        if g.mde:
            lines += ["| key metric | MDE |", "|---|---|"]
            lines += [f"| {k} | {v:.1%} |" for k, v in g.mde.items()]
            lines.append("")
    return lines


def write_self_test(result: SelfTest, out: Path) -> Path:
    """Write ``self_test.json``, ``self_test.md`` and ``self_test.html`` into ``out``; the
    Markdown's path.

    Raises:
        RunWriteError: a file could not be written (``loadgen.runformat.atomic``).
    """
    write_text(out / SELF_TEST_JSON, json.dumps(result.model_dump(mode="json"), indent=2) + "\n")
    lines = markdown_lines(result)
    write_text(out / SELF_TEST_MD, "\n".join(lines) + "\n")
    tone = "pass" if result.correct else "fail"
    body = (
        f'<header><p class="kicker">serving-testbed gate self-test</p>'
        f"<h1>Gate self-test: {esc(result.scenario)}</h1>"
        f'<div class="headline {tone}" id="headline"><strong>{esc(headline(result))}</strong>'
        f" (exit code {result.exit_code})</div></header>" + markdown_html(lines[4:])
    )
    write_text(out / SELF_TEST_HTML, page(f"{result.scenario} self-test", body))
    return out / SELF_TEST_MD
