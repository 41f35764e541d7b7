"""The interface every scenario implements, and the registry of built-in scenarios."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import ClassVar

from pydantic import BaseModel

from scenarios.plan import CaseSpec, Plan
from server.capacity import KVCapacity


class Scenario(ABC):
    """A named experiment: parameters → (sizing case, plan from the real capacity).

    Subclasses set ``name``, ``summary`` and ``Params`` (a frozen pydantic model whose fields
    become command-line options) and implement :meth:`sizing_case` and :meth:`plan`.
    """

    name: ClassVar[str]
    summary: ClassVar[str]
    Params: ClassVar[type[BaseModel]]
    #: Why the scenario's load must come from one process (``loadgen run --workers N`` with
    #: N > 1 is refused before anything starts), or ``None`` when it can be split.
    single_process_reason: ClassVar[str | None] = None

    @abstractmethod
    def sizing_case(self, params: BaseModel) -> CaseSpec:
        """The case started first; its real KV capacity sizes the workload of every case."""

    @abstractmethod
    def plan(self, params: BaseModel, capacity: KVCapacity) -> Plan:
        """The full plan for a server with ``capacity``.

        Raises:
            ValueError: the parameters cannot work with this capacity (e.g. a prompt longer
                than the context); raised before any load is sent.
        """
