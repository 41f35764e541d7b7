"""A self-test's plans: every case behind the project's gateway, the candidate's with the
planted slowdown; cases the gateway cannot front are refused in one line."""

from __future__ import annotations

import warnings

import pytest

from loadgen.planted import SelfTestPlanError, behind_gateway, side_transforms
from scenarios.kv_preemption import KVPreemption, KVPreemptionParams
from scenarios.plan import GatewaySpec, ProxySpec
from server.capacity import KVCapacity


def _plan():  # type: ignore[no-untyped-def]
    params = KVPreemptionParams(cases="1GiB:8,1GiB:16")
    return KVPreemption().plan(params, KVCapacity(18688, 128, 146, 2**30, "metrics"))


def test_every_case_goes_through_a_gateway_and_only_the_planted_one_is_slowed() -> None:
    plan = _plan()
    plain = behind_gateway(plan, 0.0)
    slowed = behind_gateway(plan, 0.15)
    assert [c.gateway for c in plain.cases] == [GatewaySpec()] * len(plan.cases)
    planted = ("--slowdown", "0.15", "--slowdown-scope", "first-token")
    assert [c.gateway.extra_args for c in slowed.cases] == [planted] * 2  # type: ignore[union-attr]
    # Everything else is the plan as it was: the same servers and phases on both sides.
    assert [c.server for c in slowed.cases] == [c.server for c in plan.cases]
    assert slowed.phases == plan.phases
    assert side_transforms(0.15) == {"baseline": 0.0, "candidate": 0.15}
    with warnings.catch_warnings():  # model_copy skips validation: a list where the field
        warnings.simplefilter("error")  # is a tuple only warns when plan.json is written
        assert type(slowed).model_validate_json(slowed.model_dump_json()) == slowed


def test_a_case_with_a_gateway_keeps_it_and_gets_the_slowdown_added() -> None:
    plan = _plan()
    own = GatewaySpec(routing="round-robin", extra_args=("--idle-timeout", "9"))
    case = plan.cases[0].model_copy(update={"gateway": own})
    out = behind_gateway(plan.model_copy(update={"cases": (case,)}), 0.2).cases[0]
    assert out.gateway == GatewaySpec(
        routing="round-robin",
        extra_args=("--idle-timeout", "9", "--slowdown", "0.2", "--slowdown-scope", "first-token"),
    )


@pytest.mark.parametrize(
    ("update", "why"),
    [
        ({"proxy": ProxySpec(kind="nginx")}, "is sent through nginx"),
        ({"replicas": 2}, "has 2 replicas and no relay"),
        ({"gateway": GatewaySpec(extra_args=("--slowdown", "0.1"))}, "already has --slowdown"),
    ],
)
def test_cases_the_gateway_cannot_front_are_refused(update: dict, why: str) -> None:
    plan = _plan()
    case = plan.cases[0].model_copy(update=update)
    with pytest.raises(SelfTestPlanError, match=why):
        behind_gateway(plan.model_copy(update={"cases": (case,)}), 0.15)


def test_the_self_test_refuses_a_proxied_scenario_from_its_nominal_plan() -> None:
    import click

    from loadgen.cli.gate_self_test import _check_plan
    from scenarios.registry import SCENARIOS

    bench = SCENARIOS["bench"]
    proxied = bench.params({"replicas": 2, "routing": "vllm-router:round_robin"})
    with pytest.raises(click.UsageError, match="is sent through vllm-router"):
        _check_plan(bench, proxied, 0.15)
    _check_plan(bench, bench.params({"replicas": 2, "routing": "round-robin"}), 0.15)
