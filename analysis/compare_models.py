"""What ``loadgen compare`` produces: the models of ``compare.json`` (:class:`Comparison` and its
parts) and :class:`CompareError`, raised when the inputs cannot be compared.

See :mod:`analysis.compare` for how a comparison is made and docs/compare-and-gates.md.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field

from analysis.compare_stats import Classification
from server.frozen import FrozenModel

CLASSES: tuple[Classification, ...] = (
    "regression",
    "improvement",
    "no change",
    "inconclusive",
    "missing",
)


class CompareError(ValueError):
    """The inputs cannot be compared (not runs, different workloads, nothing paired)."""


class MetricComparison(FrozenModel):
    """One metric of one paired case and phase.

    ``scale`` says what ``change``/``low``/``high`` are: the candidate/baseline ratio of the
    pooled statistic (``ratio``) or the difference of the per-run means (``difference``).
    ``n_baseline``/``n_candidate`` count values (per-request metrics) or runs (per-run ones).
    """

    case: str
    candidate_case: str
    phase: str
    metric: str
    stat: str | None = None
    scale: str
    better: str
    baseline: float | None = None
    candidate: float | None = None
    change: float | None = None
    low: float | None = None
    high: float | None = None
    tolerance: float
    classification: Classification
    gated: bool = True
    n_baseline: int = 0
    n_candidate: int = 0
    per_run_baseline: list[float | None] = Field(default_factory=list)
    per_run_candidate: list[float | None] = Field(default_factory=list)
    note: str = ""
    incomplete: bool = False


class PairedMetric(FrozenModel):
    """One paired key metric of a case (``analysis.gate_paired_keys``): its change within
    block pairs pooled over the case's phases.

    ``scale`` ``log``: ``change``/``low``/``high`` are candidate/baseline ratios, ``se`` is in
    the log, ``mde``/``mde_next`` are relative changes; ``difference``: candidate − baseline in
    the figure's unit, as are ``se`` and the MDEs. ``mde``: the smallest change the gate can see
    at its confidence and the pairs run (80 % power); ``mde_next``: after one more pair.
    ``per_pair``: each pair's change (log-ratio or difference). ``extra_pairs``: for an
    undecided one, the pairs estimated to decide it (``None``: none do, or decided).
    ``units``: the interval's unit, ``pair`` (the run pair) or ``phase`` (each pair's phases,
    for runs a gate ran phase by phase); then ``per_phase`` holds each pair's per-phase changes
    and ``df`` the t quantile's degrees of freedom (``None``: the normal quantile).
    """

    case: str
    metric: str
    scale: str
    better: str
    tolerance: float
    change: float | None = None
    low: float | None = None
    high: float | None = None
    se: float | None = None
    pairs: int
    per_pair: list[float] = Field(default_factory=list)
    method: str = ""
    classification: Classification
    mde: float | None = None
    mde_next: float | None = None
    extra_pairs: int | None = None
    note: str = ""
    units: str = "pair"
    per_phase: list[list[float]] = Field(default_factory=list)
    df: int | None = None


class VerdictComparison(FrozenModel):
    """A check's verdict on both sides (PASS, FAIL, MIXED, UNDECIDED over the side's runs) and
    its class from McNemar's exact test over the block pairs (``analysis.gate_verdicts``):
    ``blocks`` pairs with both sides decided, ``left_out`` with a side undecided, ``pass_fail``
    and ``fail_pass`` the discordant ones, ``p_regression``/``p_improvement`` their one-sided
    exact p-values, ``extra_pairs`` the pairs an inconclusive one needs if its flips continue
    (``None``: none do). ``incomplete`` (with ``note``) when a run it comes from did not
    complete; otherwise ``note`` says why it is classified so."""

    case: str
    check: str
    baseline: str
    candidate: str
    classification: Classification
    blocks: int = 0
    left_out: int = 0
    pass_fail: int = 0
    fail_pass: int = 0
    p_regression: float | None = None
    p_improvement: float | None = None
    extra_pairs: int | None = None
    incomplete: bool = False
    note: str = ""


class SideInfo(FrozenModel):
    """One side: its runs, the vLLM versions its servers reported, its workload hash."""

    label: str
    runs: list[str]
    vllm_versions: list[str]
    workload_hash: str
    started_at: list[str | None]


class Comparison(FrozenModel):
    """The whole comparison (``compare.json`` is its dump)."""

    scenario: str
    baseline: SideInfo
    candidate: SideInfo
    workload_match: bool
    settings: dict[str, Any]
    pairs: dict[str, str]
    unpaired: list[str]
    metrics: list[MetricComparison]
    verdicts: list[VerdictComparison]
    counts: dict[str, int]
    notes: list[str] = Field(default_factory=list)
    paired: list[PairedMetric] | None = None
