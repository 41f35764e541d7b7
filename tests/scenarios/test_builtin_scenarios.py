"""scenarios.registry: every built-in scenario makes a valid, self-consistent, JSON-safe plan."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pydantic import BaseModel

from scenarios.base import Scenario
from scenarios.plan import Plan
from scenarios.registry import SCENARIOS, get_scenario
from server.capacity import KVCapacity

# vLLM 0.32.0 on CPU with a 1 GiB cache: 146 blocks × 128 tokens.
NOMINAL = KVCapacity(
    tokens=18_688, block_size=128, num_blocks=146, memory_bytes=2**30, source="metrics"
)


#: Parameters a scenario requires (no default): the values its default plan is built with.
SAMPLE_TRACE = Path(__file__).parents[1] / "fixtures/traces/mooncake_fast25_synthetic_trace.jsonl"
REQUIRED: dict[str, dict[str, object]] = {"trace-replay": {"trace": str(SAMPLE_TRACE)}}


def default_params(scenario: Scenario) -> BaseModel:
    """The scenario's parameters with every default, and its required ones from REQUIRED."""
    return scenario.Params(**REQUIRED.get(scenario.name, {}))


@pytest.fixture(params=sorted(SCENARIOS), ids=str)
def scenario(request: pytest.FixtureRequest) -> Scenario:
    return SCENARIOS[request.param]


def test_registry_names_match_scenarios() -> None:
    assert "prefix-eviction" in SCENARIOS
    assert all(s.name == name for name, s in SCENARIOS.items())


def test_unknown_scenario_lists_the_known_ones() -> None:
    known = (
        "known: bench, breaker, disconnect-abort, kv-preemption, overload, prefix-eviction, "
        "slo-goodput"
    )
    with pytest.raises(KeyError, match=f"unknown scenario 'nope'; {known}"):
        get_scenario("nope")


def test_default_params_build_a_valid_plan(scenario: Scenario) -> None:
    params = default_params(scenario)
    plan = scenario.plan(params, NOMINAL)
    assert isinstance(plan, Plan)
    assert plan.scenario == scenario.name
    assert plan.cases
    assert all(plan.phases_of(case) for case in plan.cases)  # every case has phases to run
    # The sizing case is the first case, so its server's capacity sizes every case.
    assert plan.cases[0] == scenario.sizing_case(params)


def test_plan_round_trips_through_json(scenario: Scenario) -> None:
    plan = scenario.plan(default_params(scenario), NOMINAL)
    text = json.dumps(plan.model_dump(mode="json"))
    assert Plan.model_validate(json.loads(text)) == plan


def test_plan_is_internally_consistent(scenario: Scenario) -> None:
    plan = scenario.plan(default_params(scenario), NOMINAL)
    cases = [c.name for c in plan.cases]
    phases = plan.phase_names()
    assert len(set(cases)) == len(cases)
    assert len(set(phases)) == len(phases)
    for case in plan.cases:
        assert (case.server is None) != (case.url is None)  # exactly one of them
    for check in plan.checks:
        assert check.case in cases
        phase = getattr(check, "phase", None)  # case-level checks have no phase
        assert phase is None or phase in phases
        other = getattr(check, "other", None)
        assert other is None or other in phases
    assert all(p.settle_s >= 2 * plan.scrape_interval_s for p in plan.phases)


def test_every_check_kind_has_an_evaluator(scenario: Scenario) -> None:
    from analysis.checks import GENERIC_EVALUATORS
    from analysis.reports import report_for

    evaluators = GENERIC_EVALUATORS | report_for(scenario.name).evaluators
    plan = scenario.plan(default_params(scenario), NOMINAL)
    assert {type(c) for c in plan.checks} <= set(evaluators)


def test_every_params_field_is_documented(scenario: Scenario) -> None:
    # Field descriptions are the --help text of the scenario's options.
    assert all(f.description for f in scenario.Params.model_fields.values())
