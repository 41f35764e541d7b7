"""Typed per-application state of a gateway, stored under :data:`STATE_KEY`.

Owns the wiring between config, metrics, events file, upstream pool and its router, admission
controller, the shared client session and health-check client (created and closed by the
app's ``cleanup_ctx``) and background drain tasks.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import httpx
from aiohttp import web

from gateway.admission import AdmissionController
from gateway.breaker import Transition
from gateway.config import GatewayConfig
from gateway.events import EventsFile
from gateway.metrics import GatewayMetrics
from gateway.routing import PrefixKeys
from gateway.routing import Router as PolicyRouter
from gateway.upstream_choice import PolicyRouting, Router
from gateway.upstreams import UpstreamPool


@dataclass
class GatewayState:
    """Everything the handlers share; one per application."""

    config: GatewayConfig
    metrics: GatewayMetrics
    pool: UpstreamPool
    router: Router
    admission: AdmissionController
    events: EventsFile | None = None
    decisions: EventsFile | None = None
    #: The delay injector's holds file (only with a slowdown, ``gateway.proxy.pace``).
    holds: EventsFile | None = None
    session: aiohttp.ClientSession | None = None
    #: The client of the live ``/health`` checks of the upstreams (``server.net.health``).
    health_client: httpx.AsyncClient | None = None
    background: set[asyncio.Task[None]] = field(default_factory=set)

    @classmethod
    def build(cls, config: GatewayConfig) -> GatewayState:
        """Create metrics, events files, pool, router and admission controller (no session
        yet).

        Raises ``OSError`` when a configured events file cannot be created.
        """
        metrics = GatewayMetrics()
        for url in config.upstreams:
            metrics.register_upstream(url)
        events = EventsFile(config.events_file) if config.events_file is not None else None

        def on_transition(transition: Transition) -> None:
            metrics.on_breaker_transition(transition)
            if events is not None:
                events.on_breaker_transition(transition)

        pool = UpstreamPool.from_urls(
            config.upstreams,
            config.breaker,
            on_transition=on_transition,
            on_in_flight=lambda url, n: metrics.upstream_in_flight.labels(upstream=url).set(n),
        )
        adm = config.admission
        admission = AdmissionController(
            adm.max_in_flight, adm.max_queue, adm.queue_timeout_s, metrics.on_admission_change
        )
        keys = PrefixKeys(
            prefix_blocks=config.routing_prefix_blocks, prefix_chars=config.routing_prefix_chars
        )
        policy = PolicyRouter(
            config.routing, len(config.upstreams), epsilon=config.routing_epsilon, keys=keys
        )
        router = Router(pool, PolicyRouting(policy))
        decisions = EventsFile(config.decisions_file) if config.decisions_file else None
        holds = None
        if config.holds_file is not None and config.slowdown > 0:
            holds = EventsFile(config.holds_file)
        return cls(config, metrics, pool, router, admission, events, decisions, holds=holds)

    def client_session(self) -> aiohttp.ClientSession:
        """The upstream client session; only valid while the app runs."""
        if self.session is None:
            raise RuntimeError("gateway client session is not open (app not started)")
        return self.session

    def checks_client(self) -> httpx.AsyncClient:
        """The client of the upstreams' live ``/health`` checks; only valid while the app runs."""
        if self.health_client is None:
            raise RuntimeError("gateway health-check client is not open (app not started)")
        return self.health_client

    def spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        """Run a background coroutine, keeping a reference until it ends."""
        task = asyncio.create_task(coro)
        self.background.add(task)
        task.add_done_callback(self.background.discard)


STATE_KEY: web.AppKey[GatewayState] = web.AppKey("gateway_state", GatewayState)
