"""Application assembly and lifecycle: ``create_app``, ``running_app``, ``running_gateway``.

Owns the aiohttp ``Application`` (routes, body-size limit, typed state under
:data:`gateway.state.STATE_KEY`), the upstream ``ClientSession`` (opened and closed by
``cleanup_ctx``, with explicit timeouts: aiohttp's default 5-minute total would cut long
generations), and starting/stopping on ``AppRunner`` + ``TCPSite`` with
``handler_cancellation=True`` so that client disconnects cancel handlers.

See docs/gateway.md.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator

import aiohttp
from aiohttp import web

from gateway.config import GatewayConfig
from gateway.health import health_handler
from gateway.proxy.handler import metrics_handler, proxy_handler
from gateway.state import STATE_KEY, GatewayState
from server.net.health import health_client

logger = logging.getLogger(__name__)

PROXIED_ROUTES: tuple[tuple[str, str], ...] = (
    ("POST", "/v1/completions"),
    ("POST", "/v1/chat/completions"),
    ("GET", "/v1/models"),
)


def client_timeout(config: GatewayConfig) -> aiohttp.ClientTimeout:
    """The upstream session's timeout: connect only (s); the proxy enforces the others."""
    connect_s = config.timeouts.connect_s
    return aiohttp.ClientTimeout(
        total=None, connect=connect_s, sock_connect=connect_s, sock_read=None
    )


async def _client_session_ctx(app: web.Application) -> AsyncIterator[None]:
    state = app[STATE_KEY]
    connector = aiohttp.TCPConnector(limit=0, limit_per_host=0)
    state.session = aiohttp.ClientSession(
        connector=connector,
        timeout=client_timeout(state.config),
        # Upstreams are asked for identity; one that encodes anyway (gzip, deflate) is decoded
        # here, so the gateway scans and relays plain events and may append its own error
        # event without mixing encodings in one body (gateway.headers).
        auto_decompress=True,
        trust_env=False,
        # A proxy keeps no cookies: a jar would replay one client's upstream Set-Cookie on
        # every client's later requests (and filtering it costs time on every request).
        cookie_jar=aiohttp.DummyCookieJar(),
    )
    state.health_client = health_client(state.config.health_check_timeout_s)
    try:
        yield
    finally:
        await state.health_client.aclose()
        state.health_client = None
        tasks = list(state.background)
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)
        await state.session.close()
        state.session = None


def create_app(config: GatewayConfig) -> web.Application:
    """Build the gateway application for ``config`` (not started).

    Run it with ``handler_cancellation=True`` (as :func:`running_app` does), otherwise a
    client disconnect during a non-streaming request is only noticed when the answer is written.
    """
    app = web.Application(client_max_size=config.max_body_bytes)
    app[STATE_KEY] = GatewayState.build(config)
    app.cleanup_ctx.append(_client_session_ctx)
    for method, path in PROXIED_ROUTES:
        app.router.add_route(method, path, proxy_handler)
    app.router.add_get("/health", health_handler)
    app.router.add_get("/metrics", metrics_handler)
    return app


@contextlib.asynccontextmanager
async def running_app(
    app: web.Application, host: str = "127.0.0.1", port: int = 0, shutdown_timeout_s: float = 5.0
) -> AsyncIterator[str]:
    """Serve ``app`` on ``host:port`` (0 = a free port) and yield its base URL.

    Stops cleanly on exit: open handlers get ``shutdown_timeout_s`` seconds, then the client
    session and background drains are closed.
    """
    runner = web.AppRunner(
        app, handler_cancellation=True, access_log=None, shutdown_timeout=shutdown_timeout_s
    )
    await runner.setup()
    try:
        site = web.TCPSite(runner, host, port)
        await site.start()
        bound_host, bound_port = runner.addresses[0][:2]
        url_host = f"[{bound_host}]" if ":" in bound_host else bound_host
        url = f"http://{url_host}:{bound_port}"
        logger.info("gateway listening on %s", url)
        yield url
    finally:
        await runner.cleanup()


@contextlib.asynccontextmanager
async def running_gateway(config: GatewayConfig) -> AsyncIterator[str]:
    """Start a gateway for ``config`` on ``config.host:config.port``; yield its base URL."""
    async with running_app(
        create_app(config), config.host, config.port, config.shutdown_timeout_s
    ) as url:
        yield url
