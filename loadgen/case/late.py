"""Late-bound figures while a case runs (``scenarios.late``): a phase's rate resolved from
an earlier phase's measurement just before it runs, a measured phase measured right after,
and the plan's derived figures resolved from it; each printed as one line."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from loadgen.case.hooks import RunHooks
from loadgen.measure import RequestFacts, measure_phase
from scenarios.late import STATISTIC_LABELS
from scenarios.plan import PhaseSpec, Plan


@dataclass
class LateFigures:
    """The measurements of one case's measured phases, and the resolutions they make."""

    plan: Plan
    hooks: RunHooks
    #: phase → its late-binding statistics (``loadgen.measure.measure_phase``)
    measurements: dict[str, dict[str, Any]] = field(default_factory=dict)

    def resolve(self, planned: PhaseSpec) -> tuple[PhaseSpec, dict[str, Any] | None]:
        """The concrete phase and what resolving it used (``PhaseSpec.resolved``); prints
        the resolution.

        Raises:
            scenarios.late.LateBindingError: its source measured nothing usable.
        """
        phase, resolution = planned.resolved(self.measurements)
        if resolution is not None:
            source = resolution.get("rate_from")
            how = (
                f" = {source['factor']:g} × {source['phase']} {source['measured']:.3f} req/s"
                if source
                else ""
            )
            over = f" over {resolution['duration_s']:g} s" if "duration_s" in resolution else ""
            self.hooks.figure(
                f"{phase.name}: rate {resolution['rate_rps']:.3f} req/s{how}; "
                f"{resolution['requests']} requests{over}"
            )
        return phase, resolution

    def measure(self, phase: PhaseSpec, facts: list[RequestFacts]) -> dict[str, Any]:
        """Measure ``phase`` for the figures that name it; print and return what it gave,
        with the plan's derived figures it resolves (``{"measurement": …, "derived": …}``)."""
        measurement = measure_phase(phase, facts)
        self.measurements[phase.name] = measurement
        shown = ", ".join(
            f"{STATISTIC_LABELS[k]} {measurement[k]:.3f}"
            for k in STATISTIC_LABELS
            if measurement.get(k) is not None
        )
        self.hooks.figure(
            f"{phase.name} measured over {measurement['window_s'] or 0:.1f} s "
            f"({measurement['ok_in_window']} ok requests sent in its window): "
            f"{shown or 'nothing'}"
        )
        derived: dict[str, Any] = {}
        for name, figure in self.plan.derived.items():
            if figure.phase != phase.name:
                continue
            try:
                derived[name] = figure.inputs(self.measurements)
            except ValueError as exc:  # e.g. no TPOT from 1-token outputs: recorded, not fatal
                derived[name] = {"error": str(exc)}
                self.hooks.message(f"derived figure {name}: {exc}")
                continue
            self.hooks.figure(f"{name} = {figure.describe()} = {derived[name]['value']:.3f}")
        return {"measurement": measurement, "derived": derived}
