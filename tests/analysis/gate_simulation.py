"""Simulated sequential gates at the level of the statistics functions: runs drawn from known
distributions, compared by the real ``compare_request_metric`` (bootstrap, too-few rule,
classification), decided by the real ``gate_decision.decide`` and driven by the real
``gate_sequential.run_until_decided``; no run directories are written.

A simulated run of one phase: m requests; a request's TTFT is ``scale × effect × e^(b) × e^(w)``
with a run shift b ~ N(0, σ_run²) shared by the run's requests and w ~ N(0, σ_req²) per
request (log-normal latencies, the shift of a whole run that the two-level bootstrap is built
for); TPOT the same with its own spreads. ``python tests/analysis/gate_simulation.py`` prints
the figures quoted in docs/gate-decisions.md.
"""

from __future__ import annotations

import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from analysis.compare_figures import compare_request_metric
from analysis.compare_models import Comparison, SideInfo
from analysis.gate_decision import Decision, decide
from analysis.gate_file import GateConfig, load_gate
from analysis.gate_sequential import run_until_decided

SCENARIO = "simulated"


@dataclass(frozen=True)
class Spread:
    """Log-normal spreads of one metric: per request (σ_req) and per run (σ_run)."""

    scale_ms: float
    sigma_request: float
    sigma_run: float


#: Calibrated to what the gate defaults quote for prefix-eviction on this machine (48 requests
#: a phase; a phase's mean or median differed by up to 16 % between two runs of one vLLM): with
#: σ_req 0.25 and σ_run 0.04 a run's log-median has s.d. √(1.2533² × 0.25² / 48 + 0.04²) = 0.060,
#: a two-run difference 0.085, whose largest of ~10 phases is about 0.16.
DEFAULT_TTFT = Spread(100.0, 0.25, 0.04)
DEFAULT_TPOT = Spread(20.0, 0.10, 0.04)
#: A quieter machine (or longer phases): a tenth of the run shift and less request spread.
QUIET_TTFT = Spread(100.0, 0.10, 0.01)
QUIET_TPOT = Spread(20.0, 0.05, 0.01)


def simulated_gate_config(resamples: int = 1000) -> GateConfig:
    """The default gate (tolerances, confidence), key metrics TTFT p50 and mean, TPOT mean."""
    gate = load_gate()
    keys = {SCENARIO: ("ttft_ms.p50", "ttft_ms.mean", "tpot_ms.mean")}
    return gate.model_copy(update={"resamples": resamples, "key_metrics": keys})


def draw_run(rng: np.random.Generator, spread: Spread, effect: float, requests: int) -> list[float]:
    """One run's per-request values (ms)."""
    shift = rng.normal(0.0, spread.sigma_run)
    w = rng.normal(0.0, spread.sigma_request, size=requests)
    return list(spread.scale_ms * effect * np.exp(shift + w))


@dataclass
class SimulatedGate:
    """One gate's runs per side and metric, grown a pair at a time."""

    rng: np.random.Generator
    spreads: dict[str, Spread]
    effects: dict[str, float]
    requests: int
    base: dict[str, list[list[float]]]
    cand: dict[str, list[list[float]]]

    @classmethod
    def start(
        cls, seed: int, spreads: dict[str, Spread], effects: dict[str, float], requests: int
    ) -> SimulatedGate:
        empty = {name: [] for name in spreads}
        gate = cls(np.random.default_rng(seed), spreads, effects, requests, empty,
                   {name: [] for name in spreads})  # fmt: skip
        return gate

    def add_pair(self, _k: int = 0) -> None:
        for name, spread in self.spreads.items():
            self.base[name].append(draw_run(self.rng, spread, 1.0, self.requests))
            effect = self.effects.get(name, 1.0)
            self.cand[name].append(draw_run(self.rng, spread, effect, self.requests))

    def compare(self, gate: GateConfig) -> Comparison:
        metrics = []
        for name in self.spreads:
            stats = ("p50", "mean") if name == "ttft_ms" else ("mean",)
            for stat in stats:
                m = compare_request_metric(name, stat, self.base[name], self.cand[name],  # type: ignore[arg-type]
                                           ("case", "case"), "phase", gate)  # fmt: skip
                assert m is not None
                metrics.append(m)
        k = len(next(iter(self.base.values())))
        side = {"runs": [f"run-{i}" for i in range(k)], "vllm_versions": ["sim"],
                "workload_hash": "sim", "started_at": [None] * k}  # fmt: skip
        return Comparison(
            scenario=SCENARIO, baseline=SideInfo(label="baseline", **side),
            candidate=SideInfo(label="candidate", **side), workload_match=True,
            settings=gate.model_dump(mode="json"), pairs={"case": "case"}, unpaired=[],
            metrics=metrics, verdicts=[], counts={},
        )  # fmt: skip


@dataclass(frozen=True)
class GateOutcome:
    """How a simulated sequential gate ended, and what its first look predicted."""

    decision: Decision
    pairs: int
    first: Decision


def run_gate(
    seed: int,
    effects: dict[str, float],
    *,
    spreads: dict[str, Spread],
    requests: int = 48,
    first_pairs: int = 2,
    max_pairs: int = 6,
    gate: GateConfig | None = None,
    looks_file: Path | None = None,
) -> GateOutcome:
    """One sequential gate through ``run_until_decided`` (Bonferroni over the planned looks)."""
    config = gate or simulated_gate_config()
    sim = SimulatedGate.start(seed, spreads, effects, requests)
    for _ in range(first_pairs):
        sim.add_pair()
    decisions: list[Decision] = []

    def look(level: float) -> Decision:
        decisions.append(decide(sim.compare(config.model_copy(update={"confidence": level}))))
        return decisions[-1]

    with tempfile.TemporaryDirectory() as tmp:
        path = looks_file or Path(tmp) / "looks.jsonl"
        final = run_until_decided(
            first_pairs, max_pairs, config.confidence, sim.add_pair, look, path
        )
    return GateOutcome(final, len(sim.base["ttft_ms"]), decisions[0])


def _main() -> None:  # pragma: no cover - prints the docs' figures
    import time

    gates = int(sys.argv[1]) if len(sys.argv) > 1 else 200
    default = {"ttft_ms": DEFAULT_TTFT, "tpot_ms": DEFAULT_TPOT}
    p50 = simulated_gate_config().model_copy(update={"key_metrics": {SCENARIO: ("ttft_ms.p50",)}})
    # Per-look 95 % at every one of the 5 looks: what a gate without the split would do.
    naive = p50.model_copy(update={"confidence": 1 - 5 * 0.05})
    for label, effects, gate in (
        ("TTFT p50 on the edge (x1.15), Bonferroni 99 % a look", {"ttft_ms": 1.15}, p50),
        ("TTFT p50 on the edge (x1.15), naive 95 % a look", {"ttft_ms": 1.15}, naive),
        ("TTFT p50 x1.30, Bonferroni", {"ttft_ms": 1.3}, p50),
    ):
        t0 = time.perf_counter()
        outcomes = [run_gate(s, effects, spreads={"ttft_ms": default["ttft_ms"]}, gate=gate)
                    for s in range(gates)]  # fmt: skip
        codes = [o.decision.exit_code for o in outcomes]
        pairs = [o.pairs for o in outcomes]
        print(f"{label}: {gates} gates (default-like spreads, 2..6 pairs): exit 0 "
              f"{codes.count(0)}, 1 {codes.count(1)}, 3 {codes.count(3)}; pairs mean "
              f"{np.mean(pairs):.2f}; {time.perf_counter() - t0:.0f} s", flush=True)  # fmt: skip


if __name__ == "__main__":  # pragma: no cover
    _main()
