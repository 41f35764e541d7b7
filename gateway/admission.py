"""Admission control: a bounded number of in-flight requests and a bounded FIFO queue.

Owns the decision "run now, wait, or reject". A request runs at once when fewer than
``max_in_flight`` requests run and nobody waits; otherwise it waits in a queue of at most
``max_queue`` waiters for up to ``queue_timeout_s`` seconds. Overflow and queue timeouts raise
:class:`AdmissionRejected`, which the proxy turns into 429 with ``Retry-After``.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable
from contextlib import suppress


class AdmissionRejected(Exception):
    """No slot: the queue was full (``reason="queue_full"``) or the wait timed out."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class AdmissionController:
    """Counts in-flight requests and queued waiters; hands slots over in FIFO order."""

    def __init__(
        self,
        max_in_flight: int,
        max_queue: int,
        queue_timeout_s: float,
        on_change: Callable[[int, int], None] | None = None,
    ) -> None:
        """``on_change(in_flight, queued)`` is called after every change (for gauges)."""
        self._max_in_flight = max_in_flight
        self._max_queue = max_queue
        self._queue_timeout_s = queue_timeout_s
        self._on_change = on_change
        self._in_flight = 0
        self._waiters: deque[asyncio.Future[None]] = deque()

    @property
    def in_flight(self) -> int:
        """Requests holding a slot."""
        return self._in_flight

    @property
    def queued(self) -> int:
        """Requests waiting for a slot."""
        return len(self._waiters)

    async def acquire(self) -> None:
        """Take a slot, waiting in the queue if needed; raise :class:`AdmissionRejected`."""
        if self._in_flight < self._max_in_flight and not self._waiters:
            self._in_flight += 1
            self._changed()
            return
        if len(self._waiters) >= self._max_queue:
            raise AdmissionRejected("queue_full")
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        self._changed()
        try:
            await asyncio.wait_for(asyncio.shield(waiter), self._queue_timeout_s)
        except BaseException as exc:
            if waiter.done() and not waiter.cancelled():
                # The slot was handed over just as we gave up: pass it on.
                self.release()
            else:
                waiter.cancel()
                self._remove(waiter)
            if isinstance(exc, TimeoutError):
                raise AdmissionRejected("queue_timeout") from None
            raise

    def release(self) -> None:
        """Give a slot back; the oldest waiter (if any) inherits it."""
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                self._changed()
                return
        self._in_flight -= 1
        self._changed()

    def _remove(self, waiter: asyncio.Future[None]) -> None:
        with suppress(ValueError):
            self._waiters.remove(waiter)
        self._changed()

    def _changed(self) -> None:
        if self._on_change is not None:
            self._on_change(self._in_flight, len(self._waiters))
