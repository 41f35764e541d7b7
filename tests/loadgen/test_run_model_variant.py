"""loadgen.run: run.json records the embedded model's variant and why (``auto`` resolved)."""

from __future__ import annotations

from loadgen.run import model_variant_of
from scenarios.registry import SCENARIOS
from server.model_variant import decide


def test_an_explicit_variant_is_recorded_with_its_reason() -> None:
    scenario = SCENARIOS["prefix-eviction"]
    params = scenario.Params.model_validate({"model_variant": "fp32"})
    assert model_variant_of(scenario, params) == {
        "variant": "fp32",
        "reason": "fp32 chosen explicitly (--model-variant fp32)",
    }


def test_auto_is_recorded_as_what_the_server_start_resolves_it_to() -> None:
    scenario = SCENARIOS["kv-preemption"]
    recorded = model_variant_of(scenario, scenario.Params())
    assert recorded == decide("auto").as_dict()
    assert recorded is not None and recorded["variant"] in ("bf16", "fp32")


def test_attached_or_other_models_record_no_variant() -> None:
    scenario = SCENARIOS["prefix-eviction"]
    attached = scenario.Params.model_validate({"url": "http://127.0.0.1:8000"})
    other = scenario.Params.model_validate({"model": "/models/other"})
    assert model_variant_of(scenario, attached) is None
    assert model_variant_of(scenario, other) is None
