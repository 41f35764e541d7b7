"""analysis.reports.trace_replay.details: the event order the prediction follows and the
capacity answer (bracketed or honestly not), with hand-derived values."""

from __future__ import annotations

import pandas as pd
import pytest

from analysis.fleet_kv import measured_events
from analysis.models import Stats
from analysis.reports.trace_replay.details import (
    PhaseFigures,
    capacity_answer,
    phase_predictions,
)
from scenarios.workloads import TraceItem, TracePrompts


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


def test_a_pool_over_committed_when_sent_is_predicted_with_admission_at_the_first_token() -> None:
    # Blocks of 4 tokens, 3 usable: each 9-token prompt (2 full blocks, 1 output token) takes
    # all 3. A-1, B-1 and A-2 (A-1's blocks again) are sent at 0, 1, 2 and served one at a
    # time (first tokens 5, 15, 25; ends 10, 20, 30). Admitted when sent, B-1 and A-2 would
    # start with the pool held by A-1 (lent 3 and 1 blocks) and A-2 would hit A-1's 8 tokens
    # while it runs. vLLM kept them waiting: admitted at their first tokens, B-1 evicts A-1's
    # blocks and A-2 hits nothing.
    workload = TracePrompts(
        trace_sha256="0" * 64, token_scale="1", block_tokens=4, salt="p",
        items=tuple(TraceItem(line=n, input_tokens=9, output_tokens=1, hash_ids=h)
                    for n, h in ((1, (1, 2, 9)), (2, (3, 4, 9)), (3, (1, 2, 9)))),
    )  # fmt: skip
    rows = pd.DataFrame({"index": [0, 1, 2], "sent_ns": [0, 1, 2], "end_ns": [10, 20, 30],
                         "chunk_ns": [[5], [15], [25]]})  # fmt: skip
    assert measured_events(rows, at_first_token=True) == [
        ("start", 0), ("end", 0), ("start", 1), ("end", 1), ("start", 2), ("end", 2),
    ]  # fmt: skip
    found = phase_predictions(workload, rows, 3, 4)
    assert found is not None
    predicted, maximum, sequential, _ = found
    assert predicted.hit_tokens == (0, 0, 0) and predicted.lent_blocks == (0, 3, 1)
    assert predicted.short_requests == 2
    assert sequential.hit_tokens == (0, 0, 0) and maximum.hit_tokens == (0, 0, 8)
    # Without first tokens recorded the send order stands: A-2 hits A-1's 8 tokens.
    sent_only = phase_predictions(workload, rows.drop(columns="chunk_ns"), 3, 4)
    assert sent_only is not None and sent_only[0].hit_tokens == (0, 0, 8)
