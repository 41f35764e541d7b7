"""Synthetic gates on a drifting machine: the paired estimators (``analysis.gate_paired``:
matched per-request log-ratios, the gate's, and per-side medians) against the unpaired
per-phase comparison ``loadgen compare`` makes of the same runs
(``analysis.compare_stats.bootstrap_ratio_runs``), through the same sequential looks
(Bonferroni over the planned looks, ``analysis.gate_sequential``).

**The machine model.** A gate runs k block pairs. In pair j the machine runs at a speed
e^{s_j}, s_j ~ N(0, σ_block²), common to both sides of the pair (they run minutes apart) and
different between pairs (the shared machine's load changes between blocks); each run adds its
own residual shift r ~ N(0, σ_run²) that the alternation does not cancel. Request i of phase p
takes μ_p · effect · e^{s_j + r + u_i + w}: u_i ~ N(0, σ_item²) is the request's own size
(its prompt, its prefix), drawn once per gate and the same on both sides and in every pair
(the same seeded workload each block); w ~ N(0, σ_req²) is its noise, fresh on each side
(log-normal latencies, as the measured TTFT of a phase). The candidate's ``effect`` is the
true ratio. The matched estimator cancels u_i; the per-side medians see it on each side.

**Blocks: whole runs or phases.** With whole-run blocks (``blocks="run"``, the model above) a
side's run shift r is its own: its phases run minutes from the other side's. With phase blocks
(``blocks="phase"``: a gate pair's runs go phase by phase, ``loadgen.turns``) the two sides'
phase p run seconds apart, so the machine's shift is common to the *phase pair*: per pair j and
phase p a draw q_jp ~ N(0, σ_run²) shared by both sides (drift common to both sides within a
block, different between blocks; the blocks are now phases). In both, each side's phase adds
its own N(0, σ_phase²) that nothing cancels (σ_phase 0: not drawn, so the old draws stay).
The gate decides phase blocks with phase units (``analysis.gate_paired.phase_units``).

``python -m analysis.gate_paired_sim`` writes docs/gate-paired.md from these simulations
(seeded: the same page every time).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from statistics import NormalDist

import numpy as np

from analysis.compare_stats import Classification, bootstrap_ratio_runs, classify
from analysis.gate_paired import PairedEstimate, Units, matched_log_ratio, mde, paired_log_ratio
from analysis.gate_sequential import look_confidence, planned_looks

Side = list[np.ndarray]  # one array of per-request values per phase


@dataclass(frozen=True)
class Machine:
    """A drifting machine and a workload (module docstring); times in ms.

    Attributes:
        sigma_request: log-s.d. of a request's noise, fresh on each side (σ_req).
        sigma_item: log-s.d. of a request's own size, common to both sides (σ_item).
        sigma_block: log-s.d. of the machine's speed between block pairs (σ_block).
        sigma_run: log-s.d. of a run's own residual shift (σ_run).
        requests: requests per phase (m); phase_ms: each phase's median latency μ_p.
        sigma_phase: log-s.d. of each side's phase's own shift, cancelled by no block (σ_phase).
    """

    sigma_request: float = 0.45
    sigma_block: float = 0.15
    sigma_run: float = 0.02
    requests: int = 48
    phase_ms: tuple[float, ...] = (400.0, 120.0, 300.0, 250.0, 130.0)
    sigma_item: float = 0.0
    sigma_phase: float = 0.0


@dataclass
class Blocks:
    """The runs of one simulated gate, a pair at a time: ``base[j][p]``, ``cand[j][p]``;
    ``blocks``: ``run`` (whole runs in turn) or ``phase`` (phase by phase, module docstring)."""

    machine: Machine
    effect: float
    rng: np.random.Generator
    base: list[Side] = field(default_factory=list)
    cand: list[Side] = field(default_factory=list)
    items: np.ndarray | None = None
    blocks: str = "run"

    def add_pair(self, _k: int = 0) -> None:
        """Run one more block pair (both sides at the pair's machine speed, the same
        requests)."""
        m = self.machine
        if self.items is None:  # drawn only when used, so σ_item 0 keeps the old draws
            shape = (len(m.phase_ms), m.requests)
            self.items = (self.rng.normal(0.0, m.sigma_item, shape) if m.sigma_item > 0
                          else np.zeros(shape))  # fmt: skip
        speed = self.rng.normal(0.0, m.sigma_block)
        phases = len(m.phase_ms)
        common = self.rng.normal(0.0, m.sigma_run, phases) if self.blocks == "phase" else None
        for side, effect in ((self.base, 1.0), (self.cand, self.effect)):
            shifts = speed + (common if common is not None
                              else np.full(phases, self.rng.normal(0.0, m.sigma_run)))  # fmt: skip
            if m.sigma_phase > 0:
                shifts = shifts + self.rng.normal(0.0, m.sigma_phase, phases)
            side.append([
                mu * effect * np.exp(shift + u + self.rng.normal(0.0, m.sigma_request, m.requests))
                for mu, u, shift in zip(m.phase_ms, self.items, shifts, strict=True)
            ])  # fmt: skip


def estimate(
    blocks: Blocks, confidence: float, resamples: int = 1000, *, matched: bool = True
) -> PairedEstimate:
    """The pooled TTFT-p50-like key metric of ``blocks``: the matched estimator (the gate's;
    phase units for phase blocks) or, ``matched=False``, the per-side medians."""
    if matched:
        units: Units = "phase" if blocks.blocks == "phase" else "pair"
        return matched_log_ratio(blocks.base, blocks.cand, confidence=confidence,
                                 resamples=resamples, units=units)  # fmt: skip
    return paired_log_ratio(blocks.base, blocks.cand, "p50", confidence=confidence,
                            resamples=resamples)  # fmt: skip


def paired_class(
    blocks: Blocks,
    confidence: float,
    tolerance: float,
    resamples: int = 1000,
    *,
    matched: bool = True,
) -> tuple[Classification, PairedEstimate]:
    """The pooled key metric of ``blocks`` (:func:`estimate`), classified."""
    est = estimate(blocks, confidence, resamples, matched=matched)
    klass = classify(est.low, est.high, neutral=1.0, tolerance=tolerance, better="lower")
    return klass, est


def unpaired_class(
    blocks: Blocks, confidence: float, tolerance: float, resamples: int = 1000
) -> Classification:
    """What the unpaired comparison decides from the same runs: one key metric per phase
    (its p50, two-level bootstrap over runs), regression if any regressed, decided only when
    every phase is."""
    classes = []
    for p in range(len(blocks.machine.phase_ms)):
        iv = bootstrap_ratio_runs([[*run[p]] for run in blocks.base],
                                  [[*run[p]] for run in blocks.cand], "p50",
                                  resamples=resamples, confidence=confidence)  # fmt: skip
        assert iv.low is not None and iv.high is not None
        classes.append(classify(iv.low, iv.high, neutral=1.0, tolerance=tolerance,
                                better="lower"))  # fmt: skip
    if "regression" in classes:
        return "regression"
    if "inconclusive" in classes:
        return "inconclusive"
    return "improvement" if "improvement" in classes else "no change"


Look = Callable[[Blocks, float, float], Classification]


def _matched_look(blocks: Blocks, confidence: float, tolerance: float) -> Classification:
    return paired_class(blocks, confidence, tolerance)[0]


def _paired_look(blocks: Blocks, confidence: float, tolerance: float) -> Classification:
    return paired_class(blocks, confidence, tolerance, matched=False)[0]


#: ``matched``: per-request log-ratios (the gate's); ``paired``: per-side medians of each
#: block pair; ``unpaired``: per-phase pooled runs (``loadgen compare``); ``phase-units``: the
#: matched estimator on phase blocks, each phase pair a unit (``loadgen gate``'s default).
ESTIMATORS: dict[str, Look] = {
    "matched": _matched_look,
    "paired": _paired_look,
    "unpaired": unpaired_class,
    "phase-units": _matched_look,
}
#: The blocks each estimator's gate runs in.
BLOCKS = {"phase-units": "phase"}


@dataclass(frozen=True)
class GateRun:
    """How one simulated sequential gate ended: its class and the pairs it ran."""

    classification: Classification
    pairs: int


def sequential_gate(
    seed: int,
    machine: Machine,
    effect: float,
    estimator: str,
    *,
    tolerance: float,
    confidence: float = 0.95,
    first: int = 2,
    most: int = 6,
) -> GateRun:
    """A gate of ``first`` pairs, then one more a look until decided or ``most`` pairs, each
    look at the Bonferroni confidence (``gate_sequential``), decided by ``estimator``."""
    look = ESTIMATORS[estimator]
    level = look_confidence(confidence, planned_looks(first, most))
    blocks = Blocks(machine, effect, np.random.default_rng(seed),
                    blocks=BLOCKS.get(estimator, "run"))  # fmt: skip
    for _ in range(first):
        blocks.add_pair()
    while True:
        klass = look(blocks, level, tolerance)
        if klass != "inconclusive" or len(blocks.base) >= most:
            return GateRun(klass, len(blocks.base))
        blocks.add_pair()


def interval_widths(
    machine: Machine, pairs: int, gates: int, confidence: float = 0.95
) -> tuple[float, float, float]:
    """Median width ln(high/low) of the matched and the per-side-median pooled intervals and of
    the unpaired per-phase intervals (median over phases and gates) at ``pairs``."""
    matched: list[float] = []
    paired: list[float] = []
    unpaired: list[float] = []
    for seed in range(gates):
        blocks = Blocks(machine, 1.0, np.random.default_rng(seed))
        for _ in range(pairs):
            blocks.add_pair()
        for into, match in ((matched, True), (paired, False)):
            est = estimate(blocks, confidence, matched=match)
            into.append(math.log(est.high / est.low))
        for p in range(len(machine.phase_ms)):
            iv = bootstrap_ratio_runs([[*r[p]] for r in blocks.base],
                                      [[*r[p]] for r in blocks.cand], "p50",
                                      resamples=1000, confidence=confidence)  # fmt: skip
            assert iv.low is not None and iv.high is not None
            unpaired.append(math.log(iv.high / iv.low))
    return float(np.median(matched)), float(np.median(paired)), float(np.median(unpaired))


def predicted_mde(
    machine: Machine, pairs: int, gates: int, confidence: float, blocks: str = "run"
) -> float:
    """The MDE a gate of ``pairs`` pairs in ``blocks`` reports (median over ``gates`` A/A
    gates), relative."""
    values = []
    for seed in range(gates):
        run = Blocks(machine, 1.0, np.random.default_rng(10_000 + seed), blocks=blocks)
        for _ in range(pairs):
            run.add_pair()
        est = estimate(run, confidence)
        values.append(mde(est.se, confidence, "log", df=est.df))
    return float(np.median(values))


def detection_rate(
    machine: Machine, pairs: int, effect: float, gates: int, confidence: float, blocks: str = "run"
) -> float:
    """Share of ``gates`` one-look gates of ``pairs`` pairs in ``blocks`` whose paired
    interval lies wholly above 1 (the change is seen) when the true ratio is ``effect``."""
    seen = 0
    for seed in range(gates):
        blocks_run = Blocks(machine, effect, np.random.default_rng(20_000 + seed), blocks=blocks)
        for _ in range(pairs):
            blocks_run.add_pair()
        est = estimate(blocks_run, confidence)
        seen += est.low > 1.0
    return seen / gates


def wilson(hits: int, n: int, confidence: float = 0.95) -> tuple[float, float]:
    """Wilson's score interval of a proportion ``hits``/``n`` (Wilson, JASA 22, 1927)."""
    z = NormalDist().inv_cdf((1 + confidence) / 2)
    p = hits / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, centre - half), min(1.0, centre + half)


def gate_table(
    machine: Machine,
    effects: Sequence[float],
    gates: int,
    tolerance: float,
    estimators: Sequence[str] = tuple(ESTIMATORS),
) -> list[tuple[str, float, int, int, int, float]]:
    """Rows (estimator, effect, decided correctly, false regression, undecided, mean pairs)."""
    rows = []
    for effect in effects:
        want: Classification = "no change" if effect == 1.0 else "regression"
        for name in estimators:
            runs = [sequential_gate(s, machine, effect, name, tolerance=tolerance)
                    for s in range(gates)]  # fmt: skip
            right = sum(r.classification == want for r in runs)
            false_reg = sum(r.classification == "regression" for r in runs) if effect == 1 else 0
            undecided = sum(r.classification == "inconclusive" for r in runs)
            rows.append((name, effect, right, false_reg, undecided,
                         float(np.mean([r.pairs for r in runs]))))  # fmt: skip
    return rows
