"""What a case starts: its servers, the scraper, and the relay in front of the servers.

A case runs against N identical servers: replica 0 is the case's server (started or attached
by the run, shared by consecutive cases of one config, scraped, watched), replicas 1…N−1 are
started for the case (``loadgen.replicas``, where faults are injected). Its requests go to
replica 0, or to the one relay the case names (the project's gateway, nginx, vllm-router:
``loadgen.proxies``) in front of every replica. The helper processes (scraper, relay) are
pinned off the servers' cores from the start (``loadgen.placement``); the load is sent only
after the first scrape and two more scrapes of baseline.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass, field
from pathlib import Path

from loadgen.case.fleet import reset_prefix_caches, start_replica_scrapers, write_fleet_file
from loadgen.case.hooks import RunHooks
from loadgen.case.request_logs import mark_request_logs
from loadgen.client import Target
from loadgen.kvevents.hub import KvEventHub
from loadgen.placement import Placement, pin_helpers, placement_for_servers
from loadgen.proxies import running_relay_for
from loadgen.proxies.relay import Relay
from loadgen.replicas import Replicas, SharedReplicas
from loadgen.runformat.atomic import write_error_under
from metrics.scraper import ScraperProcess
from scenarios.plan import CaseSpec, GatewaySpec, Plan, ProxySpec
from server.cpus import ServerHost
from server.manager import RunningServer, attach, start_server


async def open_server(
    case: CaseSpec, workdir: Path, hooks: RunHooks, kv_events: KvEventHub | None = None
) -> RunningServer:
    """Start (``case.server``) or attach to (``case.url``) the case's server; a case that
    records KV-cache events gets replica 0's recorder of ``kv_events`` (when given).

    Raises:
        RunWriteError: a file of the server's ``workdir`` (its log, command, facts) could not
            be written: a failed write of the run, not a server that failed to start.
        Exception: whatever ``server.manager.start_server`` / ``attach`` raise.
    """
    if case.url is not None:
        return await attach(case.url)
    if case.server is None:
        raise ValueError(f"case {case.name} has neither a server config nor a URL")
    config = case.server
    if case.record_kv_events and kv_events is not None:
        config = kv_events.config_for(config, 0)
    try:
        return await start_server(config, workdir, on_status=hooks.on_server_status)
    except OSError as exc:
        written = write_error_under(exc, workdir)
        if written is not None:
            raise written from exc
        raise


@dataclass
class CaseServers:
    """A case's servers: replica 0 (``main``) and replicas 1…n−1 (``None`` when the case
    attaches to a URL: nothing to start more of)."""

    main: RunningServer
    replicas: Replicas | None

    def urls(self) -> list[str]:
        """Every replica's base URL, replica 0 first."""
        return [self.main.url, *(self.replicas.urls() if self.replicas else [])]

    def logs(self) -> list[Path | None]:
        """Every replica's vLLM log, replica 0 first (``None`` for one attached to)."""
        others = self.replicas.servers if self.replicas else {}
        return [self.main.log_path, *(others[k].log_path for k in sorted(others))]

    def hosts(self) -> list[ServerHost | None]:
        """Where each replica computes (``loadgen.placement.placement_for_servers``)."""
        others = self.replicas.servers.values() if self.replicas else ()
        return [self.main.host, *(r.host for r in others)]


@dataclass
class CaseStart:
    """What a started case sends to and how its helpers were placed.

    Attributes:
        servers: its replicas.
        target: where its requests go (the relay, else replica 0).
        placement: the cores and priority its sending threads get.
        helpers_problem: why a helper could not be pinned, else ``None``.
        relays: the processes its requests cross (none, or its one relay).
    """

    servers: CaseServers
    target: Target
    placement: Placement
    helpers_problem: str | None
    relays: list[Relay] = field(default_factory=list)


def start_scraper(plan: Plan, server: RunningServer, cdir: Path) -> ScraperProcess:
    """The case's scraper of replica 0's ``/metrics``, started (its files in ``cdir``)."""
    scraper = ScraperProcess(
        server.url, cdir, plan.scrape_interval_s, max_bytes=plan.metrics_max_bytes
    )
    scraper.start()
    return scraper


async def start_case(
    stack: contextlib.AsyncExitStack,
    plan: Plan,
    case: CaseSpec,
    server: RunningServer,
    cdir: Path,
    scraper: ScraperProcess,
    shared: SharedReplicas,
) -> CaseStart:
    """Take the case's replicas 1…n−1 from ``shared`` (kept from the case before when it had
    the same config, else started), start its relay (stopped by ``stack``), pin the scraper
    and the relay off the servers' cores, and wait for the first scrape and two more of
    baseline. A fleet case (``scrape_replicas``, ``reset_prefix_cache``) also gets a scraper
    per replica and starts with every prefix cache empty (``loadgen.case.fleet``); one that
    records KV-cache events has every replica's recorder write into ``cdir`` from then on,
    and the lines each replica's vLLM logs until the case ends copied into ``cdir`` when
    ``stack`` closes (``loadgen.case.request_logs``).

    Raises:
        ValueError: replicas of a case that attaches to a URL.
        RuntimeError: a replica or the relay did not start, or no scrape succeeded.
        CacheResetError: a replica's prefix cache could not be emptied.
    """
    replicas: Replicas | None = None
    if case.replicas > 1:
        if case.server is None:
            raise ValueError(f"case {case.name}: replicas need a server config, not a URL")
        replicas = await shared.for_case(case.server, case.replicas, cdir, case.record_kv_events)
    else:
        await shared.stop()
    servers = CaseServers(server, replicas)
    if case.record_kv_events and shared.kv_events is not None:
        shared.kv_events.record_into(cdir)  # before the reset: its cleared event opens the file
    if case.reset_prefix_cache:
        await reset_prefix_caches(servers.urls())
    if case.record_kv_events and shared.kv_events is not None:
        stack.callback(mark_request_logs(servers.logs()).copy_into, cdir)
    if case.scrape_replicas:
        write_fleet_file(cdir, case, servers.urls())
    placement = placement_for_servers(plan.client_priority, servers.hosts())
    # Helpers keep off the server's cores from the start: the first scrape is awaited
    # next, and a process left on the worker's busy core can wait there for many seconds.
    problems = [pin_helpers([scraper.pid] if scraper.pid else [], placement)]
    started = CaseStart(servers, Target(server.url, server.model_name), placement, None)
    if case.relay is not None:
        spec = _with_kv_event_sources(case, servers, shared)
        relay = await stack.enter_async_context(running_relay_for(spec, servers.urls(), cdir))
        started.target = Target(relay.url, server.model_name)
        problems.append(pin_helpers([relay.pid], placement))
        started.relays.append(relay)
    if case.scrape_replicas:
        others = await start_replica_scrapers(stack, plan, servers.urls()[1:], cdir)
        problems.append(pin_helpers([s.pid for s in others if s.pid], placement))
    started.helpers_problem = "; ".join(p for p in problems if p) or None
    await _baseline_scrapes(plan, server, cdir, scraper)
    return started


def _with_kv_event_sources(
    case: CaseSpec, servers: CaseServers, shared: SharedReplicas
) -> GatewaySpec | ProxySpec:
    """The case's relay; vllm-router's ``kv_aware`` given where each replica's KV-cache events
    are passed on (``loadgen.kvevents``).

    Raises:
        RuntimeError: ``kv_aware`` without every replica's events recorded.
    """
    relay = case.relay
    assert relay is not None
    if not isinstance(relay, ProxySpec) or relay.policy != "kv_aware":
        return relay
    hub = shared.kv_events if case.record_kv_events else None
    endpoints = hub.republished(len(servers.urls())) if hub is not None else None
    if endpoints is None:
        raise RuntimeError(f"case {case.name}: kv_aware needs every replica's KV-cache events")
    block = servers.main.capacity.block_size if servers.main.capacity else None
    return relay.model_copy(update={
        "kv_event_sources": tuple(zip(servers.urls(), endpoints, strict=True)),
        "kv_event_model": servers.main.model_name, "kv_event_block_size": block,
    })  # fmt: skip


async def _baseline_scrapes(
    plan: Plan, server: RunningServer, cdir: Path, scraper: ScraperProcess
) -> None:
    """Wait for the first successful scrape, then two scrape intervals of baseline.

    Raises:
        RuntimeError: no scrape succeeded (without samples no counter delta can be computed).
    """
    if not await asyncio.to_thread(scraper.wait_first_scrape):
        raise RuntimeError(
            scraper.failure
            or f"no successful /metrics scrape from {server.url} (errors in {cdir}/metrics)"
        )
    await asyncio.sleep(2 * plan.scrape_interval_s)
