"""One request forwarded to one upstream: the upstream call, its timeouts, and cancellation.

:class:`Exchange` holds what the relays share: it sends the request, reads the upstream body
under the layered timeouts, answers a failure before anything reached the client, and cuts the
upstream connection. When the client goes away it aborts the upstream work
(``propagate_cancellation``: the connection is closed at once and vLLM aborts the request) or
orphans it (drained in the background, no longer holding an admission slot or counting as in
flight). :mod:`gateway.proxy.forward` drives it.

Timing: every limit is in seconds; time is ``time.monotonic()``.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass

import aiohttp
from aiohttp import web

from gateway.headers import upstream_request_headers
from gateway.proxy.answers import json_error
from gateway.proxy.cancel import close_call, drain
from gateway.proxy.client import ClientWriter
from gateway.proxy.timeouts import PhaseTimeout, within
from gateway.proxy.verdicts import AttemptVerdict
from gateway.state import GatewayState
from gateway.upstreams import Lease

logger = logging.getLogger(__name__)


@dataclass
class RequestOutcome:
    """What the request ended as, for ``gateway_requests_total``."""

    route: str
    upstream: str = ""
    status: int | None = None
    client_gone: bool = False


class Exchange:
    """One request forwarded to one upstream; owns the upstream call and the client response."""

    def __init__(
        self,
        request: web.Request,
        state: GatewayState,
        outcome: RequestOutcome,
        lease: Lease,
        body: bytes,
    ) -> None:
        self.request = request
        self.state = state
        self.outcome = outcome
        self.upstream = lease.upstream
        self.url = lease.upstream.url
        self.body = body
        self.timeouts = state.config.timeouts
        self.started_s = time.monotonic()
        self.deadline_s = self.started_s + self.timeouts.total_s
        self.verdict = AttemptVerdict(lease, state.metrics)
        self.client = ClientWriter(request)
        self.call: asyncio.Task[aiohttp.ClientResponse] | None = None
        self.resp: aiohttp.ClientResponse | None = None
        self.finished_upstream = False
        self.connect_refused = False  # never reached the upstream: safe to retry elsewhere

    async def send(self, streaming: bool) -> web.Response | None:
        """Send the request and wait for the answer's head (``self.resp``; first-token and
        total limits when ``streaming``, total otherwise); on failure return the error answer
        to give the client."""
        request = self.request
        headers = upstream_request_headers(
            request.headers, request.remote, request.headers.get("Host"), request.scheme
        )
        session = self.state.client_session()
        self.call = asyncio.ensure_future(
            session.request(
                request.method,
                self.url + request.rel_url.path_qs,
                data=self.body or None,
                headers=headers,
                allow_redirects=False,
            )
        )
        first_limit_s = self.timeouts.first_token_s if streaming else None
        try:
            self.resp = await within(
                asyncio.shield(self.call),
                first_limit_s,
                "first_token",
                self.deadline_s,
                self.timeouts.total_s,
            )
        except PhaseTimeout as exc:
            return self.fail_before_response(exc.kind + "_timeout", 504, str(exc), exc.kind)
        except aiohttp.ServerTimeoutError:
            msg = f"connect timeout after {self.timeouts.connect_s:g} s"
            return self.fail_before_response("connect_timeout", 504, msg, "connect", abort=False)
        except aiohttp.ClientConnectorError as exc:
            self.connect_refused = True
            logger.warning("cannot connect to %s: %r", self.url, exc.os_error)
            msg = "cannot connect to the upstream"
            return self.fail_before_response("connect_error", 502, msg, None, abort=False)
        except aiohttp.ClientError as exc:
            logger.warning("request to %s failed: %r", self.url, exc)
            msg = "the upstream request failed"
            return self.fail_before_response("upstream_error", 502, msg, None, abort=False)
        return None

    def upstream_response(self) -> aiohttp.ClientResponse:
        """The upstream's answer (its head has arrived)."""
        assert self.resp is not None
        return self.resp

    async def read(self, limit_s: float, kind: str, report_limit_s: float | None = None) -> bytes:
        """The next chunk of the upstream body (``b""`` at its end), waiting ``limit_s`` at most
        and never past the total deadline. Raises :class:`PhaseTimeout` (``report_limit_s``,
        when given, is the limit it names for ``kind``) or ``aiohttp.ClientError``."""
        resp = self.upstream_response()
        try:
            return await within(
                resp.content.readany(), limit_s, kind, self.deadline_s, self.timeouts.total_s
            )
        except PhaseTimeout as exc:
            if exc.kind == kind and report_limit_s is not None:
                raise PhaseTimeout(kind, report_limit_s) from None
            raise

    def fail_before_response(
        self, kind: str, status: int, message: str, timeout: str | None, abort: bool = True
    ) -> web.Response:
        """Record the failure, cut the upstream exchange and answer with a JSON error.

        ``message`` goes to the client and must not name the upstream. ``abort`` says whether
        cutting counts as an upstream abort (the gateway gave up on a live exchange) rather
        than cleaning up after the upstream already failed.
        """
        self.verdict.fail(kind)
        self.abort(kind, count=abort)
        self.outcome.status = status
        err_type = "gateway_timeout" if status == 504 else "bad_gateway"
        if timeout:
            return json_error(status, err_type, message, timeout=timeout)
        return json_error(status, err_type, message)

    def finish_upstream(self) -> None:
        """The upstream body was read to its end: give its connection back."""
        self.finished_upstream = True
        self.upstream_response().release()

    def abort(self, reason: str, count: bool = True) -> None:
        """Close the upstream connection now (the upstream sees a disconnect and aborts)."""
        if self.finished_upstream:
            return
        self.finished_upstream = True
        close_call(self.call)
        if self.resp is not None:
            self.resp.close()
        if count:
            self.state.metrics.upstream_aborts.labels(upstream=self.url, reason=reason).inc()

    def on_client_gone(self) -> None:
        """The client went away: free the probe slot, then abort or orphan the upstream work."""
        self.verdict.no_verdict()
        if self.finished_upstream or self.call is None:
            return
        if self.state.config.propagate_cancellation:
            self.abort("client_disconnect")
            return
        self.finished_upstream = True
        self.state.metrics.orphaned.labels(upstream=self.url).inc()
        logger.info("client went away; orphaning upstream request to %s", self.url)
        self.state.spawn(drain(self.call, self.deadline_s, self.url))
