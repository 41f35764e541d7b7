"""Declared expectations (verdict checks) of a scenario, as data; ``analysis`` evaluates them.

Each check names the case (and phases) it is about; the effect a scenario is supposed to cause
is written down before the run, and the report says PASS or FAIL for each from recorded data.

A check kind is a frozen model subclassing :class:`CheckSpec` with a ``kind`` literal; defining
the class registers the kind, so a scenario declares its own check kinds in its own module and
a plan (``plan.json``) read through ``scenarios.registry.plan_from_data`` restores each check
as its own class. The checks any scenario can use live here.
"""

from __future__ import annotations

from typing import Annotated, Any, ClassVar, Literal

from pydantic import BeforeValidator, Field, SerializeAsAny

from server.frozen import FrozenModel


class CheckSpec(FrozenModel):
    """Base of every check kind: ``kind`` (the registered name) and the ``case`` it is about."""

    kind: str
    case: str

    #: kind → class; filled as subclasses are defined.
    registry: ClassVar[dict[str, type[CheckSpec]]] = {}
    #: Server metric families (``metrics.names`` canonical names) the check is decided from:
    #: a case whose server lacks one gets an undecided verdict that names it, never a 0.
    families: ClassVar[tuple[str, ...]] = ()

    @classmethod
    def __pydantic_init_subclass__(cls, **kwargs: Any) -> None:
        super().__pydantic_init_subclass__(**kwargs)
        kind = cls.model_fields["kind"].default
        if not isinstance(kind, str):
            raise TypeError(f"{cls.__name__} must give `kind` a literal default")
        if kind in CheckSpec.registry and CheckSpec.registry[kind] is not cls:
            raise TypeError(f"check kind {kind!r} defined twice")
        CheckSpec.registry[kind] = cls


def _check_from_data(value: Any) -> Any:
    """A check model from its JSON form (``{"kind": …, …}``), by its registered kind.

    Raises:
        ValueError: the kind is unknown (no imported scenario defines it).
    """
    if isinstance(value, CheckSpec) or not isinstance(value, dict):
        return value
    kind = value.get("kind")
    cls = CheckSpec.registry.get(str(kind))
    if cls is None:
        raise ValueError(
            f"unknown check kind {kind!r} (read plans with scenarios.registry.plan_from_data, "
            f"which defines every built-in kind); known: {sorted(CheckSpec.registry)}"
        )
    return cls.model_validate(value)


#: A check of any registered kind (serialised with all of its own fields).
Check = Annotated[SerializeAsAny[CheckSpec], BeforeValidator(_check_from_data)]


class LatencyRatio(CheckSpec):
    """stat(metric, phase) / stat(metric, other) ≥ ``min_ratio`` (e.g. revisit TTFT p95 vs warm)."""

    kind: Literal["latency_ratio"] = "latency_ratio"
    phase: str
    other: str
    metric: Literal["ttft_ms", "tpot_ms", "e2el_ms"] = "ttft_ms"
    stat: Literal["mean", "p50", "p90", "p95", "p99"] = "p95"
    min_ratio: float = Field(gt=0)


class CapacityAtLeast(CheckSpec):
    """The case's real KV capacity is at least ``tokens`` (e.g. a control that must hold all)."""

    kind: Literal["capacity_at_least"] = "capacity_at_least"
    tokens: int = Field(gt=0)
    why: str = ""
