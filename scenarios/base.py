"""The interface every scenario implements."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from typing import Any, ClassVar, Generic, TypeVar

from pydantic import BaseModel

from scenarios.plan import CaseSpec, Plan
from server.capacity import KVCapacity

#: A scenario's parameter model (a frozen pydantic model).
P = TypeVar("P", bound=BaseModel)


class Scenario(ABC, Generic[P]):
    """A named experiment: parameters ``P`` → (sizing case, plan from the real capacity).

    Subclasses set ``name``, ``summary`` and ``Params`` (the class ``P``, whose fields become
    command-line options) and implement :meth:`sizing_case` and :meth:`plan`, which take
    parameters already validated: :meth:`params` validates them, once, where they enter.
    """

    name: ClassVar[str]
    summary: ClassVar[str]
    #: The parameter model, ``P`` itself (a class variable cannot name a type variable).
    Params: type[P]
    #: Why the scenario's load must come from one process (``loadgen run --workers N`` with
    #: N > 1 is refused before anything starts), or ``None`` when it can be split.
    single_process_reason: ClassVar[str | None] = None

    def params(self, data: BaseModel | Mapping[str, Any]) -> P:
        """``data`` as this scenario's parameters: returned as it is when it already is one,
        else validated (a model of another class by its fields, or a mapping such as a
        plan's ``params``).

        Raises:
            pydantic.ValidationError: the values are not valid parameters.
        """
        if isinstance(data, self.Params):
            return data
        values = data.model_dump() if isinstance(data, BaseModel) else data
        return self.Params.model_validate(values)

    @abstractmethod
    def sizing_case(self, params: P) -> CaseSpec:
        """The case started first; its real KV capacity sizes the workload of every case."""

    @abstractmethod
    def plan(self, params: P, capacity: KVCapacity) -> Plan:
        """The full plan for a server with ``capacity``.

        Raises:
            ValueError: the parameters cannot work with this capacity (e.g. a prompt longer
                than the context); raised before any load is sent.
        """
