"""analysis.reports.trace_replay.details: the event order the prediction follows and the
capacity answer (bracketed or honestly not), with hand-derived values."""

from __future__ import annotations

import pandas as pd
import pytest

from analysis.models import Stats
from analysis.reports.trace_replay.details import PhaseFigures, capacity_answer, measured_events


def test_events_follow_the_records_and_an_end_comes_before_a_start_at_the_same_ns() -> None:
    # Request 0: 10-50 ns; request 1: 50-60; request 2: 20-30 → start 0, start 2, end 2,
    # end 0 and start 1 both at 50 (the end first: its blocks are free for request 1), end 1.
    sent = pd.DataFrame({"sent_ns": [10, 50, 20], "end_ns": [50, 60, 30]})
    assert measured_events(sent) == [
        ("start", 0), ("start", 2), ("end", 2), ("end", 0), ("start", 1), ("end", 1),
    ]  # fmt: skip


def _phase(speedup: float, attainment: float | None) -> PhaseFigures:
    nothing: dict[str, object] = {k: None for k in PhaseFigures.model_fields}
    stats = {k: Stats() for k in ("lateness_ms", "ttft_ms", "tpot_ms", "itl_ms", "e2el_ms")}
    ints = {k: 0 for k in ("planned", "sent", "ok", "failed", "timed", "cached_reported")}
    return PhaseFigures.model_validate(
        {**nothing, **stats, **ints, "phase": f"speedup-{speedup:g}x", "speedup": speedup,
         "attainment": attainment, "attainment_by_slo": {}}
    )  # fmt: skip


def test_the_sustainable_speedup_is_bracketed_and_gives_replicas() -> None:
    # 1× attains 0.95, 2× 0.75, target 0.9: 1 + (0.95 − 0.9) / (0.95 − 0.75) × (2 − 1) = 1.25×;
    # 3× the traffic needs ceil(3 / 1.25) = ceil(2.4) = 3 replicas.
    phases = {p.phase: p for p in (_phase(0.5, 1.0), _phase(1, 0.95), _phase(2, 0.75))}
    answer = capacity_answer(phases, 0.9, 3.0)
    assert answer.bracketed
    assert answer.sustainable_speedup == pytest.approx(1.25)
    assert (answer.lower_speedup, answer.upper_speedup) == (1, 2)
    assert answer.replicas == 3


def test_a_sweep_that_does_not_bracket_says_so() -> None:
    above = capacity_answer({"a": _phase(0.5, 0.99), "b": _phase(1, 0.95)}, 0.9, 4.0)
    assert not above.bracketed and above.sustainable_speedup is None and above.replicas is None
    assert "not bracketed" in above.text and "at least" in above.text
    assert "at most 4 replica(s)" in above.text  # ceil(4 / 1) from the lower bound 1×
    below = capacity_answer({"a": _phase(0.5, 0.5)}, 0.9, None)
    assert not below.bracketed and "below it" in below.text
