"""Running one phase: dispatch its requests by the arrival pattern, record each, time the phase.

Phase boundaries: start = first request sent; last_end = last request finished. The caller
adds the settle wait. A lag monitor measures how late the event loop wakes up, to show that
nothing (scraping, progress display) stalls the loop that timestamps tokens.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import aiohttp

from loadgen.client import PlannedRequest, Target, send_request
from loadgen.clock import Clock
from loadgen.records import RecordWriter, RequestRecord
from scenarios.arrivals import (
    AllAtOnce,
    ClosedLoop,
    OpenLoop,
    concurrency_limit,
    open_loop_offsets_ns,
)


@dataclass(frozen=True)
class PhaseTiming:
    """Measured boundaries and loop health of a phase (all stamps monotonic ns).

    Attributes:
        start_ns: first request sent.
        last_end_ns: last request finished.
        loop_lag_max_ms / loop_lag_p99_ms: event-loop wake-up lateness over the phase, in ms.
        late_sends: open-loop requests sent more than 10 ms after their scheduled time.
    """

    start_ns: int
    last_end_ns: int
    loop_lag_max_ms: float
    loop_lag_p99_ms: float
    late_sends: int


class LoopLagMonitor:
    """Samples event-loop lag: how much later than asked a ``sleep(interval)`` returns."""

    def __init__(self, clock: Clock, interval_ms: float = 20.0) -> None:
        self._clock = clock
        self._interval_ns = int(interval_ms * 1e6)
        self.lags_ns: list[int] = []
        self._task: asyncio.Task[None] | None = None

    async def _run(self) -> None:
        while True:
            deadline = self._clock.now_ns() + self._interval_ns
            await self._clock.sleep_until_ns(deadline)
            self.lags_ns.append(max(0, self._clock.now_ns() - deadline))

    def __enter__(self) -> LoopLagMonitor:
        self._task = asyncio.get_running_loop().create_task(self._run())
        return self

    def __exit__(self, *exc: object) -> None:
        if self._task is not None:
            self._task.cancel()

    def summary_ms(self) -> tuple[float, float]:
        """(max, p99) lag in ms; (0, 0) when no sample was taken."""
        if not self.lags_ns:
            return 0.0, 0.0
        ordered = sorted(self.lags_ns)
        p99 = ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))]
        return ordered[-1] / 1e6, p99 / 1e6


async def run_phase(
    *,
    case: str,
    phase: str,
    requests: Sequence[PlannedRequest],
    arrival: ClosedLoop | AllAtOnce | OpenLoop,
    target: Target,
    session: aiohttp.ClientSession,
    writer: RecordWriter,
    clock: Clock,
    on_done: Callable[[RequestRecord], None] | None = None,
) -> PhaseTiming:
    """Send ``requests`` with the given arrival pattern; write one record per request.

    Every request's record is written as soon as it finishes, including failed ones and,
    if the phase is cancelled, the interrupted ones (status ``error``).
    """
    n = len(requests)
    limit = concurrency_limit(arrival, n)
    offsets = open_loop_offsets_ns(arrival, n) if isinstance(arrival, OpenLoop) else [0] * n
    gate = asyncio.Semaphore(limit) if limit is not None else None
    phase_start = clock.now_ns()
    late = 0

    async def one(i: int, planned: PlannedRequest) -> RequestRecord:
        nonlocal late
        scheduled = phase_start + offsets[i]
        record = RequestRecord(
            request_id=planned.request_id,
            case=case,
            phase=phase,
            index=i,
            group=planned.group,
            prompt_tokens_sent=len(planned.prompt_token_ids),
            max_tokens=planned.max_tokens,
            scheduled_ns=scheduled,
        )
        try:
            await clock.sleep_until_ns(scheduled)
            if gate is not None:
                await gate.acquire()
            try:
                if clock.now_ns() - scheduled > 10_000_000 and isinstance(arrival, OpenLoop):
                    late += 1
                await send_request(session, target, planned, record, clock)
            finally:
                if gate is not None:
                    gate.release()
        finally:
            writer.write(record)
            if on_done is not None:
                on_done(record)
        return record

    with LoopLagMonitor(clock) as monitor:
        # Closed-loop order: the semaphore admits waiters FIFO, so requests go in list order.
        records = await asyncio.gather(*(one(i, r) for i, r in enumerate(requests)))
    sent = [r.sent_ns for r in records if r.sent_ns is not None]
    ends = [r.end_ns for r in records if r.end_ns is not None]
    lag_max, lag_p99 = monitor.summary_ms()
    return PhaseTiming(
        start_ns=min(sent) if sent else phase_start,
        last_end_ns=max(ends) if ends else clock.now_ns(),
        loop_lag_max_ms=round(lag_max, 3),
        loop_lag_p99_ms=round(lag_p99, 3),
        late_sends=late,
    )
