"""scenarios.late and PhaseSpec.resolved: figures a plan names and the run measures.

A late-bound rate resolves to factor × the measured statistic, the request count of a
duration-driven open loop to the arrivals of its seeded schedule in that duration; a plan
must measure a source phase before the phase that needs it.
"""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

from scenarios.arrivals import ClosedLoop, OpenLoop, arrivals_within, open_loop_offsets_ns
from scenarios.late import LateBindingError, Measured
from scenarios.plan import CaseSpec, PhaseSpec, Plan
from scenarios.workloads import UniquePrompts

SAT = Measured(phase="sat", statistic="closed_loop_rps", factor=0.5)


def _sweep_phase(rate: float | Measured, duration_s: float = 4.0) -> PhaseSpec:
    return PhaseSpec(
        name="sweep",
        workload=UniquePrompts(prompt_tokens=8, output_tokens=2, requests=None),
        arrival=OpenLoop(rate_rps=rate, pattern="constant", duration_s=duration_s),
    )


def _sat_phase() -> PhaseSpec:
    return PhaseSpec(
        name="sat",
        workload=UniquePrompts(prompt_tokens=8, output_tokens=2, requests=100),
        arrival=ClosedLoop(concurrency=4, duration_s=3.0),
    )


def test_a_measured_rate_resolves_to_factor_times_the_statistic() -> None:
    assert SAT.resolve({"sat": {"closed_loop_rps": 9.0}}) == 4.5
    assert SAT.inputs({"sat": {"closed_loop_rps": 9.0}}) == {
        "phase": "sat", "statistic": "closed_loop_rps", "measured": 9.0, "factor": 0.5,
        "value": 4.5,
    }  # fmt: skip


@pytest.mark.parametrize(
    ("measurements", "message"),
    [({}, "has not been measured"), ({"sat": {"closed_loop_rps": None}}, "no usable")],
)
def test_an_unmeasured_source_cannot_be_resolved(measurements: dict, message: str) -> None:
    with pytest.raises(LateBindingError, match=message):
        SAT.resolve(measurements)


def test_constant_arrivals_are_evenly_spaced() -> None:
    # 4 req/s: every 250 ms.
    assert open_loop_offsets_ns(OpenLoop(rate_rps=4.0, pattern="constant"), 4) == [
        0, 250_000_000, 500_000_000, 750_000_000,
    ]  # fmt: skip


def test_arrivals_within_counts_the_schedule_before_the_duration() -> None:
    # Constant 4.5 req/s over 4 s: offsets 0, 0.222…, …, 3.777… s → 18 of them (the 19th
    # would be at 4.0 s, not before it).
    assert arrivals_within(OpenLoop(rate_rps=4.5, pattern="constant"), 4.0) == 18
    # Poisson: the count is exactly how many seeded offsets fall before the duration.
    poisson = OpenLoop(rate_rps=20.0, seed=11)
    count = arrivals_within(poisson, 3.0)
    offsets = open_loop_offsets_ns(poisson, count + 1)
    assert offsets[count - 1] < 3_000_000_000 <= offsets[count]


def test_offsets_of_fewer_requests_are_a_prefix_of_more() -> None:
    # Counting arrivals and sending them draw different sizes from the same seed.
    for burstiness in (0.5, 1.0, 3.0):
        arrival = OpenLoop(rate_rps=7.0, burstiness=burstiness, seed=5)
        assert open_loop_offsets_ns(arrival, 1000)[:137] == open_loop_offsets_ns(arrival, 137)


def test_a_late_phase_resolves_its_rate_and_count_and_records_the_inputs() -> None:
    phase, record = _sweep_phase(SAT).resolved({"sat": {"closed_loop_rps": 9.0}})
    assert isinstance(phase.arrival, OpenLoop)
    assert phase.arrival.rate() == 4.5
    assert phase.workload.requests == 18  # 4.5 req/s over 4 s, as above
    assert phase.is_resolved()
    assert record == {
        "rate_from": {"phase": "sat", "statistic": "closed_loop_rps", "measured": 9.0,
                      "factor": 0.5, "value": 4.5},
        "rate_rps": 4.5, "duration_s": 4.0, "requests": 18,
    }  # fmt: skip


def test_a_fixed_rate_with_a_duration_resolves_only_its_count() -> None:
    phase, record = _sweep_phase(2.0, duration_s=3.0).resolved({})
    assert phase.workload.requests == 6
    assert record == {"rate_rps": 2.0, "duration_s": 3.0, "requests": 6}


def test_a_concrete_phase_needs_no_resolution() -> None:
    assert _sat_phase().resolved({}) == (_sat_phase(), None)


def test_an_unresolved_rate_cannot_be_scheduled() -> None:
    with pytest.raises(LateBindingError, match="resolved at run time"):
        open_loop_offsets_ns(OpenLoop(rate_rps=SAT), 3)


def test_the_late_binding_is_written_into_the_plan_as_data() -> None:
    plan = Plan(
        scenario="x", description="", params={},
        cases=(CaseSpec(name="c", url="http://127.0.0.1:1"),),
        phases=(_sat_phase(), _sweep_phase(SAT)),
        derived={"slo_ttft_ms": Measured(phase="sat", statistic="ttft_p50_ms", factor=3)},
    )  # fmt: skip
    data = json.loads(json.dumps(plan.model_dump(mode="json")))
    assert data["phases"][1]["arrival"]["rate_rps"] == {
        "kind": "measured", "phase": "sat", "statistic": "closed_loop_rps", "factor": 0.5,
        "times": None,
    }  # fmt: skip
    assert data["phases"][1]["workload"]["requests"] is None
    assert Plan.model_validate(data) == plan
    assert plan.measured_phases() == {"sat"}


def test_a_phase_cannot_depend_on_a_phase_that_runs_after_it() -> None:
    with pytest.raises(ValidationError, match="must run before it"):
        Plan(
            scenario="x", description="", params={},
            cases=(CaseSpec(name="c", url="http://127.0.0.1:1"),),
            phases=(_sweep_phase(SAT), _sat_phase()),
        )  # fmt: skip


@pytest.mark.parametrize(
    ("requests", "duration_s", "message"),
    [(None, None, "needs an open-loop arrival with duration_s"), (5, 2.0, "not both")],
)
def test_request_count_and_duration_exclude_each_other(
    requests: int | None, duration_s: float | None, message: str
) -> None:
    with pytest.raises(ValidationError, match=message):
        PhaseSpec(
            name="p",
            workload=UniquePrompts(prompt_tokens=8, output_tokens=2, requests=requests),
            arrival=OpenLoop(rate_rps=1.0, duration_s=duration_s),
        )


def test_a_rate_cannot_be_bound_to_a_latency() -> None:
    with pytest.raises(ValidationError, match="cannot be a ttft_p50_ms"):
        _sweep_phase(Measured(phase="sat", statistic="ttft_p50_ms"))


def test_the_warm_up_must_be_shorter_than_the_duration() -> None:
    with pytest.raises(ValidationError, match="warmup_s must be below the duration"):
        PhaseSpec.model_validate(_sweep_phase(2.0, duration_s=4.0).model_dump() | {"warmup_s": 4})
