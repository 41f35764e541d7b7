"""Sequential gating (``loadgen gate … --until-decided --max-repeats N``): add alternated
baseline/candidate pairs, look after each, stop once the gate is decided, without inflating
false alarms by the repeated looks.

**Method: Bonferroni over the planned looks.** A gate that starts with r pairs and may grow to
N plans L = N − r + 1 looks (after r, r + 1, …, N pairs). Every look builds its intervals at
the confidence 1 − α/L, where 1 − α is the gate file's ``confidence``. A wrong decision at any
look needs some look's interval to miss the true value, so by the union bound the chance of a
wrong decision of a metric over all looks is at most L · α/L = α, and of a false regression (the
interval wholly above the band while the truth is inside it) at most α/2, whatever the
dependence between looks and whenever the gate stops. Why this and not Pocock's or O'Brien–
Fleming's boundaries (Lan–DeMets spending): those assume a normal test statistic with a known
correlation between looks (information fractions), which a two-level percentile bootstrap of
a percentile does not give; they also bound one test of a null, while a gate decides
equivalence (no change) and regression at once. Bonferroni needs neither and is the simplest
rule decided before the run. Its price is width: at α = 0.05 and L = 5 each look is a 99 %
interval (z 2.58 instead of 1.96, 1.31× wider). The level reaches every interval of a look
through the gate settings' ``confidence``: the bootstrap's, for per-run figures with 3+
runs a side Welch's t-interval (``compare_stats.per_run_difference``), and the verdicts'
exact test over the block pairs (``analysis.gate_verdicts``). The estimates of
``analysis.gate_sample_size`` are made at that same per-look confidence, so they predict this
gate's later looks.

**Looks that fit a time bound** (``--max-minutes``; :func:`looks_in_time`). Looks the time
bound leaves no room for would only thin every look's share of α. So with a time bound the
plan is fixed once the first pairs have run and *before* the first look: from their wall time
alone (never from a value they measured) the gate counts the looks that fit, L_t = 1 +
⌊(M − t₁)/p⌋ with t₁ the seconds so far, p = t₁/r the seconds per pair (server starts
included: an overestimate) and M the bound, and plans L = min(L_t, N − r + 1) looks, at most
r + L − 1 pairs. The union bound holds as before: L is decided before any interval is built,
and a gate that later runs faster than planned still stops at its L-th look. This assumes the
first pairs' wall time says nothing about the change they measured, which the pairing makes
so (both sides' phases share the machine's pace); a 20-minute gate whose first two pairs take
14 minutes plans one look at 95 % instead of nine at 99.44 %.

**The first look** comes after at least ``MIN_FIRST_PAIRS`` = 2 pairs (see there).

**Stopping.** After each look: stop when the headline is *no regression* (every key metric
decided) or *regression* (a key metric or verdict regressed: the no-go stands at the stated
error bound, so more pairs would only cost time), or when N pairs are done, or when the next
pair would end past a time bound (``--max-minutes``; :func:`next_pair_s` estimates it from the
pairs so far); otherwise add a pair. Stopping before the N-th pair, for time or a decision,
keeps the bound: the looks taken are a subset of the L planned ones, each at 1 − α/L, so the
union bound over them is at most α still (the gate only gives up power it did not use).
Every look is appended to ``looks.jsonl`` in the gate directory (:class:`Look`).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from analysis.compare_report import read_compare_file
from analysis.gate_decision import Decision, undecided_line
from server.net.jsonl import append_lines

#: The version of a ``looks.jsonl`` line's format (:class:`Look`).
LOOK_FORMAT_VERSION = 1

#: Fewest pairs before the first look. With one run per side the request bootstrap cannot see
#: a shift of a whole run and a per-run figure has no interval (its point alone decides), so
#: no interval of that look is valid at any confidence (a same-vLLM one-pair gate on the
#: shared machine: docs/gate-decisions.md).
MIN_FIRST_PAIRS = 2


class Look(BaseModel):
    """One look of a sequential gate (a line of ``looks.jsonl``).

    Attributes:
        format_version: this format's version (:data:`LOOK_FORMAT_VERSION`).
        look: 1-based look number; ``looks``: the planned number L.
        pairs: runs per side the look compared.
        confidence: the per-look interval confidence 1 − α/L.
        headline, exit_code, line: the look's decision (``analysis.gate_decision``).
        regressions: key metrics and verdicts that regressed.
        undecided: one line per undecided key metric, with the extra pairs estimated.
        extra_pairs: the most extra pairs any undecided key metric needs (``None``: unknown
            or not decidable by pairs).
        stop: whether the gate stopped after this look, and ``why``.
        at: UTC time of the look.
        elapsed_s: seconds from the gate's start to this look (``None``: not given).
        mde: per paired key metric, the smallest change this look can see (the decision's).
        next_pair_s: the estimated seconds of one more pair and its look (:func:`next_pair_s`;
            ``None``: not estimated).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")
    format_version: int = LOOK_FORMAT_VERSION
    look: int
    looks: int
    pairs: int
    confidence: float
    headline: str
    exit_code: int
    line: str
    regressions: list[str] = Field(default_factory=list)
    undecided: list[str] = Field(default_factory=list)
    extra_pairs: int | None = None
    stop: bool
    why: str
    at: str
    elapsed_s: float | None = None
    mde: dict[str, float] = Field(default_factory=dict)
    next_pair_s: float | None = None


def planned_looks(first_pairs: int, max_pairs: int) -> int:
    """L = ``max_pairs − first_pairs + 1``.

    Raises:
        ValueError: ``first_pairs`` < ``MIN_FIRST_PAIRS`` or ``max_pairs`` < ``first_pairs``.
    """
    if first_pairs < MIN_FIRST_PAIRS:
        raise ValueError(
            f"the first look needs {MIN_FIRST_PAIRS} pairs (got {first_pairs}): with one run "
            "per side no run-to-run shift can show"
        )
    if max_pairs < first_pairs:
        raise ValueError(
            f"max repeats ({max_pairs}) must be at least the first repeats ({first_pairs})"
        )
    return max_pairs - first_pairs + 1


def looks_in_time(
    first_pairs: int, max_pairs: int, elapsed_s: float, max_minutes: float | None
) -> int:
    """The looks a gate plans (module docstring, *looks that fit a time bound*): L =
    min(1 + ⌊(``max_minutes`` · 60 − ``elapsed_s``)/p⌋, :func:`planned_looks`), p =
    ``elapsed_s``/``first_pairs`` seconds a pair, at least 1; without a time bound (or
    before any time passed) :func:`planned_looks`.

    Raises:
        ValueError: see :func:`planned_looks`.
    """
    most = planned_looks(first_pairs, max_pairs)
    if max_minutes is None or elapsed_s <= 0:
        return most
    per_pair = elapsed_s / first_pairs
    fit = 1 + math.floor(max(0.0, max_minutes * 60 - elapsed_s) / per_pair)
    return max(1, min(most, fit))


def look_confidence(confidence: float, looks: int) -> float:
    """Per-look confidence 1 − (1 − ``confidence``)/``looks`` (Bonferroni, module docstring).

    Raises:
        ValueError: ``confidence`` outside (0, 1) or ``looks`` < 1.
    """
    if not 0 < confidence < 1 or looks < 1:
        raise ValueError(f"confidence in (0, 1) and looks ≥ 1 needed ({confidence}, {looks})")
    return 1 - (1 - confidence) / looks


def stop_reason(decision: Decision, pairs: int, max_pairs: int) -> str | None:
    """Why the gate stops after a look with ``decision`` at ``pairs`` pairs, or ``None``."""
    if decision.headline == "regression":
        return "a key metric or verdict regressed"
    if decision.headline == "no regression":
        return "every key metric decided"
    if pairs >= max_pairs:
        return f"{max_pairs} pairs reached (--max-repeats) with key metrics undecided"
    return None


def next_pair_s(first_pairs: int, look_ends_s: list[float]) -> float:
    """The estimated seconds of one more pair and its look, from the pairs so far:
    the mean time between looks once a pair was added (one pair and one look each), else the
    first look's time per pair (its server starts included: an overestimate, so a time bound
    is kept).

    Args:
        first_pairs: pairs before the first look.
        look_ends_s: seconds from the gate's start to the end of each look so far (≥ 1).
    """
    if len(look_ends_s) > 1:
        return (look_ends_s[-1] - look_ends_s[0]) / (len(look_ends_s) - 1)
    return look_ends_s[0] / first_pairs


def time_stop(elapsed_s: float, next_s: float, max_minutes: float | None) -> str | None:
    """Why the gate stops for time (the next pair would end after ``max_minutes`` from its
    start, at ``elapsed_s`` + ``next_s`` seconds), or ``None``."""
    if max_minutes is None or elapsed_s + next_s <= max_minutes * 60:
        return None
    return (
        f"the next pair would end at ~{(elapsed_s + next_s) / 60:.1f} min, past --max-minutes "
        f"{max_minutes:g}, with key metrics undecided"
    )


def decision_of(gate_dir: Path) -> Decision:
    """The decision ``loadgen compare`` wrote into ``gate_dir``'s ``compare.json``.

    Raises:
        CompareFileError: it cannot be read (``analysis.compare_report.read_compare_file``).
    """
    return read_compare_file(gate_dir).decision


def record_look(path: Path, look: Look) -> None:
    """Append ``look`` to ``looks.jsonl`` at ``path`` (one JSON object a line).

    Raises:
        RunWriteError: the append failed (``loadgen.runformat.atomic``).
    """
    append_lines(path, (look.model_dump_json() + "\n").encode())


def run_until_decided(
    first_pairs: int,
    max_pairs: int,
    confidence: float,
    add_pair: Callable[[int], None],
    compare: Callable[[float], Decision],
    looks_file: Path,
    on_look: Callable[[Look], None] | None = None,
    started_s: float | None = None,
    max_minutes: float | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> Decision:
    """Look after ``first_pairs`` pairs (already run), then add pairs until :func:`stop_reason`.

    Args:
        first_pairs, max_pairs: pairs run before the first look, and at most.
        confidence: the gate's overall confidence 1 − α.
        add_pair: runs pair number k (1-based; its two runs in the gate's order).
        compare: compares what has run at the given per-look confidence, returns the decision.
        looks_file: ``looks.jsonl``, appended to.
        on_look: called with each look (the CLI prints it).
        started_s: ``clock()`` at the gate's start, for each look's ``elapsed_s`` (``None``:
            this call's start).
        max_minutes: stop adding pairs once the next would end past this many minutes from
            ``started_s`` (:func:`time_stop`), and plan only the looks that fit it
            (:func:`looks_in_time`); ``None``: no time bound.
        clock: the monotonic clock in seconds (tests give their own).

    Raises:
        ValueError: see :func:`planned_looks`.
    """
    start_s = clock() if started_s is None else started_s
    looks = looks_in_time(first_pairs, max_pairs, clock() - start_s, max_minutes)
    timed = looks < planned_looks(first_pairs, max_pairs)
    max_pairs = first_pairs + looks - 1
    level = look_confidence(confidence, looks)
    pairs = first_pairs
    ends_s: list[float] = []
    for number in range(1, looks + 1):
        decision = compare(level)
        ends_s.append(clock() - start_s)
        next_s = next_pair_s(first_pairs, ends_s)
        why = stop_reason(decision, pairs, max_pairs) or time_stop(ends_s[-1], next_s, max_minutes)
        if timed and why is not None and why.endswith("(--max-repeats) with key metrics undecided"):
            why = (f"{pairs} pairs, the last of the {looks} look(s) planned to fit --max-minutes "
                   f"{max_minutes:g}, with key metrics undecided")  # fmt: skip
        look = Look(
            look=number, looks=looks, pairs=pairs, confidence=level,
            headline=decision.headline, exit_code=decision.exit_code, line=decision.line,
            regressions=decision.regressions,
            undecided=[undecided_line(u) for u in decision.undecided],
            extra_pairs=decision.extra_pairs, stop=why is not None,
            why=why or "key metrics undecided: one more pair",
            at=datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"), mde=decision.mde,
            elapsed_s=round(ends_s[-1], 1), next_pair_s=round(next_s, 1),
        )  # fmt: skip
        record_look(looks_file, look)
        if on_look is not None:
            on_look(look)
        if why is not None:
            return decision
        pairs += 1
        add_pair(pairs)
    raise AssertionError("unreachable: the last look stops at max_pairs")  # pragma: no cover
