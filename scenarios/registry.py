"""Built-in scenarios by name."""

from __future__ import annotations

from scenarios.base import Scenario
from scenarios.bench import Bench
from scenarios.breaker import Breaker
from scenarios.disconnect_abort import DisconnectAbort
from scenarios.kv_preemption import KVPreemption
from scenarios.overload import Overload
from scenarios.plan import Plan
from scenarios.prefix_eviction import PrefixEviction
from scenarios.slo_goodput import SLOGoodput
from scenarios.spec_decode import SpecDecode
from scenarios.trace_replay import TraceReplay

SCENARIOS: dict[str, Scenario] = {
    s.name: s
    for s in (
        PrefixEviction(),
        KVPreemption(),
        DisconnectAbort(),
        Breaker(),
        SpecDecode(),
        SLOGoodput(),
        TraceReplay(),
        Bench(),
        Overload(),
    )
}


def get_scenario(name: str) -> Scenario:
    """The built-in scenario ``name``.

    Raises:
        KeyError: unknown name; the message lists the known ones.
    """
    try:
        return SCENARIOS[name]
    except KeyError:
        raise KeyError(
            f"unknown scenario {name!r}; known: {', '.join(sorted(SCENARIOS))}"
        ) from None


def plan_from_data(data: object) -> Plan:
    """A plan read back from its JSON form (``plan.json`` as parsed JSON), with every check
    restored as its own kind: importing this module defines every built-in scenario's checks.

    Raises:
        pydantic.ValidationError: the data is not a valid plan (an unknown check kind too).
    """
    return Plan.model_validate(data)
