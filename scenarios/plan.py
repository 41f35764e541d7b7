"""The plan of a run: cases, phases and checks (written as ``plan.json`` before any load).

A scenario turns its parameters and the sizing server's real KV capacity into a ``Plan``; the
orchestrator executes plans without knowing which scenario made them, and ``analysis`` reads
them back from the run directory.

Everything is fixed when the plan is written, except figures that depend on what the run
measures first (``scenarios.late``): an open-loop rate given as a :class:`~scenarios.late.
Measured` figure (with the request count that follows from it), and the plan's named
``derived`` figures. The plan names their sources; :meth:`PhaseSpec.resolved` turns a phase
into a fully concrete one once its sources are measured.
"""

from __future__ import annotations

import math
from typing import Any, Literal

from pydantic import Field, model_validator

from scenarios.arrivals import Arrival
from scenarios.checks import Check
from scenarios.late import RATE_STATISTICS, Measured, Measurements
from scenarios.tokens import TokenSpace
from scenarios.workloads import Workload
from server.config import ServerConfig
from server.frozen import FrozenModel
from server.net.limits import METRICS_MAX_BYTES


class KillReplica(FrozenModel):
    """Fault: stop server replica ``replica`` (SIGTERM to its group) ``at_s`` seconds into the
    phase; with ``restart``, start it again on the same port right away."""

    kind: Literal["kill_replica"] = "kill_replica"
    replica: int = Field(ge=1)
    at_s: float = Field(gt=0)
    restart: bool = True


class PhaseSpec(FrozenModel):
    """A workload sent with an arrival pattern, then a settle wait (seconds) for counters.

    ``settle_until_idle_s`` > 0 first waits (up to that many seconds) until the server's
    ``num_requests_running`` is back to its value before the phase — for work the server keeps
    doing after the clients are gone (orphaned requests).

    ``warmup_s``: the phase's statistics that declare a measurement window
    (``loadgen.measure``) leave out its first ``warmup_s`` seconds; those requests are sent and
    recorded like every other one.

    A unique-prompt workload without a request count needs an open loop with ``duration_s``
    (its count is the number of arrivals in that time); the count is filled in by
    :meth:`resolved`.
    """

    name: str = Field(pattern=r"^[A-Za-z0-9._-]+$")
    workload: Workload
    arrival: Arrival
    settle_s: float = Field(default=1.0, ge=0)
    settle_until_idle_s: float = Field(default=0.0, ge=0)
    warmup_s: float = Field(default=0.0, ge=0)
    faults: tuple[KillReplica, ...] = ()

    @model_validator(mode="after")
    def _count_and_duration(self) -> PhaseSpec:
        # An open loop with duration_s: its count follows from its schedule.
        by_duration = self.arrival.timed and self.arrival.time_limit_s is not None
        count = self.workload.requests
        if count is None and not by_duration:
            raise ValueError(
                f"phase {self.name}: a workload without a request count needs an open-loop "
                "arrival with duration_s"
            )
        if by_duration and count is not None:
            raise ValueError(
                f"phase {self.name}: give either the request count or the open loop's "
                "duration_s, not both"
            )
        rate = self.arrival.late_rate
        if rate is not None and rate.statistic not in RATE_STATISTICS:
            raise ValueError(f"phase {self.name}: an arrival rate cannot be a {rate.statistic}")
        duration = self.arrival.time_limit_s
        if duration is not None and self.warmup_s >= duration:
            raise ValueError(f"phase {self.name}: warmup_s must be below the duration")
        return self

    def sources(self) -> set[str]:
        """Earlier phases whose measurements this phase's late-bound figures need."""
        rate = self.arrival.late_rate
        return rate.phases() if rate is not None else set()

    def is_resolved(self) -> bool:
        """Whether every figure of the phase is a number (it can run as it is)."""
        return not self.sources() and self.workload.requests is not None

    def resolved(self, measurements: Measurements) -> tuple[PhaseSpec, dict[str, Any] | None]:
        """(the concrete phase, what resolving it used), ``(self, None)`` if nothing is late.

        A late-bound rate becomes ``factor × measured`` req/s; a duration-driven open loop's
        request count becomes the number of its arrivals in ``duration_s``
        (``scenarios.arrivals.arrivals_within``). The second value (for ``phases.jsonl``)
        holds the rate, the count, and the measured input with its source.

        Raises:
            scenarios.late.LateBindingError: a source phase was not measured or measured
                nothing usable.
        """
        if self.is_resolved():
            return self, None
        arrival, record = self.arrival.resolved(measurements)
        workload = self.workload
        if workload.requests is None:
            count = arrival.count_within_limit()
            assert count is not None  # guaranteed by the validator
            workload = workload.model_copy(update={"requests": count})
            record["duration_s"] = arrival.time_limit_s
        record["requests"] = workload.requests
        return self.model_copy(update={"arrival": arrival, "workload": workload}), record


#: The gateway's routing policies (``gateway.routing``; docs/fleet.md).
GatewayRouting = Literal["least-loaded", "round-robin", "prefix-hash"]
#: vllm-router 0.1.17's ``--policy`` choices (its default is ``cache_aware``).
VllmRouterPolicy = Literal[
    "random", "round_robin", "cache_aware", "kv_aware", "power_of_two", "consistent_hash",
    "sticky_least_loaded",
]  # fmt: skip


class GatewaySpec(FrozenModel):
    """Send the case's requests through the project's gateway (its own process), in front of
    every replica of the case's server, routing with ``routing`` (each decision written to the
    case's ``routing_decisions.jsonl``); ``extra_args`` go to ``loadgen gateway``."""

    propagate_cancellation: bool = True
    routing: GatewayRouting = "least-loaded"
    extra_args: tuple[str, ...] = ()

    @property
    def kind(self) -> Literal["gateway"]:
        """The relay kind (``loadgen.proxies.RELAYS``); not a field, so not in ``plan.json``."""
        return "gateway"


class ProxySpec(FrozenModel):
    """Send the case's requests through a third-party reverse proxy (its own process, started
    by the load generator on loopback, stopped with the case), in front of every replica.

    ``kind``: ``nginx`` (a streaming reverse-proxy config: HTTP/1.1 keep-alive upstream,
    ``proxy_buffering off``) or ``vllm-router`` (vLLM's Rust load balancer, a worker per
    replica).
    ``ignore_client_abort`` (nginx only) adds ``proxy_ignore_client_abort on``.
    ``policy`` (vllm-router only) is its ``--policy``; ``None`` leaves its default
    (``cache_aware``).
    ``kv_event_sources`` (vllm-router's ``kv_aware``): (worker URL, ZMQ endpoint) per replica,
    where the router subscribes to that replica's KV-cache events; the ports exist only once
    the run has bound them, so the run fills this in when it starts the router
    (``loadgen.case.starts``), never the plan. ``kv_event_model`` is the model name the events
    are for, ``kv_event_block_size`` their block size (tokens).
    """

    kind: Literal["nginx", "vllm-router"]
    ignore_client_abort: bool = False
    policy: VllmRouterPolicy | None = None
    kv_event_sources: tuple[tuple[str, str], ...] = ()
    kv_event_model: str | None = None
    kv_event_block_size: int | None = Field(default=None, gt=0)

    @model_validator(mode="after")
    def _nginx_only(self) -> ProxySpec:
        if self.ignore_client_abort and self.kind != "nginx":
            raise ValueError("ignore_client_abort is an nginx setting")
        if self.policy is not None and self.kind != "vllm-router":
            raise ValueError("policy is a vllm-router setting")
        return self


class LateFlag(FrozenModel):
    """A command-line flag of the case's server (``server``) or gateway (``gateway``) whose
    value is a late-bound figure measured in an earlier case, rounded up to a whole number
    (at least 1): an admission limit sized from the run's own measurements."""

    target: Literal["server", "gateway"]
    flag: str = Field(pattern=r"^--[a-z0-9-]+$")
    figure: Measured


class CaseSpec(FrozenModel):
    """One server configuration to run every phase against.

    Exactly one of ``server`` (start vLLM with it) or ``url`` (attach to a running server).
    """

    name: str = Field(pattern=r"^[A-Za-z0-9._-]+$")
    role: Literal["test", "control"] = "test"
    server: ServerConfig | None = None
    url: str | None = None
    #: Human-readable description of the case (e.g. "cache 1GiB, 16 at once").
    label: str = ""
    #: Identical servers started for this case (replica 0 is scraped; faults target others).
    replicas: int = Field(default=1, ge=1, le=4)
    #: A fleet case (docs/fleet.md): every replica is scraped (replica k's files under
    #: ``replicas/K/``), not only replica 0.
    scrape_replicas: bool = False
    #: Empty every replica's prefix cache before the case's first request (vLLM's
    #: ``POST /reset_prefix_cache``, which needs ``VLLM_SERVER_DEV_MODE=1``), so a case that
    #: shares its servers with the case before it starts cold.
    reset_prefix_cache: bool = False
    #: Record every replica's KV-cache events into the case directory (vLLM's ZMQ
    #: publisher, ``loadgen.kvevents.hub``): ``kv_events.jsonl`` per replica.
    record_kv_events: bool = False
    #: Route requests through a gateway in front of the server.
    gateway: GatewaySpec | None = None
    #: Route requests through a third-party proxy instead (nginx, vllm-router).
    proxy: ProxySpec | None = None
    #: Phases of this case only; empty means the plan's shared ``phases``.
    phases: tuple[PhaseSpec, ...] = ()
    #: Flags resolved from earlier cases' measurements just before the case starts.
    late_flags: tuple[LateFlag, ...] = ()

    def sources(self) -> set[str]:
        """Phases (of earlier cases) whose measurements the case's late flags need."""
        return set().union(*(f.figure.phases() for f in self.late_flags))

    def resolved(self, measurements: Measurements) -> tuple[CaseSpec, dict[str, Any] | None]:
        """(the case with its late flags appended to its server's or gateway's arguments,
        what resolving used: flag → the figure's inputs and the value), ``(self, None)``
        when it has none.

        Raises:
            scenarios.late.LateBindingError: a source phase measured nothing usable.
        """
        if not self.late_flags:
            return self, None
        server, gateway = self.server, self.gateway
        record: dict[str, Any] = {}
        for late in self.late_flags:
            value = max(1, math.ceil(late.figure.resolve(measurements)))
            record[late.flag] = {"value": value, "inputs": late.figure.inputs(measurements)}
            args = (late.flag, str(value))
            if late.target == "server":
                assert server is not None  # validated
                server = server.model_copy(update={"extra_args": server.extra_args + args})
            else:
                assert gateway is not None  # validated
                gateway = gateway.model_copy(update={"extra_args": gateway.extra_args + args})
        update = {"server": server, "gateway": gateway, "late_flags": ()}
        return self.model_copy(update=update), record

    @property
    def relay(self) -> GatewaySpec | ProxySpec | None:
        """The relay in front of the case's servers (its gateway or proxy), if any."""
        return self.gateway or self.proxy

    @model_validator(mode="after")
    def _one_proxy(self) -> CaseSpec:
        if self.gateway is not None and self.proxy is not None:
            raise ValueError(f"case {self.name}: a gateway or a proxy, not both")
        for late in self.late_flags:
            if getattr(self, late.target) is None:
                raise ValueError(f"case {self.name}: a late {late.target} flag, no {late.target}")
        return self


#: Default limit of one request, send to last byte (s): far above the longest generation
#: seen here (16 × 512 tokens at once on the CPU vLLM: 88 s), short enough to end a run.
REQUEST_TIMEOUT_S = 3600.0
#: Default stall limit (s): no byte for this long fails the request. A request queued
#: behind a full KV cache gets no byte until its first token (45-90 s here at 16 × 1024/512
#: on 1 GiB), so this stays well above that.
STALL_TIMEOUT_S = 300.0


#: How the load generator's sending thread is scheduled (``loadgen.placement``): ``auto`` =
#: real-time on the cores the server does not compute on, where that is known.
ClientPriority = Literal["auto", "realtime", "normal"]


class Plan(FrozenModel):
    """Everything a run does and expects.

    Attributes:
        scenario: scenario name.
        params: the validated parameters the plan was built from.
        sizing: how the workload was sized from the server (capacity, working sets...).
        scrape_interval_s: ``/metrics`` scrape period in seconds.
        metrics_max_bytes: largest ``/metrics`` answer body the scraper accepts (bytes).
        request_timeout_s: one request's limit from send to last byte, seconds.
        stall_timeout_s: a request with no byte from the server for this long fails as
            ``stalled`` (seconds; also the wait for the headers).
        client_priority: how the sending thread is scheduled (:data:`ClientPriority`).
    """

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
    metrics_max_bytes: int = Field(default=METRICS_MAX_BYTES, gt=0)
    request_timeout_s: float = Field(default=REQUEST_TIMEOUT_S, gt=0)
    stall_timeout_s: float = Field(default=STALL_TIMEOUT_S, gt=0)
    client_priority: ClientPriority = "auto"
    #: Named figures resolved at run time from an earlier phase (e.g. default SLOs): printed
    #: and recorded in ``phases.jsonl`` right after their source phase (``scenarios.late``).
    derived: dict[str, Measured] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _case_names_unique(self) -> Plan:
        names = [c.name for c in self.cases]
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:  # a case's name is its directory: two would write into one
            raise ValueError(f"case name(s) {twice} used more than once")
        return self

    @model_validator(mode="after")
    def _phase_names_unique(self) -> Plan:
        for case in self.cases:
            names = [p.name for p in self.phases_of(case)]
            twice = sorted({n for n in names if names.count(n) > 1})
            if twice:  # a phase's name keys its records, counters and figures
                raise ValueError(f"case {case.name}: phase name(s) {twice} used more than once")
        return self

    @model_validator(mode="after")
    def _sources_run_first(self) -> Plan:
        # A figure's source runs before it: earlier in its case or in an earlier case (the
        # run keeps one set of measurements across its cases, ``loadgen.case.late``).
        earlier: set[str] = set()
        for case in self.cases:
            missing = case.sources() - earlier
            if missing:
                raise ValueError(
                    f"case {case.name}: its late flags depend on {sorted(missing)}, which "
                    "must run in an earlier case"
                )
            seen: list[str] = []
            for phase in self.phases_of(case):
                missing = phase.sources() - set(seen) - earlier
                if missing:
                    raise ValueError(
                        f"case {case.name}: phase {phase.name} depends on {sorted(missing)}, "
                        "which must run before it"
                    )
                seen.append(phase.name)
            for name, figure in self.derived.items():
                if figure.phase not in seen and figure.phase not in earlier:
                    raise ValueError(
                        f"derived figure {name}: case {case.name} has no phase {figure.phase}"
                    )
            earlier |= set(seen)
        return self

    def measured_phases(self) -> set[str]:
        """Phases whose measurements a late-bound figure of the plan needs."""
        named = set().union(*(f.phases() for f in self.derived.values()))
        for case in self.cases:
            named |= case.sources()
            for phase in self.phases_of(case):
                named |= phase.sources()
        return named

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
