"""overload's plan: its arms, the probe in the none case, the same loads in every arm, the
limits sized by the rules of thumb (figures resolved by hand), and bad input refused."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from scenarios.late import Measured
from scenarios.overload import Overload, OverloadParams
from scenarios.overload_arms import Arm, Sizing, parse_arms, rule_of_thumb
from server.capacity import KVCapacity

CAPACITY = KVCapacity(18688, 128, 146, None, "test")
MEASURED = {
    "unloaded": {"ttft_p50_ms": 50.0, "tpot_p50_ms": 20.0, "e2el_p50_ms": 700.0},
    "prefill": {"prefill_tokens_per_s": 4000.0},
    "saturation": {"closed_loop_rps": 8.0},
}


def test_arms_parse() -> None:
    arms = parse_arms("none,vllm-tokens:x0.5,vllm-reqs:24,gateway:x1")
    assert arms == [
        Arm("none"), Arm("vllm-tokens", multiple=0.5), Arm("vllm-reqs", limit=24),
        Arm("gateway", multiple=1.0),
    ]  # fmt: skip
    assert [a.name for a in arms] == ["none", "vllm-tokens-x0.5", "vllm-reqs-24", "gateway-x1"]
    assert [a.text for a in arms] == ["none", "vllm-tokens:x0.5", "vllm-reqs:24", "gateway:x1"]


@pytest.mark.parametrize(
    "text",
    ["none:5", "vllm-tokens", "vllm-tokens:0", "vllm-reqs:1.5", "queue:4", "none,none",
     "vllm-tokens:x0", "", " , ", "none,,gateway:4", ",none", "none,"],
)  # fmt: skip
def test_bad_arms_are_refused(text: str) -> None:
    with pytest.raises(ValueError, match="admission arm"):
        parse_arms(text)


def test_rules_of_thumb_by_hand() -> None:
    """Derived SLOs (factor 3): tokens = 3 × 50 ms × 4000 tokens/s = 600 tokens; requests =
    3 × 700 ms × 8 req/s = 16.8 in flight. Given SLOs: TTFT 200 ms → 800 tokens; E2EL 1 s at
    a given 10 req/s → 10 requests (a number, nothing to measure)."""
    derived = Sizing(None, None, 3.0, None, "unloaded", "prefill", "saturation")
    tokens = rule_of_thumb("vllm-tokens", derived, 1.0)
    reqs = rule_of_thumb("vllm-reqs", derived, 2.0)
    assert isinstance(tokens, Measured) and isinstance(reqs, Measured)
    assert tokens.resolve(MEASURED) == pytest.approx(600.0)
    assert reqs.resolve(MEASURED) == pytest.approx(2 * 16.8)
    given = Sizing(200.0, 1000.0, 3.0, 10.0, "unloaded", "prefill", "saturation")
    tokens = rule_of_thumb("vllm-tokens", given, 1.0)
    assert isinstance(tokens, Measured) and tokens.resolve(MEASURED) == pytest.approx(800.0)
    assert rule_of_thumb("gateway", given, 1.0) == pytest.approx(10.0)


def test_the_plan_runs_the_same_loads_in_every_arm_after_the_probe() -> None:
    scenario = Overload()
    p = scenario.params({"admission": "none,gateway:x1,vllm-tokens:512,vllm-reqs:x2"})
    plan = scenario.plan(p, CAPACITY)
    names = [c.name for c in plan.cases]
    assert names == ["none", "gateway-x1", "vllm-tokens-512", "vllm-reqs-x2"]
    loads = ["load-1.00x", "load-1.50x", "load-2.00x", "load-3.00x"]
    first = [ph.name for ph in plan.phases_of(plan.cases[0])]
    assert first == ["unloaded", "prefill", "saturation", *loads]
    for case in plan.cases[1:]:
        assert [ph.name for ph in plan.phases_of(case)] == loads
    # every arm: prefix caching off, so identical prompts give no arm another's cache hits
    assert all(c.server is not None and not c.server.enable_prefix_caching for c in plan.cases)
    none, gateway, tokens, reqs = plan.cases
    assert none.server == gateway.server  # one server start for both
    assert gateway.gateway is not None and gateway.gateway.extra_args == ("--max-queue", "0")
    assert [f.flag for f in gateway.late_flags] == ["--max-in-flight"]
    assert tokens.server is not None
    assert tokens.server.extra_args[-2:] == ("--max-num-queued-tokens", "512")
    assert not tokens.late_flags
    resolved, used = reqs.resolved(MEASURED)
    assert resolved.server is not None and used is not None
    # 2 × 3 × 700 ms × 8 req/s = 33.6 → 34
    assert resolved.server.extra_args[-2:] == ("--max-num-queued-reqs", "34")
    assert plan.measured_phases() == {"unloaded", "saturation"}  # what the late flags need


def test_an_attached_server_is_named_by_the_user() -> None:
    scenario = Overload()
    p = scenario.params({"url": "http://127.0.0.1:8000", "admission": "vllm-tokens:4096,gateway:8"})
    plan = scenario.plan(p, CAPACITY)
    assert [c.name for c in plan.cases] == ["vllm-tokens-4096", "gateway-8"]
    started = scenario.plan(scenario.params({"admission": "vllm-reqs:2,gateway:4"}), CAPACITY)
    assert started.cases[0].server == started.cases[1].server  # the gateway fronts it
    assert all(c.url == "http://127.0.0.1:8000" and c.server is None for c in plan.cases)
    assert plan.cases[1].gateway is not None
    assert plan.cases[1].gateway.extra_args == ("--max-queue", "0", "--max-in-flight", "8")


def test_a_given_rate_needs_no_saturation_phase() -> None:
    scenario = Overload()
    p = scenario.params({"admission": "none,vllm-reqs:x1", "sustainable_rate": 10.0,
                         "slo": "ttft=200ms,tpot=50ms"})  # fmt: skip
    plan = scenario.plan(p, CAPACITY)
    assert [ph.name for ph in plan.phases_of(plan.cases[0])][:2] == ["unloaded", "prefill"]
    assert "saturation" not in [ph.name for ph in plan.phases_of(plan.cases[0])]
    # E2EL bound 200 + 31 × 50 = 1750 ms at 10 req/s: 17.5 → 18, known before the run
    assert plan.cases[1].server is not None
    assert plan.cases[1].server.extra_args[-2:] == ("--max-num-queued-reqs", "18")
    assert [ph.arrival.rate_rps for ph in plan.phases_of(plan.cases[1])] == [10.0, 15.0, 20.0, 30.0]


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"admission": "vllm-tokens:x1,none"}, "first admission arm must be none"),
        ({"admission": "vllm-tokens:512,none,vllm-reqs:x1"}, "first admission arm must be none"),
        ({"url": "http://127.0.0.1:8000", "admission": "none,vllm-tokens:512"}, "one server"),
        ({"url": "http://127.0.0.1:8000", "admission": "vllm-tokens:x1"}, "one server"),
        ({"url": "http://127.0.0.1:8000", "admission": "gateway:8,none"}, "one server"),
        ({"warmup": "20s"}, "warmup must be shorter"),
    ],
)
def test_bad_parameters_are_refused(fields: dict, message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        OverloadParams.model_validate(fields)
