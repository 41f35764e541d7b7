"""Is the server under load still there? Health probes during and after each phase.

A managed server that dies is seen by its exit code; an attached one (``--url``) only by not
answering. Without a check, a run against a dead attached server sends every remaining phase
into refused connections and still ends ``ok``. :class:`ServerWatch` probes ``GET /health``
after a request that lost its connection (one probe at a time) and after each phase; when the
server is gone it stops the phase and the caller fails the case with :class:`ServerGone`.
"""

from __future__ import annotations

import asyncio
from typing import Any

from loadgen.records import RequestRecord
from loadgen.runformat.rows import NOT_CONNECTED
from server.manager import RunningServer
from server.net.health import NotHealthy, wait_healthy

#: Health probe: attempts, each bounded by a timeout, with a pause between them (seconds).
#: vLLM answers /health from its API server's event loop, which stays responsive under
#: load; three misses over ~10 s are a server that is gone, not a busy one.
PROBE_ATTEMPTS = 3
PROBE_TIMEOUT_S = 3.0
PROBE_GAP_S = 0.5

#: At most one probe per this many seconds during a phase (a healthy server answers at once;
#: without a pause, a run of failures would probe it back to back).
PROBE_EVERY_S = 1.0

#: Errors of a response that broke off: the server's side of the connection went away.
_BROKEN = ("ClientPayloadError", "ServerDisconnectedError", "ClientOSError")


class ServerGone(RuntimeError):
    """The server stopped answering (or its process exited) while the case ran."""


def lost_connection(record: RequestRecord) -> bool:
    """Whether ``record`` failed the way requests to a dead server fail: no connection
    (``not_sent`` with ``NOT_CONNECTED``), no HTTP answer at all (reset, no headers), or a
    stream that broke off."""
    if record.status == "not_sent":
        return record.error is not None and record.error.startswith(NOT_CONNECTED)
    if record.status != "error" or record.error is None:
        return False
    return record.http_status is None or record.error.startswith(_BROKEN)


async def server_answers(
    url: str,
    attempts: int = PROBE_ATTEMPTS,
    timeout_s: float = PROBE_TIMEOUT_S,
    gap_s: float = PROBE_GAP_S,
) -> bool:
    """Whether ``url/health`` is healthy (``server.net.health``) within ``attempts`` checks,
    each bounded by ``timeout_s`` seconds, ``gap_s`` seconds apart."""
    try:
        await wait_healthy(url, attempts=attempts, every_s=gap_s, check_timeout_s=timeout_s)
    except NotHealthy:
        return False
    return True


class ServerWatch:
    """Watches ``server`` during phase ``phase``.

    Feed every finished record to :meth:`note`; after one that lost its connection a probe
    runs (never two at once), and if the server is gone, ``gone`` says why and the task given
    to :meth:`guard` (the phase) is cancelled. :meth:`verdict` probes once, on demand.
    """

    def __init__(self, server: RunningServer, phase: str) -> None:
        self.server = server
        self.phase = phase
        self.gone: str | None = None
        self._guarded: asyncio.Future[Any] | None = None
        self._probe: asyncio.Task[None] | None = None
        self._last_probe_s = -PROBE_EVERY_S

    def guard(self, task: asyncio.Future[Any]) -> None:
        """Cancel ``task`` when the server is found gone."""
        self._guarded = task

    def note(self, record: RequestRecord) -> None:
        """A request finished; probe the server if it lost its connection."""
        if lost_connection(record):
            self.note_failure()

    def note_failure(self) -> None:
        """A request failed in a way that may mean the server is gone (workers report counts,
        not records): probe, unless one runs or ran less than :data:`PROBE_EVERY_S` ago."""
        loop = asyncio.get_running_loop()
        if self.gone is not None or self._probe is not None:
            return
        if loop.time() - self._last_probe_s < PROBE_EVERY_S:
            return
        self._last_probe_s = loop.time()
        self._probe = loop.create_task(self._check())

    async def _check(self) -> None:
        try:
            reason = await self.verdict()
            if reason is not None:
                self.gone = reason
                if self._guarded is not None:
                    self._guarded.cancel()
        finally:
            self._probe = None

    async def verdict(self) -> str | None:
        """Why the server is gone (process exited, or ``/health`` unanswered), else ``None``.

        The exit code is read again after an unanswered probe: a killed server closes its
        port before its process has finished exiting, so the probe can fail first, and the
        exit is the more precise cause.
        """
        code = self.server.exit_code()
        if code is None and not await server_answers(self.server.url):
            code = self.server.exit_code()
            if code is None:
                return f"server at {self.server.url} stopped answering during phase {self.phase}"
        if code is not None:
            return f"vLLM exited with code {code} during phase {self.phase}"
        return None

    def close(self) -> None:
        """Stop a probe still running."""
        if self._probe is not None:
            self._probe.cancel()
