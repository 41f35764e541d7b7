"""One load-generator worker (its own event loop sending its share of each phase), and the
interface every transport of workers implements (:class:`WorkerPool`, :class:`ClockOffset`).

A phase split across N workers (``scenarios.partition``) runs one :class:`WorkerRuntime` per
worker, in a process of its own (``loadgen.workers.process``) or a Ray actor
(``loadgen.workers.ray``).
The runtime runs an event loop (uvloop) on a thread of its own and keeps, for the whole case,
one connection pool and one record file; the transport calls its blocking methods from
another thread, one phase at a time:

``prepare(task)`` (build the share's requests lazily, warm its connections) →
``start(start_at_ns)`` (returns at once; the share is sent from that shared start) →
``poll()`` until it returns the result → … → ``close()``.

Records are stamped on the worker's own clock (``now_ns``); the coordinator measures how far
that clock is from its own where they can differ (other hosts) and the reader subtracts it.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from abc import ABC, abstractmethod
from collections import Counter
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from loadgen.client import Target
from loadgen.clock import Clock, MonotonicClock
from loadgen.connections import WarmUp, open_session, warm_up
from loadgen.phase import (
    PhaseTiming,
    heap_frozen,
    run_phase,
    share_warmup_connections,
)
from loadgen.placement import AppliedPlacement, Placement, placed
from loadgen.records import RecordWriter, RequestRecord
from loadgen.runformat.rows import ClockOffsetRow
from scenarios.arrivals import AllAtOnce, ClosedLoop, OpenLoop, TraceArrival
from scenarios.bench_workload import BenchRequests
from scenarios.partition import WorkerShare
from scenarios.requests import PhaseRequests
from scenarios.tokens import TokenSpace
from scenarios.workloads import AnchoredPrompts, TracePrompts, UniquePrompts, materialize
from server.net.errors import describe_exception


@dataclass(frozen=True)
class WorkerTask:
    """One worker's part of one phase, small enough to ship: the requests are rebuilt from the
    workload, seed and token space exactly as a single process builds them.

    Attributes:
        worker: the worker's index.
        case / phase: names the records carry.
        workload / arrival: the phase's, from the plan.
        seed / tokens: the plan's seed and token space (prompt tokens).
        share: which requests this worker sends, when, and how many at once.
        target: where they go.
    """

    worker: int
    case: str
    phase: str
    workload: AnchoredPrompts | UniquePrompts | TracePrompts | BenchRequests
    arrival: ClosedLoop | AllAtOnce | OpenLoop | TraceArrival
    seed: int
    tokens: TokenSpace
    share: WorkerShare
    target: Target


@dataclass(frozen=True)
class WorkerResult:
    """How a worker's share of a phase went; stamps are on the worker's clock (ns).

    Attributes:
        timing: the share's boundaries, loop lag, late sends and warm-up.
        first_sent_ns: its first request sent, ``None`` when it sent none.
        statuses: records written, by status (``ok``, ``error``, ``aborted``, ``not_sent``).
        error: why the share stopped early (an exception in the worker), else ``None``.
    """

    worker: int
    timing: PhaseTiming
    first_sent_ns: int | None
    statuses: dict[str, int] = field(default_factory=dict)
    error: str | None = None


@dataclass(frozen=True)
class WorkerPoll:
    """What ``poll`` answers: records written so far in this phase (``done``), how many of
    them failed, and the result once the share is finished."""

    done: int
    failed: int
    result: WorkerResult | None


class WorkerRuntime:
    """A worker's event loop, connection pool and record file (see the module docstring).

    ``records_path`` is the JSONL file its records are appended to; ``pool_limit`` the
    connection-pool limit (its largest concurrency share, 0 = none); ``read_timeout_s`` and
    ``total_timeout_s`` a request's stall and total limits
    (:func:`loadgen.connections.open_session`); ``clock`` the time
    source its stamps come from (tests pass a shifted one to stand in for another host);
    ``placement`` how its loop's thread is scheduled (``loadgen.placement``; ``None`` leaves
    it as it starts). Methods block the calling thread, never the worker's loop.
    """

    def __init__(
        self,
        worker: int,
        records_path: Path,
        pool_limit: int,
        read_timeout_s: float,
        clock: Clock | None = None,
        total_timeout_s: float | None = None,
        placement: Placement | None = None,
    ) -> None:
        import uvloop

        self.worker = worker
        self.records_path = records_path
        self.clock: Clock = clock or MonotonicClock()
        self._loop = uvloop.new_event_loop()
        self._thread = threading.Thread(
            target=self._loop.run_forever, name=f"loadgen-worker-{worker}", daemon=True
        )
        self._thread.start()
        self._stack = contextlib.AsyncExitStack()
        self._session: Any = None
        self._writer: RecordWriter | None = None
        self._task: WorkerTask | None = None
        self._requests: PhaseRequests | None = None
        self._running: Future[WorkerResult] | None = None
        self._inner: asyncio.Task[Any] | None = None  # the loop's task behind ``_running``
        self._cancelled = False
        #: Why the share was cancelled, when not by the user (its server died).
        self._cut_reason: str | None = None
        self._counts: Counter[str] = Counter()
        self._placement: AppliedPlacement | None = None
        self._call(self._open(pool_limit, read_timeout_s, total_timeout_s, placement))

    def _call(self, coro: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result()

    async def _open(
        self,
        pool_limit: int,
        read_timeout_s: float,
        total_timeout_s: float | None,
        placement: Placement | None,
    ) -> None:
        if placement is not None:  # on the loop's own thread, undone there at close
            self._placement = self._stack.enter_context(placed(placement))
        self._session = await self._stack.enter_async_context(
            open_session(
                read_timeout_s=read_timeout_s,
                total_timeout_s=total_timeout_s,
                pool_limit=pool_limit,
            )
        )
        self._writer = self._stack.enter_context(RecordWriter(self.records_path))

    def now_ns(self) -> int:
        """The worker's clock now (ns)."""
        return self.clock.now_ns()

    def placement(self) -> AppliedPlacement | None:
        """How the loop's thread is scheduled, ``None`` when it was left as it started."""
        return self._placement

    def prepare(self, task: WorkerTask) -> WarmUp:
        """Take the next phase's task and warm its connections (its concurrency share, or an
        uncapped open loop's first second of arrivals)."""
        if self._running is not None and not self._running.done():
            raise RuntimeError("prepare while a phase is still running")
        self._task = task
        self._requests = materialize(task.workload, task.phase, task.seed, task.tokens)
        self._counts = Counter()
        count = share_warmup_connections(task.share)
        return self._call(warm_up(self._session, task.target.url, count, self.clock))  # type: ignore[no-any-return]

    def start(self, start_at_ns: int) -> None:
        """Send the prepared share from ``start_at_ns`` (this worker's clock); returns at once."""
        if self._task is None:
            raise RuntimeError("start before prepare")
        self._inner, self._cancelled, self._cut_reason = None, False, None
        self._running = asyncio.run_coroutine_threadsafe(self._run(start_at_ns), self._loop)

    def _done(self, record: RequestRecord) -> None:
        self._counts[record.status] += 1

    async def _run(self, start_at_ns: int) -> WorkerResult:
        self._inner = asyncio.current_task()
        if self._cancelled:  # cancel() came before this task ran
            self._inner.cancel()  # type: ignore[union-attr]
        task, requests, writer = self._task, self._requests, self._writer
        assert task is not None and requests is not None and writer is not None
        first_sent: list[int] = []

        def done(record: RequestRecord) -> None:
            self._done(record)
            if record.sent_ns is not None and (not first_sent or record.sent_ns < first_sent[0]):
                first_sent[:] = [record.sent_ns]

        with heap_frozen():
            timing = await run_phase(
                case=task.case, phase=task.phase, requests=requests, arrival=task.arrival,
                target=task.target, session=self._session, writer=writer, clock=self.clock,
                on_done=done, warmup=False, share=task.share, start_at_ns=start_at_ns,
                cut_reason=lambda: self._cut_reason,
            )  # fmt: skip
        return WorkerResult(
            worker=self.worker,
            timing=timing,
            first_sent_ns=first_sent[0] if first_sent else None,
            statuses=dict(self._counts),
        )

    def poll(self) -> WorkerPoll:
        """Records written so far in this phase, and the result once the share is done.

        An exception inside the share ends it with a result whose ``error`` says why (its
        records up to then are written)."""
        running = self._running
        done = sum(self._counts.values())
        failed = self._counts.get("error", 0)
        if running is None or not running.done():
            return WorkerPoll(done, failed, None)
        try:
            result = running.result()
        except BaseException as exc:  # cancelled or failed: still a result to report
            now = self.clock.now_ns()
            result = WorkerResult(
                worker=self.worker,
                timing=PhaseTiming(now, now, 0.0, 0.0, 0),
                first_sent_ns=None,
                statuses=dict(self._counts),
                error=describe_exception(exc),
            )
        return WorkerPoll(done, failed, result)

    def cancel(self, reason: str | None = None) -> None:
        """Stop the running share: requests in flight end as ``interrupted`` records (or
        ``error`` "cut short: ``reason``" when a reason is given: its server died), those not
        sent yet get ``not_sent`` records (as a cancelled single-process phase does)."""
        self._cut_reason = reason
        # Cancel the loop's task, not the future: the future completes only once the task
        # has written the records of the cut-short share.
        if self._running is not None and not self._running.done():
            self._loop.call_soon_threadsafe(self._cancel_in_loop)

    def _cancel_in_loop(self) -> None:
        self._cancelled = True
        if self._inner is not None:
            self._inner.cancel()

    def close(self) -> None:
        """Cancel what runs, close the record file and the pool, stop the loop."""
        self.cancel()
        if self._running is not None:
            with contextlib.suppress(BaseException):
                self._running.result(timeout=10)
        with contextlib.suppress(Exception):
            self._call(self._stack.aclose())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)
        if not self._loop.is_running():
            self._loop.close()


@dataclass(frozen=True)
class ClockOffset:
    """A worker's clock against the coordinator's, measured before a phase.

    ``offset_ns`` = worker clock − coordinator clock at the same instant, from the round trip
    with the least delay (Cristian's method: the worker's reading is taken to be at the
    round trip's midpoint, so the error is at most half the round trip: ``bound_ns``).
    A worker stamp t converts to the coordinator's clock as t − offset_ns.
    """

    worker: int
    node: str
    offset_ns: int
    rtt_ns: int
    bound_ns: int
    samples: int

    def as_row(self, phase: str) -> ClockOffsetRow:
        """The line written to ``clock_offsets.jsonl``."""
        return ClockOffsetRow(phase=phase, worker=self.worker, node=self.node,
                              offset_ns=self.offset_ns, rtt_ns=self.rtt_ns,
                              bound_ns=self.bound_ns, samples=self.samples)  # fmt: skip


class WorkerPool(ABC):
    """N workers that each run a :class:`~loadgen.workers.base.WorkerRuntime`, wherever they are."""

    size: int

    @abstractmethod
    async def call(self, worker: int, method: str, *args: Any) -> Any:
        """Call ``method`` of worker ``worker``'s runtime; its exception is raised here as a
        ``RuntimeError`` naming the worker."""

    async def clock_offsets(self) -> list[ClockOffset] | None:
        """Each worker's clock offset, or ``None`` when the workers share the coordinator's
        clock (one host)."""
        return None

    async def gather_records(self, cdir: Path) -> None:  # noqa: B027 - optional hook
        """Bring records written elsewhere into ``cdir`` (nothing to do on one host)."""

    def nodes(self) -> list[str]:
        """Where each worker runs (a host or Ray node name)."""
        return ["local"] * self.size

    async def placements(self) -> list[AppliedPlacement | None]:
        """How each worker's sending thread is scheduled (``loadgen.placement``; ``None``
        where it was left as it started)."""
        return list(await asyncio.gather(*(self.call(k, "placement") for k in range(self.size))))

    @abstractmethod
    async def close(self) -> None:
        """Stop every worker (their record files are closed first)."""
