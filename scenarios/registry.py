"""Built-in scenarios by name."""

from __future__ import annotations

from scenarios.base import Scenario
from scenarios.bench import Bench
from scenarios.breaker import Breaker
from scenarios.disconnect_abort import DisconnectAbort
from scenarios.kv_preemption import KVPreemption
from scenarios.prefix_eviction import PrefixEviction
from scenarios.slo_goodput import SLOGoodput
from scenarios.spec_decode import SpecDecode

SCENARIOS: dict[str, Scenario] = {
    s.name: s
    for s in (
        PrefixEviction(),
        KVPreemption(),
        DisconnectAbort(),
        Breaker(),
        SpecDecode(),
        SLOGoodput(),
        Bench(),
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
