"""The plan of a run: cases, phases and checks, fully resolved (written as ``plan.json``).

A scenario turns its parameters and the sizing server's real KV capacity into a ``Plan``; the
orchestrator executes plans without knowing which scenario made them, and ``analysis`` reads
them back from the run directory.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from scenarios.arrivals import Arrival
from scenarios.checks import Check
from scenarios.workloads import TokenSpace, Workload
from server.config import ServerConfig


class KillReplica(BaseModel):
    """Fault: stop server replica ``replica`` (SIGTERM to its group) ``at_s`` seconds into the
    phase; with ``restart``, start it again on the same port right away."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    kind: Literal["kill_replica"] = "kill_replica"
    replica: int = Field(ge=1)
    at_s: float = Field(gt=0)
    restart: bool = True


class PhaseSpec(BaseModel):
    """A workload sent with an arrival pattern, then a settle wait (seconds) for counters.

    ``settle_until_idle_s`` > 0 first waits (up to that many seconds) until the server's
    ``num_requests_running`` is back to its value before the phase — for work the server keeps
    doing after the clients are gone (orphaned requests).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")
    name: str = Field(pattern=r"^[A-Za-z0-9._-]+$")
    workload: Workload
    arrival: Arrival
    settle_s: float = Field(default=1.0, ge=0)
    settle_until_idle_s: float = Field(default=0.0, ge=0)
    faults: tuple[KillReplica, ...] = ()


class GatewaySpec(BaseModel):
    """Send the case's requests through the project's gateway (its own process), in front of
    every replica of the case's server; ``extra_args`` go to ``loadgen gateway``."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    propagate_cancellation: bool = True
    extra_args: tuple[str, ...] = ()


class CaseSpec(BaseModel):
    """One server configuration to run every phase against.

    Exactly one of ``server`` (start vLLM with it) or ``url`` (attach to a running server).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")
    name: str = Field(pattern=r"^[A-Za-z0-9._-]+$")
    role: Literal["test", "control"] = "test"
    server: ServerConfig | None = None
    url: str | None = None
    #: Human-readable description of the case (e.g. "cache 1GiB, 16 at once").
    label: str = ""
    #: Identical servers started for this case (replica 0 is scraped; faults target others).
    replicas: int = Field(default=1, ge=1, le=4)
    #: Route requests through a gateway in front of the server.
    gateway: GatewaySpec | None = None
    #: Phases of this case only; empty means the plan's shared ``phases``.
    phases: tuple[PhaseSpec, ...] = ()


class Plan(BaseModel):
    """Everything a run does and expects.

    Attributes:
        scenario: scenario name.
        params: the validated parameters the plan was built from.
        sizing: how the workload was sized from the server (capacity, working sets...).
        scrape_interval_s: ``/metrics`` scrape period in seconds.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")
    scenario: str
    description: str
    params: dict[str, object]
    sizing: dict[str, object] = Field(default_factory=dict)
    cases: tuple[CaseSpec, ...]
    phases: tuple[PhaseSpec, ...]
    checks: tuple[Check, ...] = ()
    seed: int = 0
    tokens: TokenSpace = TokenSpace()
    scrape_interval_s: float = Field(default=0.25, gt=0)

    def phases_of(self, case: CaseSpec) -> tuple[PhaseSpec, ...]:
        """The phases ``case`` runs: its own if it declares any, else the shared ones."""
        return case.phases or self.phases

    def phase_names(self) -> list[str]:
        """Every phase name in run order (shared phases, then per-case ones), no repeats."""
        names: list[str] = []
        for case in self.cases:
            for phase in self.phases_of(case):
                if phase.name not in names:
                    names.append(phase.name)
        return names
