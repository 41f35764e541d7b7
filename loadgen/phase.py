"""Running one phase: warm the pool, dispatch requests by the arrival pattern, record, time.

Phase boundaries: start = first request sent; last_end = last request finished. The caller
adds the settle wait. A lag monitor measures how late the event loop wakes up, to show that
nothing (scraping, progress display) stalls the loop that timestamps tokens.

Memory stays bounded by the requests in flight, not the phase length: closed-loop and
all-at-once phases run C workers that pull the next request index; an open-loop phase runs one
scheduler that starts each request's task at its time. A request's prompt is built when it is
sent, and its record is written (and dropped) when it finishes.
"""

from __future__ import annotations

import array
import asyncio
import contextlib
import gc
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import aiohttp

from loadgen.client import PlannedRequest, Target, send_request
from loadgen.clock import Clock
from loadgen.connections import WarmUp, warm_up
from loadgen.records import RecordWriter, RequestRecord
from loadgen.runformat import RunWriteError
from scenarios.arrivals import Arrival, ArrivalPattern
from scenarios.partition import WorkerShare, partition_phase
from scenarios.requests import PhaseRequests

#: The ``error`` of a request the user's Ctrl-C or SIGTERM cut (status ``interrupted``).
INTERRUPTED_ERROR = "interrupted before completion (Ctrl-C or SIGTERM)"

#: An open-loop send later than this after its scheduled time counts as late.
LATE_NS = 10_000_000
#: At most this many connections are warmed up before a phase (file descriptors, and a
#: warm-up of thousands of requests would be a load of its own).
WARMUP_MAX_CONNECTIONS = 256
#: An uncapped open loop warms up the connections its first this-many seconds of arrivals
#: need (its in-flight count is not known before it runs); later ones connect when needed
#: and say so in ``new_connection``.
OPEN_LOOP_WARMUP_S = 1.0


@dataclass(frozen=True)
class PhaseTiming:
    """Measured boundaries, loop health and connection warm-up of a phase.

    Attributes:
        start_ns: first request sent (monotonic ns).
        last_end_ns: last request finished (monotonic ns).
        loop_lag_max_ms / loop_lag_p99_ms: event-loop wake-up lateness over the phase, in ms.
        late_sends: open-loop requests whose scheduler woke more than 10 ms after their
            scheduled time (waiting for a ``max_concurrency`` slot is not lateness; it is in
            the records' ``admitted_ns``).
        warmup_connections: connections held open at once before the phase.
        warmup_opened: how many of them were newly connected (``None`` without tracing).
        warmup_failed: warm-up requests without an HTTP answer.
        warmup_ms: duration of the warm-up, ms (before ``start_ns``).
        dispatched: requests handed to a sender (all of them, unless a closed loop's
            ``duration_s`` ended the sending first or the phase was cut short).
    """

    start_ns: int
    last_end_ns: int
    loop_lag_max_ms: float
    loop_lag_p99_ms: float
    late_sends: int
    warmup_connections: int = 0
    warmup_opened: int | None = None
    warmup_failed: int = 0
    warmup_ms: float = 0.0
    dispatched: int = 0


class LoopLagMonitor:
    """Samples event-loop lag: how much later than asked a ``sleep(interval)`` returns."""

    def __init__(self, clock: Clock, interval_ms: float = 20.0) -> None:
        self._clock = clock
        self._interval_ns = int(interval_ms * 1e6)
        self.lags_ns = array.array("q")  # 8 bytes a sample: 50 samples/s for hours
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


@contextlib.contextmanager
def heap_frozen() -> Iterator[None]:
    """Collect garbage, then keep every surviving object out of collections while the block
    runs (``gc.freeze``), and hand them back after it (``gc.unfreeze``).

    A full collection walks every tracked object: the ~130,000 a run has imported took 62 ms
    here, a 62 ms stall of the loop that stamps sends and tokens whenever the collector chose
    to run one mid-phase. Frozen, they are skipped; the phase's own objects are few. Every
    process that sends a phase (the run's own, each worker) wraps the phase in it.
    """
    gc.collect()
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


def warmup_connections(arrival: ArrivalPattern, n: int) -> int:
    """Connections to open before a phase of ``n`` requests: as many as it will have in
    flight (its concurrency; an open loop's cap, or else its first second of arrivals; a
    trace's timed requests due in its first second), at most :data:`WARMUP_MAX_CONNECTIONS`."""
    limit = arrival.in_flight_at_start(n, OPEN_LOOP_WARMUP_S)
    return max(0, min(limit, n, WARMUP_MAX_CONNECTIONS))


def share_warmup_connections(share: WorkerShare) -> int:
    """Connections a worker opens before its share of a phase: its concurrency, or (uncapped
    open loop) its arrivals in the first :data:`OPEN_LOOP_WARMUP_S`, at most
    :data:`WARMUP_MAX_CONNECTIONS`."""
    if share.concurrency is not None:
        limit = share.concurrency
    else:
        limit = sum(1 for t in share.offsets_ns or () if t < OPEN_LOOP_WARMUP_S * 1e9)
    return max(0, min(limit, len(share.indices), WARMUP_MAX_CONNECTIONS))


class _Dispatch:
    """The shared state of one phase's dispatch: records in, timing figures out.

    Requests are dispatched in the order of ``order`` (request indices: every index of the
    phase for a single process, a worker's share otherwise); ``dispatched`` is how many of
    them were handed to a sender and ``in_flight`` holds the records of those not finished
    yet, so on cancellation the requests never sent are known.
    """

    def __init__(
        self,
        *,
        case: str,
        phase: str,
        requests: PhaseRequests,
        order: Sequence[int],
        target: Target,
        session: aiohttp.ClientSession,
        writer: RecordWriter,
        clock: Clock,
        on_done: Callable[[RequestRecord], None] | None,
        cut_reason: Callable[[], str | None] | None = None,
    ) -> None:
        self.case, self.phase, self.requests, self.order = case, phase, requests, order
        self.target, self.session, self.writer, self.clock = target, session, writer, clock
        self.on_done = on_done
        self.cut_reason = cut_reason
        #: A record write that failed: the senders it cut were cut by the run's failure.
        self.write_failed: str | None = None
        self.dispatched = 0
        #: Positions (in ``order``) handed to a sender; a trace's session turns are handed
        #: out of order, so the unsent ones are those not in here.
        self.admitted: set[int] = set()
        self.in_flight: dict[int, RequestRecord] = {}
        self.late = 0
        self.first_sent_ns: int | None = None
        self.last_end_ns: int | None = None

    def record(self, i: int, scheduled_ns: int) -> RequestRecord:
        """A fresh (``not_sent``) record for request ``i``, from its header only."""
        header = self.requests.header(i)
        return RequestRecord(
            request_id=header.request_id,
            case=self.case,
            phase=self.phase,
            index=i,
            group=header.group,
            prompt_tokens_sent=header.prompt_tokens,
            max_tokens=header.max_tokens,
            scheduled_ns=scheduled_ns,
        )

    def admit(self, position: int, scheduled_ns: int, admitted_ns: int) -> RequestRecord:
        """Hand the request at ``position`` of the order to a sender: its record exists (and
        will be written) from now."""
        i = self.order[position]
        record = self.record(i, scheduled_ns)
        record.admitted_ns = admitted_ns
        self.in_flight[i] = record
        self.admitted.add(position)
        self.dispatched = len(self.admitted)
        return record

    def finish(self, record: RequestRecord, flush: bool = True) -> None:
        """Write the record, fold it into the phase's figures, tell the caller."""
        self.in_flight.pop(record.index, None)
        try:
            self.writer.write(record, flush=flush)
        except RunWriteError as exc:
            self.write_failed = self.write_failed or str(exc)
            raise
        if record.sent_ns is not None and (
            self.first_sent_ns is None or record.sent_ns < self.first_sent_ns
        ):
            self.first_sent_ns = record.sent_ns
        if record.end_ns is not None and (
            self.last_end_ns is None or record.end_ns > self.last_end_ns
        ):
            self.last_end_ns = record.end_ns
        if self.on_done is not None:
            self.on_done(record)

    async def send(self, record: RequestRecord) -> None:
        """Build the request's prompt, send it, write its record (also when cancelled)."""
        try:
            # No local name for the built request: send_request drops it once encoded.
            await send_request(
                self.session, self.target, self.requests[record.index], record, self.clock
            )
        except asyncio.CancelledError:
            self.label_cut(record)
            raise
        finally:
            self.finish(record)

    def label_cut(self, record: RequestRecord) -> None:
        """Say honestly why a request in flight was cut: by its server's death (``error``
        "cut short: REASON", the reason ``cut_reason`` gives), by a record write that failed
        (``error``, "cut short: the run failed: …"), or else by the user (``interrupted``,
        not a failure of the server). A request cancelled before it was sent stays
        ``not_sent``."""
        if record.sent_ns is None:
            return
        reason = self.cut_reason() if self.cut_reason is not None else None
        if reason is None and self.write_failed is not None:
            reason = f"the run failed: {self.write_failed}"
        if reason is not None:
            record.status, record.error = "error", f"cut short: {reason}"
        else:
            record.status, record.error = "interrupted", INTERRUPTED_ERROR

    def account_unsent(self, scheduled_ns: Callable[[int], int], planned: int) -> None:
        """A cut-short phase: every request never sent gets its ``not_sent`` record
        (``scheduled_ns`` maps a position of the order to its scheduled time).

        Those are the requests admitted but cancelled before their task ever ran, and every
        request after the last one admitted, up to ``planned`` (a closed loop with a duration
        plans only the requests it sent; its workload count is just an upper bound).
        """
        for record in sorted(self.in_flight.values(), key=lambda r: r.index):
            self.finish(record, flush=False)
        for position in range(planned):
            if position not in self.admitted:
                self.finish(self.record(self.order[position], scheduled_ns(position)), flush=False)
        self.writer.flush()

    async def closed_loop(
        self,
        phase_start: int,
        workers: int,
        stop_ns: int | None,
        start_offset_ns: Callable[[int], int] = lambda k: 0,
    ) -> None:
        """``workers`` senders, each taking the next index when its request finishes; sender
        k starts at ``phase_start + start_offset_ns(k)``; no index is taken at or after
        ``stop_ns`` (a closed loop's duration)."""

        def more() -> bool:
            if stop_ns is not None and self.clock.now_ns() >= stop_ns:
                return False
            return self.dispatched < len(self.order)

        async def worker(k: int) -> None:
            if start_offset_ns(k):
                await self.clock.sleep_until_ns(phase_start + start_offset_ns(k))
            while more():
                await self.send(self.admit(self.dispatched, phase_start, self.clock.now_ns()))

        async with asyncio.TaskGroup() as group:
            for k in range(workers):
                group.create_task(worker(k))

    async def trace(
        self, phase_start: int, offsets: Sequence[int], arrival: ArrivalPattern
    ) -> None:
        """A trace with session turns: the timed requests on the open loop's absolute
        schedule (``offsets``, by position), each session turn ``arrival.delay_ns`` after the
        END of the turn it follows (its ``scheduled_ns``; lateness is sent − that).

        Only for a single process (``order`` is every index): a turn's sender must see the
        end of the turn before it.
        """
        position_of = {index: position for position, index in enumerate(self.order)}
        followers: dict[int, list[int]] = {}
        for index in self.order:
            before = arrival.follows_turn(index)
            if before is not None:
                followers.setdefault(before, []).append(index)

        async with asyncio.TaskGroup() as group:

            async def turn(index: int, scheduled: int) -> None:
                if scheduled > self.clock.now_ns():
                    await self.clock.sleep_until_ns(scheduled)
                if self.clock.now_ns() - scheduled > LATE_NS:
                    self.late += 1
                record = self.admit(position_of[index], scheduled, scheduled)
                await self.send(record)
                ended = record.end_ns if record.end_ns is not None else self.clock.now_ns()
                for nxt in followers.get(index, ()):
                    group.create_task(turn(nxt, ended + arrival.delay_ns(nxt)))

            for position, index in enumerate(self.order):
                if arrival.follows_turn(index) is not None:
                    continue
                scheduled = phase_start + offsets[position]
                await self.clock.sleep_until_ns(scheduled)
                group.create_task(turn(index, scheduled))

    async def open_loop(self, phase_start: int, offsets: Sequence[int], cap: int | None) -> None:
        """One scheduler: sleep until start + offset (absolute), then start request i.

        With a cap it first waits for a free slot (FIFO, as vLLM bench's semaphore), so
        later arrivals queue behind it; ``admitted_ns`` records when the slot came.
        """
        gate = asyncio.Semaphore(cap) if cap is not None else None
        held_until = 0  # when the scheduler last got a slot it had to wait for

        async def capped(record: RequestRecord) -> None:
            try:
                await self.send(record)
            finally:
                assert gate is not None
                gate.release()

        async with asyncio.TaskGroup() as group:
            for i in range(len(self.order)):
                scheduled = phase_start + offsets[i]
                await self.clock.sleep_until_ns(scheduled)
                if self.clock.now_ns() - max(scheduled, held_until) > LATE_NS:
                    self.late += 1
                if gate is None:
                    group.create_task(self.send(self.admit(i, scheduled, scheduled)))
                    continue
                waited = gate.locked()
                await gate.acquire()
                admitted = self.clock.now_ns()
                if waited:
                    held_until = admitted
                group.create_task(capped(self.admit(i, scheduled, admitted)))


async def run_phase(
    *,
    case: str,
    phase: str,
    requests: Sequence[PlannedRequest],
    arrival: Arrival,
    target: Target,
    session: aiohttp.ClientSession,
    writer: RecordWriter,
    clock: Clock,
    on_done: Callable[[RequestRecord], None] | None = None,
    warmup: bool = True,
    share: WorkerShare | None = None,
    start_at_ns: int | None = None,
    cut_reason: Callable[[], str | None] | None = None,
) -> PhaseTiming:
    """Warm the pool, send ``requests`` with the given arrival pattern, one record each.

    ``requests`` is best a lazy :class:`~scenarios.workloads.PhaseRequests` (prompts built at
    send time); a plain sequence works too. Every request's record is written as soon as it
    finishes, including failed ones. If the phase is cancelled, every request already sent
    gets its record and every request not yet sent a ``not_sent`` record, so each planned
    request is accounted for; a request in flight is ``interrupted`` (the user's Ctrl-C or
    SIGTERM), or ``error`` "cut short: REASON" when ``cut_reason()`` gives a reason then
    (the caller cancelled the phase because its server died). A closed loop
    with ``duration_s`` sends no request once that long has passed since the phase start;
    the requests it never reached are not part of the phase (no record).

    A worker of a phase split across several (``scenarios.partition``) passes its ``share``
    (which requests, offsets, concurrency) and ``start_at_ns``, the phase start shared by all
    workers on ``clock``; it waits until then (after the warm-up) and schedules from it.
    Without them the phase is sent whole and starts when the warm-up ends.

    Raises:
        RunWriteError: a record could not be written (the first one, not a task group).
    """
    plan = PhaseRequests.of(requests)
    n = len(plan)
    warm = None
    if warmup:
        count = warmup_connections(arrival, n) if share is None else share_warmup_connections(share)
        warm = await warm_up(session, target.url, count, clock)
    share = share if share is not None else partition_phase(arrival, n, 1)[0]
    dispatch = _Dispatch(
        case=case, phase=phase, requests=plan, order=share.indices, target=target,
        session=session, writer=writer, clock=clock, on_done=on_done, cut_reason=cut_reason,
    )  # fmt: skip
    offsets = share.offsets_ns
    phase_start = start_at_ns if start_at_ns is not None else clock.now_ns()
    try:
        if start_at_ns is not None:
            await clock.sleep_until_ns(start_at_ns)
        with LoopLagMonitor(clock) as monitor:
            await _dispatch_all(dispatch, arrival, share, phase_start)
    except BaseExceptionGroup as group:
        # A sender's record write failed inside the task group: the one error to report.
        written = group.subgroup(RunWriteError)
        if written is None:
            raise
        raise _first_leaf(written) from None
    finally:
        planned = dispatch.dispatched if arrival.ends_on_time else len(share.indices)
        if dispatch.in_flight or dispatch.dispatched < planned:
            dispatch.account_unsent(lambda p: phase_start + (offsets[p] if offsets else 0), planned)
    return _timing(dispatch, monitor, warm, phase_start, clock)


async def _dispatch_all(
    dispatch: _Dispatch, arrival: ArrivalPattern, share: WorkerShare, phase_start: int
) -> None:
    """Send the share as its pattern says: session turns after the turns they follow, timed
    requests at their offsets, else C senders each taking the next request (until the
    pattern's time limit)."""
    offsets = share.offsets_ns
    if arrival.has_sessions:
        assert offsets is not None
        await dispatch.trace(phase_start, offsets, arrival)
    elif arrival.timed:
        assert offsets is not None
        await dispatch.open_loop(phase_start, offsets, share.concurrency)
    else:
        assert share.concurrency is not None
        limit = arrival.time_limit_s
        stop = None if limit is None else phase_start + int(limit * 1e9)
        await dispatch.closed_loop(phase_start, share.concurrency, stop, arrival.start_offset_ns)


def _timing(
    dispatch: _Dispatch, monitor: LoopLagMonitor, warm: WarmUp | None, phase_start: int,
    clock: Clock,
) -> PhaseTiming:  # fmt: skip
    """The phase's figures once it was sent."""
    lag_max, lag_p99 = monitor.summary_ms()
    return PhaseTiming(
        start_ns=dispatch.first_sent_ns if dispatch.first_sent_ns is not None else phase_start,
        last_end_ns=dispatch.last_end_ns if dispatch.last_end_ns is not None else clock.now_ns(),
        loop_lag_max_ms=round(lag_max, 3),
        loop_lag_p99_ms=round(lag_p99, 3),
        late_sends=dispatch.late,
        warmup_connections=warm.connections if warm else 0,
        warmup_opened=warm.opened if warm else None,
        warmup_failed=warm.failed if warm else 0,
        warmup_ms=warm.duration_ms if warm else 0.0,
        dispatched=dispatch.dispatched,
    )


def _first_leaf(group: BaseExceptionGroup[Any]) -> BaseException:
    first = group.exceptions[0]
    return _first_leaf(first) if isinstance(first, BaseExceptionGroup) else first


def write_not_sent(
    *, case: str, phase: str, requests: PhaseRequests, writer: RecordWriter, scheduled_ns: int
) -> int:
    """A phase that will never run (its server is gone): one ``not_sent`` record per request,
    all stamped ``scheduled_ns``, so every planned request is accounted for; the count."""
    for i in range(len(requests)):
        header = requests.header(i)
        writer.write(
            RequestRecord(
                request_id=header.request_id,
                case=case,
                phase=phase,
                index=i,
                group=header.group,
                prompt_tokens_sent=header.prompt_tokens,
                max_tokens=header.max_tokens,
                scheduled_ns=scheduled_ns,
            ),
            flush=False,
        )
    writer.flush()
    return len(requests)
