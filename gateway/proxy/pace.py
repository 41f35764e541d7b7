"""The delay injector (``GatewayConfig.slowdown``): an answer made exactly (1 + f)× slower on
the client's clock, a known regression to check that a gate catches it.

With t0 the moment the request was sent upstream (``Exchange.started_s``) and t_i the arrival
of upstream chunk i, chunk i is released to the client at

    r_i = max(r_{i−1}, t0 + (1 + f)(t_i − t0)),

so the first chunk's wait (TTFT) and every gap between chunks are (1 + f)× the upstream's, up
to the gateway's own overhead (the max only keeps the order when the event loop is late).

With the scope ``first-token`` only the first chunk is held; the chunks that arrived during its
hold follow it at once and every later one goes at its arrival:

    r_1 = t0 + (1 + f)(t_1 − t0),   r_i = max(r_{i−1}, t_i) for i > 1,

so TTFT is (1 + f)× the upstream's and the answer ends when the upstream's does (unless the
hold outlasts it). A closed loop sends its next request when the last one ends on the
client's clock: stretching every gap lengthens each request by f, and even shifting the
stream by the first token's hold lengthens it by that hold; either lowers the load the server
sees, which shortens the server's own TTFT and takes back part of the slowdown it was meant
to plant. Catching up keeps the loop's sends, so the server sees the same load. The
upstream is read ahead of the client by :class:`ReadAhead`, so a held chunk never delays
reading, and timestamping, the next one: the arrival times are the upstream's, not the hold's.
A buffered (non-streamed) answer is one chunk: held f × (t_end − t0) after its body arrived.

Each slowed request's planned and actual holds go to the holds file (``gateway.events.HoldRow``)
when one is configured. All times are ``time.monotonic()`` seconds.
"""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING

from gateway.events import HoldRow

if TYPE_CHECKING:
    from gateway.proxy.exchange import Exchange


class Pacer:
    """Release times of one slowed answer (module docstring) and what its holds were."""

    def __init__(self, slowdown: float, sent_s: float, first_token_only: bool = False) -> None:
        """``slowdown``: f ≥ 0; ``sent_s``: t0, when the request went upstream (monotonic s);
        ``first_token_only``: the scope ``first-token`` (module docstring)."""
        self.slowdown = slowdown
        self.sent_s = sent_s
        self.first_token_only = first_token_only
        self.first_due_s: float | None = None  # r_1, once the first chunk arrived
        self.released_s = sent_s
        self.chunks = 0
        self.last_arrived_s = sent_s
        self.first: tuple[float, float] | None = None  # (planned, actual) hold, seconds
        self.last: tuple[float, float] = (0.0, 0.0)

    def due_s(self, arrived_s: float) -> float:
        """r_i for a chunk that arrived at ``arrived_s`` (never before the previous release)."""
        if not self.first_token_only:
            return max(self.released_s,
                       self.sent_s + (1 + self.slowdown) * (arrived_s - self.sent_s))  # fmt: skip
        if self.first_due_s is None:  # the first chunk: held
            self.first_due_s = self.sent_s + (1 + self.slowdown) * (arrived_s - self.sent_s)
            return self.first_due_s
        return max(self.released_s, self.first_due_s, arrived_s)

    async def hold(self, arrived_s: float) -> None:
        """Sleep until the chunk that arrived at ``arrived_s`` is due, and note its hold."""
        due_s = self.due_s(arrived_s)
        self.released_s = due_s
        # The event loop may wake a sleep up to its clock resolution early (seen: 1 ms).
        while (wait_s := due_s - time.monotonic()) > 0:
            await asyncio.sleep(wait_s)
        hold = (due_s - arrived_s, time.monotonic() - arrived_s)
        self.chunks += 1
        self.last_arrived_s = arrived_s
        self.first = self.first or hold
        self.last = hold

    def row(self, upstream: str, request_id: str | None, streamed: bool) -> HoldRow | None:
        """The holds-file line of this answer (``None`` when no chunk was released)."""
        if self.first is None:
            return None
        return HoldRow(
            t_ns=time.monotonic_ns(), request_id=request_id, upstream=upstream,
            streamed=streamed, slowdown=self.slowdown, chunks=self.chunks,
            upstream_s=round(self.last_arrived_s - self.sent_s, 6),
            first_planned_s=round(self.first[0], 6), first_actual_s=round(self.first[1], 6),
            last_planned_s=round(self.last[0], 6), last_actual_s=round(self.last[1], 6),
        )  # fmt: skip


def pacer_for(ex: Exchange) -> Pacer | None:
    """The pacer of ``ex``'s answer, ``None`` when the gateway injects no delay."""
    config = ex.state.config
    if config.slowdown <= 0:
        return None
    return Pacer(config.slowdown, ex.started_s, config.slowdown_scope == "first-token")


def record_holds(ex: Exchange, pacer: Pacer | None, streamed: bool) -> None:
    """Append ``pacer``'s hold line to the gateway's holds file, when both exist."""
    holds = ex.state.holds
    row = pacer.row(ex.url, ex.request.headers.get("X-Request-Id"), streamed) if pacer else None
    if holds is not None and row is not None:
        holds.append(row)


class ReadAhead:
    """Reads ``ex``'s upstream body into a queue as it arrives, each chunk with its arrival
    time, while the client side holds earlier chunks. A read error or timeout is queued in
    its place and raised by :meth:`next` after the chunks before it."""

    def __init__(self, ex: Exchange) -> None:
        self._ex = ex
        self._queue: asyncio.Queue[tuple[float, bytes] | Exception] = asyncio.Queue()
        self._task = asyncio.ensure_future(self._run())

    async def _run(self) -> None:
        ex = self._ex
        while True:
            try:
                chunk = await ex.read(ex.timeouts.idle_s, "idle")
            except Exception as exc:  # PhaseTimeout, aiohttp.ClientError: the pump's to judge
                self._queue.put_nowait(exc)
                return
            self._queue.put_nowait((time.monotonic(), chunk))
            if not chunk:
                return

    async def next(self) -> tuple[float, bytes]:
        """(arrival time, chunk) of the next upstream chunk, ``b""`` at the body's end.

        Raises:
            PhaseTimeout, aiohttp.ClientError: what reading the upstream raised.
        """
        item = await self._queue.get()
        if isinstance(item, Exception):
            raise item
        return item

    def close(self) -> None:
        """Stop reading (the exchange ended or the client went away)."""
        self._task.cancel()
