"""scenarios.slo_goodput: parameters, the saturation concurrency, and the plan it writes."""

from __future__ import annotations

import tracemalloc

import pytest
from pydantic import ValidationError

from scenarios.arrivals import ClosedLoop, OpenLoop
from scenarios.late import Measured
from scenarios.requests import PhaseRequests
from scenarios.slo_goodput import (
    SLOGoodput,
    SLOGoodputParams,
    given_rates,
    saturation_concurrency,
    sweep_spec,
)
from scenarios.workloads import materialize
from server.capacity import KVCapacity

# vLLM 0.32.0 on CPU with a 1 GiB cache: 146 blocks × 128 tokens.
CPU_1GIB = KVCapacity(18_688, 128, 146, 2**30, "metrics")


def test_rates_are_auto_or_increasing_numbers() -> None:
    assert given_rates("auto") is None
    assert given_rates("6, 2,4.5") == [2.0, 4.5, 6.0]
    with pytest.raises(ValueError, match=r"^rate 0 must be > 0 req/s$"):
        given_rates("2,0")


def test_bad_flags_are_rejected_before_anything_starts() -> None:
    with pytest.raises(ValidationError, match="warmup must be shorter than duration"):
        SLOGoodputParams(duration="5s", warmup="5s")
    with pytest.raises(ValidationError, match="METRIC=LIMIT"):
        SLOGoodputParams(slo="ttft<200ms")
    with pytest.raises(ValidationError, match="exceed max_model_len"):
        SLOGoodputParams(prompt_tokens=2000, output_tokens=100)


def test_saturation_fills_a_batch_limited_by_max_num_seqs() -> None:
    # 128 + 32 tokens = 2 blocks of 128; (146 − 1 null block) // 2 = 72 requests fit at full
    # length; max_num_seqs 16 binds; 2 × 16 = 32 in flight keep the batch full.
    choice = saturation_concurrency(CPU_1GIB, 128, 32, 16)
    assert (choice.blocks_per_request, choice.kv_limit) == (2, 72)
    assert (choice.batch_limit, choice.concurrency) == (16, 32)
    assert "set by max_num_seqs" in choice.reason


def test_saturation_never_exceeds_what_the_kv_cache_holds() -> None:
    # 1024 + 64 tokens = 9 blocks: 145 // 9 = 16 requests; vLLM's default 128 does not bind,
    # and 2 × 16 = 32 would not fit at full length, so 16.
    choice = saturation_concurrency(CPU_1GIB, 1024, 64, 128)
    assert (choice.kv_limit, choice.batch_limit, choice.concurrency) == (16, 16, 16)
    assert "set by the KV cache" in choice.reason


def test_default_plan_probes_saturates_then_sweeps_late_bound_rates() -> None:
    plan = SLOGoodput().plan(SLOGoodputParams(), CPU_1GIB)
    names = [p.name for p in plan.phases]
    assert names == ["unloaded", "saturation", "rate-0.25x", "rate-0.50x", "rate-0.75x",
                     "rate-0.90x", "rate-1.00x", "rate-1.50x", "rate-2.00x"]  # fmt: skip
    unloaded, saturation, *sweep = plan.phases
    assert unloaded.arrival == ClosedLoop(concurrency=1)
    assert unloaded.workload.requests == 12
    assert saturation.arrival == ClosedLoop(concurrency=32, duration_s=30.0, ramp_s=5.0)
    assert saturation.warmup_s == 5.0
    top = sweep[-1]
    assert isinstance(top.arrival, OpenLoop)
    assert top.arrival.rate_rps == Measured(phase="saturation", statistic="closed_loop_rps",
                                            factor=2.0)  # fmt: skip
    assert (top.arrival.duration_s, top.warmup_s, top.workload.requests) == (40.0, 5.0, None)
    assert len({p.arrival.seed for p in sweep if isinstance(p.arrival, OpenLoop)}) == 7
    assert plan.derived == {
        "slo_ttft_ms": Measured(phase="unloaded", statistic="ttft_p50_ms", factor=3.0),
        "slo_tpot_ms": Measured(phase="unloaded", statistic="tpot_p50_ms", factor=3.0),
    }
    assert plan.cases[0].server is not None and plan.cases[0].server.max_num_seqs == 16
    assert plan.measured_phases() == {"unloaded", "saturation"}


def test_explicit_rates_and_slos_need_no_derived_slo() -> None:
    params = SLOGoodputParams(rates="3,1.5", slo="ttft=200ms,tpot=60ms")
    plan = SLOGoodput().plan(params, CPU_1GIB)
    assert [p.name for p in plan.phases][2:] == ["rate-1.5rps", "rate-3rps"]
    assert plan.phases[2].arrival.rate_rps == 1.5  # type: ignore[union-attr]
    assert plan.derived == {}
    spec = sweep_spec(plan)
    assert spec.slo == {"ttft": 200.0, "tpot": 60.0}
    assert spec.sweep == ("rate-1.5rps", "rate-3rps")
    assert not spec.auto_rates


def test_one_token_outputs_derive_no_tpot_slo() -> None:
    plan = SLOGoodput().plan(SLOGoodputParams(output_tokens=1), CPU_1GIB)
    assert list(plan.derived) == ["slo_ttft_ms"]
    assert sweep_spec(plan).slo == {"ttft": "slo_ttft_ms"}


def test_attached_mode_starts_no_server() -> None:
    params = SLOGoodputParams(url="http://127.0.0.1:8000", rates="2,4")
    case = SLOGoodput().plan(params, CPU_1GIB).cases[0]
    assert (case.name, case.server, case.url) == ("attached", None, "http://127.0.0.1:8000")


def test_the_longest_phase_holds_no_prompt_before_it_is_sent() -> None:
    # The top rate resolved at 2 × 50 req/s over 40 s is ≈ 4,000 requests of 128 tokens
    # (≈ 5 KB each as Python ints, ≈ 20 MB built up front); resolving and materialising it
    # must allocate next to nothing: prompts are built one at a time when sent.
    plan = SLOGoodput().plan(SLOGoodputParams(), CPU_1GIB)
    tracemalloc.start()
    try:
        phase, _ = plan.phases[-1].resolved({"saturation": {"closed_loop_rps": 50.0}})
        requests = materialize(phase.workload, phase.name, plan.seed, plan.tokens)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert isinstance(requests, PhaseRequests)
    assert 3_700 < len(requests) < 4_300  # Poisson: 4,000 ± 5 standard deviations
    assert peak < 2_000_000  # the count's offsets (8 B each) and a few objects, not prompts


def test_drawn_lengths_stay_in_their_bounds_and_repeat_with_the_seed() -> None:
    params = SLOGoodputParams(length_spread=0.25, rates="1", slo="ttft=1s")
    workload = params.workload(50)
    requests = materialize(workload, "p", 0, SLOGoodput().plan(params, CPU_1GIB).tokens)
    lengths = [(requests.header(i).prompt_tokens, requests.header(i).max_tokens) for i in range(50)]
    # 128 · (1 ± 0.25) = 96…160; 32 · (1 ± 0.25) = 24…40.
    assert all(96 <= p <= 160 and 24 <= o <= 40 for p, o in lengths)
    assert len(set(lengths)) > 10
    assert len(requests[3].prompt_token_ids) == lengths[3][0]
    again = materialize(workload, "p", 0, SLOGoodput().plan(params, CPU_1GIB).tokens)
    assert [(again.header(i).prompt_tokens, again.header(i).max_tokens) for i in range(50)] == (
        lengths
    )
