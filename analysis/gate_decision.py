"""The one-line answer of a regression gate: which metrics decide it (key metrics), its
headline and exit code, and for every undecided key metric what would decide it.

**Key metrics**: every verdict (classified over the block pairs by McNemar's exact test,
``analysis.gate_verdicts``), and the metrics the gate file's ``[key_metrics]`` names for the
scenario (``GateConfig.key_selectors``) whose rule gates (``gate = true``), in every paired case
and phase that has them. The other metrics are information: they never fail the gate and never
make it inconclusive. With ``strict`` every gated metric is key (the whole table decides).

**Headline and exit code** (``server.net.exit_codes.CompareExit``): *regression* (1) when a
key metric or a verdict regressed, naming them; else *inconclusive* (3) when a key metric is
inconclusive or missing (a server metric family absent from a run), naming them and what would
decide each
(``analysis.gate_sample_size``); else *no regression* (0).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from analysis.compare_models import (
    Comparison,
    MetricComparison,
    PairedMetric,
    VerdictComparison,
)
from analysis.compare_stats import Statistic
from analysis.gate_sample_size import (
    PairsEstimate,
    Toward,
    per_run_pairs_needed,
    ratio_pairs_needed,
    too_few_pairs_needed,
    values_needed,
)
from server.net.exit_codes import CompareExit

Headline = Literal["no regression", "regression", "inconclusive"]


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Undecided(_Frozen):
    """A key metric left undecided: its label, class, why, and what would decide it."""

    label: str
    classification: str
    reason: str
    estimate: PairsEstimate | None = None


class Decision(_Frozen):
    """The gate's answer (module docstring).

    Attributes:
        headline: no regression, regression or inconclusive.
        exit_code: 0, 1 or 3 as the headline.
        line: the headline as one line of text.
        key_metrics: how many metric comparisons were key; ``verdicts`` how many verdicts.
        regressions: labels of the key metrics and verdicts that regressed.
        undecided: the key metrics left inconclusive or missing.
        runs: runs per side (the fewer side's) the comparison rests on.
        extra_pairs: the most extra pairs any undecided key metric is estimated to need
            (``None`` when one cannot be decided by pairs, or nothing is undecided).
        mde: per paired key metric (its label), the smallest change the gate can see at the
            pairs run (relative for ratios, in the figure's unit otherwise); empty unpaired.
    """

    headline: Headline
    exit_code: int
    line: str
    key_metrics: int
    verdicts: int
    regressions: list[str] = Field(default_factory=list)
    undecided: list[Undecided] = Field(default_factory=list)
    runs: int
    extra_pairs: int | None = None
    mde: dict[str, float] = Field(default_factory=dict)


def metric_label(m: MetricComparison) -> str:
    """``case/phase metric[ stat]`` (the candidate's case after ``→`` when it differs)."""
    case = m.case if m.case == m.candidate_case else f"{m.case}→{m.candidate_case}"
    return f"{case}/{m.phase} {m.metric}" + (f" {m.stat}" if m.stat else "")


def verdict_label(v: VerdictComparison) -> str:
    """``case: verdict 'check' B→C`` and, when tested over pairs, how many flipped each way."""
    flips = f" ({v.pass_fail}↓ {v.fail_pass}↑ of {v.blocks} pairs)" if v.blocks else ""
    return f"{v.case}: verdict '{v.check}' {v.baseline}→{v.candidate}{flips}"


def verdict_estimate(v: VerdictComparison) -> PairsEstimate | None:
    """What would decide an undecided verdict (``analysis.gate_verdicts``): the pairs if its
    flips continue, ``extra_pairs`` ``None`` when flips go both ways equally; ``None`` when no
    pair flipped or no pair had both sides decided (pairs are not what it lacks)."""
    if not v.blocks or not (v.pass_fail or v.fail_pass):
        return None
    toward: Toward = "regression" if v.pass_fail > v.fail_pass else "improvement"
    done = v.blocks + v.left_out
    return PairsEstimate(
        runs_needed=None if v.extra_pairs is None else done + v.extra_pairs,
        extra_pairs=v.extra_pairs, toward=None if v.pass_fail == v.fail_pass else toward,
        why=v.note,
    )  # fmt: skip


def is_key(m: MetricComparison, selectors: Sequence[str], strict: bool = False) -> bool:
    """Whether ``m`` decides the gate (module docstring)."""
    if not m.gated:
        return False
    if strict:
        return True
    return m.metric in selectors or (m.stat is not None and f"{m.metric}.{m.stat}" in selectors)


def key_selectors(c: Comparison) -> tuple[str, ...]:
    """The key-metric selectors the comparison's gate settings name for its scenario."""
    lists = c.settings.get("key_metrics") or {}
    return tuple(lists.get(c.scenario, lists.get("default", ())))


def runs_per_side(c: Comparison) -> int:
    """Runs of the fewer side."""
    return min(len(c.baseline.runs), len(c.candidate.runs))


def estimate(m: MetricComparison, runs: int, settings: dict[str, Any]) -> PairsEstimate | None:
    """What would decide the undecided metric ``m`` (``analysis.gate_sample_size``), or
    ``None`` when pairs are not what it lacks (missing family, undefined values)."""
    if m.classification == "missing":
        return None
    if m.stat is not None:  # per-request metric: a bootstrap ratio, or too few values
        stat: Statistic = m.stat  # type: ignore[assignment]
        least = int(settings["min_samples"]), int(settings["min_tail_samples"])
        values = min(m.n_baseline, m.n_candidate)
        if 0 < values < values_needed(stat, *least):
            return too_few_pairs_needed(stat, values, runs, min_samples=least[0],
                                        min_tail=least[1])  # fmt: skip
        if m.low is None or m.high is None or m.change is None:
            return None  # a zero baseline statistic: no ratio
        return ratio_pairs_needed(
            m.change, m.low, m.high, tolerance=m.tolerance,
            better="lower" if m.better == "lower" else "higher", runs=runs,
        )  # fmt: skip
    if m.low is None or m.high is None:
        return None  # undefined in a run, or a zero baseline
    b = [float(v) for v in m.per_run_baseline if v is not None]
    c = [float(v) for v in m.per_run_candidate if v is not None]
    return per_run_pairs_needed(
        b, c, ratio=m.scale == "ratio", tolerance=m.tolerance,
        better="lower" if m.better == "lower" else "higher",
        confidence=float(settings["confidence"]),
    )  # fmt: skip


def _estimate_text(e: PairsEstimate | None) -> str:
    if e is None:
        return "not decidable by more pairs"
    if e.extra_pairs is None:
        return "more pairs do not decide it" if not e.capped else "more than 1000 runs per side"
    toward = f" (toward {e.toward})" if e.toward else ""
    return f"~{e.extra_pairs} more pair{'s' if e.extra_pairs != 1 else ''}{toward}"


def undecided_line(u: Undecided) -> str:
    """``label: class; what would decide it``."""
    return f"{u.label}: {u.classification}; {_estimate_text(u.estimate)}"


def paired_label(m: PairedMetric) -> str:
    """``case paired metric`` (the medians say so: ``ttft_ms p50``)."""
    stat = " p50" if m.metric in ("ttft_ms", "tpot_ms") else ""
    return f"{m.case} paired {m.metric}{stat}"


def _paired_undecided(m: PairedMetric) -> Undecided:
    est = PairsEstimate(
        runs_needed=None if m.extra_pairs is None else m.pairs + m.extra_pairs,
        extra_pairs=m.extra_pairs, why=m.note or "undecided",
    )  # fmt: skip
    return Undecided(label=paired_label(m), classification=m.classification, reason=m.note,
                     estimate=None if m.classification == "missing" else est)  # fmt: skip


def _mde_text(m: PairedMetric) -> str:
    if m.mde is None:
        return ""
    unit = f"{m.mde:.1%}" if m.scale == "log" else f"{m.mde:.3g}"
    return f"{m.case} {m.metric} {unit}"


def decide(c: Comparison, strict: bool = False) -> Decision:
    """The gate's headline, exit code and undecided key metrics (module docstring); a paired
    comparison (``c.paired``) is decided by its paired key metrics and the verdicts."""
    selectors = key_selectors(c)
    runs = runs_per_side(c)
    key = [m for m in c.metrics if is_key(m, selectors, strict)] if c.paired is None else []
    paired = c.paired or []
    regressions = [metric_label(m) for m in key if m.classification == "regression"]
    regressions += [paired_label(m) for m in paired if m.classification == "regression"]
    regressions += [verdict_label(v) for v in c.verdicts if v.classification == "regression"]
    undecided = [
        Undecided(
            label=metric_label(m),
            classification=m.classification,
            reason=m.note,
            estimate=estimate(m, runs, c.settings),
        )
        for m in key
        if m.classification in ("inconclusive", "missing")
    ]
    undecided += [
        _paired_undecided(m) for m in paired if m.classification in ("inconclusive", "missing")
    ]
    undecided += [
        Undecided(
            label=verdict_label(v),
            classification=v.classification,
            reason=v.note or "a side could not decide the check",
            estimate=verdict_estimate(v),
        )
        for v in c.verdicts
        if v.classification in ("inconclusive", "missing")
    ]
    pairs = [u.estimate.extra_pairs if u.estimate else None for u in undecided]
    extra = None if not pairs or None in pairs else max(p for p in pairs if p is not None)
    counts = f"{len(key)} key metrics, {len(c.verdicts)} verdicts, {runs} run(s) per side"
    if c.paired is not None:
        counts = f"{len(paired)} paired key metrics, {len(c.verdicts)} verdicts, {runs} pair(s)"
    seen = [t for t in (_mde_text(m) for m in paired if m.metric == "ttft_ms") if t]
    smallest = f"; smallest change seen (MDE): {', '.join(seen)}" if seen else ""
    if regressions:
        headline: Headline = "regression"
        code = CompareExit.REGRESSION
        line = f"REGRESSION ({counts}): " + "; ".join(regressions) + smallest
    elif undecided:
        headline, code = "inconclusive", CompareExit.UNDECIDED
        decide_by = (
            f"an estimated ~{extra} more pair(s) would decide them all"
            if extra is not None
            else "some cannot be decided by more pairs (see each)"
        )
        line = (f"INCONCLUSIVE ({counts}): {len(undecided)} key metric(s) undecided; "
                f"{decide_by}{smallest}")  # fmt: skip
    else:
        headline, code = "no regression", CompareExit.NO_REGRESSION
        line = f"NO REGRESSION ({counts}): every key metric decided, none regressed{smallest}"
    return Decision(
        headline=headline, exit_code=int(code), line=line, key_metrics=len(key) + len(paired),
        verdicts=len(c.verdicts), regressions=regressions, undecided=undecided, runs=runs,
        extra_pairs=extra if undecided else None,
        mde={paired_label(m): m.mde for m in paired if m.mde is not None},
    )  # fmt: skip


def exit_code(comparison: Comparison, strict: bool = False) -> int:
    """0, 1 or 3 as in ``analysis.compare``'s module docstring: :func:`decide`'s exit code."""
    return decide(comparison, strict).exit_code
