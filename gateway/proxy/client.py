"""The client side of one exchange: writing the relayed answer and noticing a closed client.

A client that went away is seen through aiohttp's ``handler_cancellation`` (the handler task
is cancelled; :func:`gateway.app.running_app` switches it on) and, as a fallback, here: a write
to a closed client transport raises :class:`ClientGone`.

What reaches the client: upstream headers pass through :func:`relayed_headers` (hop-by-hop
headers stripped, an upstream ``Retry-After`` checked and re-written as delay-seconds, or
dropped when invalid, see :mod:`gateway.retry_after`). Every relayed answer carries
``X-Gateway-Upstream: <upstream URL>``, a diagnostic header of this testbed: the load generator
records it so the analysis can tell which replica served each request (a public gateway would
not expose it).
"""

from __future__ import annotations

import logging
import time
from datetime import UTC, datetime
from typing import Any

import aiohttp
from aiohttp import web

from gateway.headers import client_response_headers
from gateway.proxy.answers import sse_error_event
from gateway.retry_after import format_retry_after, parse_retry_after
from gateway.upstreams import Upstream
from server.net.urls import redact_url

logger = logging.getLogger(__name__)


class ClientGone(Exception):
    """Writing to the client failed because its connection is closed."""


class RelayedStream(web.StreamResponse):
    """A relayed event stream whose status line and headers leave with its first chunk, in one
    write, instead of alone at ``prepare`` (aiohttp's ``web.Response`` does the same for its
    body): the client wakes once for its first token, not twice (headers, then chunk)."""

    _send_headers_immediately = False


class ClientWriter:
    """Writes one streamed answer to the client of ``request``; remembers its last two bytes."""

    def __init__(self, request: web.Request) -> None:
        self.request = request
        self.response: web.StreamResponse | None = None
        self.tail = b"\n\n"

    def _open(self) -> bool:
        transport = self.request.transport
        return transport is not None and not transport.is_closing()

    async def prepare(self, response: web.StreamResponse) -> None:
        """Start answering with ``response``; raises :class:`ClientGone`."""
        self.response = response
        if not self._open():
            raise ClientGone
        try:
            await response.prepare(self.request)
        except ConnectionError as exc:
            raise ClientGone from exc

    async def write(self, data: bytes) -> None:
        """Send ``data``; raises :class:`ClientGone`."""
        assert self.response is not None
        if not self._open():
            raise ClientGone
        try:
            await self.response.write(data)
        except ConnectionError as exc:
            raise ClientGone from exc
        self.tail = (self.tail + data[-2:])[-2:]  # the last two bytes, without copying data

    async def eof(self) -> web.StreamResponse:
        """End the answer; return it. Raises :class:`ClientGone`."""
        assert self.response is not None
        try:
            await self.response.write_eof()
        except ConnectionError as exc:
            raise ClientGone from exc
        return self.response

    async def end_with_error(
        self, status: int, kind: str, message: str, **extra: Any
    ) -> web.StreamResponse:
        """End a started stream with ``data: {"error": {...}}`` on an event boundary."""
        await self.write(sse_error_event(status, kind, message, self.tail, **extra))
        return await self.eof()


def relayed_headers(resp: aiohttp.ClientResponse, upstream: Upstream) -> Any:
    """Client headers for ``upstream``'s answer ``resp``: hop-by-hop stripped, ``Retry-After``
    checked (a valid one on a 429 or 503 is remembered by ``upstream``), and the testbed's
    ``X-Gateway-Upstream``. Returns a ``CIMultiDict``."""
    headers = client_response_headers(resp.headers)
    values = headers.popall("Retry-After", [])
    if values:
        # Several Retry-After fields contradict each other: none is trusted.
        wait_s = parse_retry_after(values[0], datetime.now(UTC)) if len(values) == 1 else None
        if wait_s is None:
            logger.info("dropped invalid Retry-After %r from %s", values, upstream.url)
        else:
            headers["Retry-After"] = format_retry_after(wait_s)
            if resp.status in (429, 503):  # where RFC 9110/6585 give it that meaning
                upstream.note_retry_after(time.monotonic(), wait_s)
    headers["X-Gateway-Upstream"] = redact_url(upstream.url)  # no password to the client
    return headers
