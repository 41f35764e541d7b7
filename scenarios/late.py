"""Late-bound figures: values a plan names but only the run can measure.

A plan is written before any load is sent (``plan.json``), yet some of its figures depend on
what the run measures first: an open-loop rate that is a fraction of the throughput an earlier
phase reached, or a default SLO that is a multiple of an unloaded phase's TTFT. Such a figure
is written into the plan as a :class:`Measured` — *factor × statistic of a named earlier
phase* — instead of a number, so the dependency is explicit in the plan itself.

Who does what:

- the plan declares it (an open loop's ``rate_rps``, or a named entry of ``Plan.derived``);
- the orchestrator measures every phase a figure names right after that phase ran
  (``loadgen.measure``, from the records it just wrote), resolves the figure just before it is
  needed (:meth:`Measured.resolve`), prints it, and records the resolved value *and its
  inputs* in ``phases.jsonl``;
- the analysis recomputes the statistic from the raw records with its own metric
  definitions and checks that it agrees with what the run used, so every number in the
  report is re-derivable from the raw files.

The statistics (all over the named phase's measurement window, ``loadgen.measure``):

- ``closed_loop_rps``: completed requests per second of a closed loop while it was full,
  C ÷ mean time in flight of the successful requests inside the window (Little's law: a closed
  loop holds exactly C requests in flight). Only for closed-loop phases.
- ``ttft_p50_ms`` / ``tpot_p50_ms``: median TTFT / TPOT of the successful requests sent inside
  the window (TPOT over outputs of 2+ tokens), as defined in ``analysis.latency``;
  ``e2el_p50_ms`` likewise the median E2EL (last token − sent).
- ``prefill_tokens_per_s``: the prompt tokens of the phase's successful requests ÷ (the last
  first token − the first send), s: the server's prefill throughput when the phase sends a
  burst of prompts at once (all-at-once, one output token each).

A figure may be a product of two measurements (``times``): an admission limit that is a
target TTFT (a multiple of one phase's TTFT) × the prefill throughput of another.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal

from pydantic import ConfigDict, Field

from server.frozen import FrozenModel

Statistic = Literal[
    "closed_loop_rps", "ttft_p50_ms", "tpot_p50_ms", "e2el_p50_ms", "prefill_tokens_per_s"
]

#: What each statistic is, in words (for printing and reports).
STATISTIC_LABELS: dict[str, str] = {
    "closed_loop_rps": "completed req/s (closed loop, Little's law)",
    "ttft_p50_ms": "TTFT p50 (ms)",
    "tpot_p50_ms": "TPOT p50 (ms)",
    "e2el_p50_ms": "E2EL p50 (ms)",
    "prefill_tokens_per_s": "prefill throughput (prompt tokens/s, a burst at once)",
}

#: Statistics that are rates (req/s), the only ones an arrival rate may be bound to.
RATE_STATISTICS = frozenset({"closed_loop_rps"})

#: phase name → statistic name → value (``None``: the phase gave no value for it).
Measurements = Mapping[str, Mapping[str, float | None]]


class LateBindingError(ValueError):
    """A late-bound figure cannot be resolved: its phase did not run or measured nothing."""


class Measured(FrozenModel):
    """A figure known only once phase ``phase`` has run: ``factor`` × its ``statistic``
    (× the figure ``times``, when given)."""

    model_config = ConfigDict(allow_inf_nan=False)
    kind: Literal["measured"] = "measured"
    phase: str
    statistic: Statistic
    factor: float = Field(default=1.0, gt=0)
    times: Measured | None = None

    def phases(self) -> set[str]:
        """Every phase the figure needs measured."""
        return {self.phase} | (self.times.phases() if self.times is not None else set())

    def describe(self) -> str:
        """``0.5 × saturation's completed req/s (closed loop, Little's law)``."""
        text = f"{self.factor:g} × {self.phase}'s {STATISTIC_LABELS[self.statistic]}"
        return text if self.times is None else f"{text} × ({self.times.describe()})"

    def measured(self, measurements: Measurements) -> float:
        """The statistic the named phase measured (before the factor).

        Raises:
            LateBindingError: the phase was not measured, or gave no value for the statistic.
        """
        stats = measurements.get(self.phase)
        if stats is None:
            raise LateBindingError(f"phase {self.phase!r} has not been measured (did it run?)")
        value = stats.get(self.statistic)
        if value is None or not value > 0:
            raise LateBindingError(
                f"phase {self.phase!r} gave no usable {STATISTIC_LABELS[self.statistic]} "
                f"({value!r}): no successful request inside its measurement window?"
            )
        return float(value)

    def resolve(self, measurements: Measurements) -> float:
        """``factor`` × the measured statistic.

        Raises:
            LateBindingError: see :meth:`measured`.
        """
        value = self.factor * self.measured(measurements)
        return value if self.times is None else value * self.times.resolve(measurements)

    def inputs(self, measurements: Measurements) -> dict[str, object]:
        """What a resolution used (for ``phases.jsonl``): source, statistic, value, factor.

        Raises:
            LateBindingError: see :meth:`measured`.
        """
        value = self.measured(measurements)
        out: dict[str, object] = {
            "phase": self.phase,
            "statistic": self.statistic,
            "measured": value,
            "factor": self.factor,
            "value": self.resolve(measurements),
        }
        if self.times is not None:
            out["times"] = self.times.inputs(measurements)
        return out
