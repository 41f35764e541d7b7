"""Sending one phase with N workers: the coordinator's side, and worker processes on one host.

The coordinator (the run's own process) splits each phase (``scenarios.partition``), hands each
worker its :class:`~loadgen.workers.base.WorkerTask`, waits until every worker has warmed its
connections, then gives all of them one start time a little ahead, and polls them until
each share is done. Each worker writes its own record file
(``requests.worker-K.jsonl``); the reader merges them.

A :class:`~loadgen.workers.base.WorkerPool` is the transport: :class:`ProcessWorkers` (this
module) runs each worker
in a process of its own on this host; ``loadgen.workers.ray`` runs them as Ray actors on a
cluster's nodes. On one host the workers' stamps and the coordinator's share one clock:
``CLOCK_MONOTONIC`` is system-wide on Linux (``time.monotonic_ns`` in every process reads the
same clock), so no offset is measured; across hosts the Ray pool measures one per phase.
"""

from __future__ import annotations

import asyncio
import contextlib
import multiprocessing
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from loadgen.client import Target
from loadgen.clock import Clock
from loadgen.phase import PhaseTiming
from loadgen.placement import Placement
from loadgen.runformat.layout import worker_requests_file
from loadgen.runformat.rows import WorkerPhaseRow
from loadgen.workers.base import (
    ClockOffset,
    WorkerPoll,
    WorkerPool,
    WorkerResult,
    WorkerRuntime,
    WorkerTask,
)
from scenarios.partition import WorkerShare, partition_phase
from scenarios.plan import PhaseSpec
from server.group_signals import blocked_while_spawning, leave_stop_to_parent
from server.net.errors import describe_exception

#: The shared start is this far after the last worker reported ready: time for the start
#: message to reach every worker (a pipe or a Ray call takes well under 10 ms).
START_MARGIN_NS = 50_000_000
#: How often the coordinator asks the workers how far they are (progress, end of the phase).
POLL_S = 0.2
#: After a cancellation, how long the workers get to write the records of the cut-short phase.
CANCEL_GRACE_S = 15.0


def _worker_process(
    conn: Connection,
    worker: int,
    records_path: str,
    pool_limit: int,
    read_timeout_s: float,
    total_timeout_s: float | None = None,
    placement: Placement | None = None,
) -> None:
    """A worker process: serve calls on ``conn`` until ``close``. Ctrl-C and a group SIGTERM
    reach the whole process group; the worker ignores both, so the coordinator decides how the
    phase ends and the worker still writes the records of a cut-short share."""
    leave_stop_to_parent()
    runtime = WorkerRuntime(
        worker, Path(records_path), pool_limit, read_timeout_s, total_timeout_s=total_timeout_s,
        placement=placement,
    )  # fmt: skip
    try:
        while True:
            try:
                method, args = conn.recv()
            except EOFError:  # the coordinator is gone
                return
            if method == "close":
                return
            try:
                conn.send(("ok", getattr(runtime, method)(*args)))
            except Exception as exc:
                conn.send(("error", describe_exception(exc)))
    finally:
        runtime.close()
        with contextlib.suppress(OSError):
            conn.send(("ok", None))


class ProcessWorkers(WorkerPool):
    """Workers as processes of this host (``spawn``: a clean interpreter each, no state of the
    coordinator's event loop or scraper inherited), each with its own event loop and pool;
    with a ``placement``, worker k's loop runs as ``placement.for_worker(k, size)`` says."""

    def __init__(
        self,
        size: int,
        cdir: Path,
        pool_limit: int,
        read_timeout_s: float,
        total_timeout_s: float | None = None,
        placement: Placement | None = None,
    ) -> None:
        self.size = size
        self._placement = placement
        self._cdir = cdir
        self._pool_limit = pool_limit
        self._read_timeout_s = read_timeout_s
        self._total_timeout_s = total_timeout_s
        self._procs: list[Any] = []
        self._conns: list[Connection] = []
        self._locks = [asyncio.Lock() for _ in range(size)]

    async def start(self) -> ProcessWorkers:
        """Spawn the workers and wait until each has its loop, pool and record file."""
        ctx = multiprocessing.get_context("spawn")
        self._cdir.mkdir(parents=True, exist_ok=True)
        for k in range(self.size):
            parent, child = ctx.Pipe()
            proc = ctx.Process(
                target=_worker_process,
                args=(child, k, str(self._cdir / worker_requests_file(k)), self._pool_limit,
                      self._read_timeout_s, self._total_timeout_s,
                      self._placement.for_worker(k, self.size) if self._placement else None),
                name=f"loadgen-worker-{k}",
                daemon=True,
            )  # fmt: skip
            with blocked_while_spawning():
                proc.start()
            child.close()
            self._procs.append(proc)
            self._conns.append(parent)
        await asyncio.gather(*(self.call(k, "now_ns") for k in range(self.size)))
        return self

    def _rpc(self, worker: int, method: str, args: tuple[Any, ...]) -> Any:
        conn = self._conns[worker]
        conn.send((method, args))
        try:
            status, value = conn.recv()
        except EOFError:
            code = self._procs[worker].exitcode
            raise RuntimeError(f"worker {worker} died (exit code {code})") from None
        if status != "ok":
            raise RuntimeError(f"worker {worker}: {method} failed: {value}")
        return value

    async def call(self, worker: int, method: str, *args: Any) -> Any:
        async with self._locks[worker]:
            return await asyncio.to_thread(self._rpc, worker, method, args)

    async def close(self) -> None:
        for k in range(self.size):
            with contextlib.suppress(OSError, EOFError, RuntimeError):
                async with self._locks[k]:
                    await asyncio.to_thread(self._rpc, k, "close", ())
        for proc in self._procs:
            await asyncio.to_thread(proc.join, 10)
            if proc.is_alive():
                proc.kill()
                await asyncio.to_thread(proc.join, 5)
        for conn in self._conns:
            conn.close()


@dataclass(frozen=True)
class SplitPhase:
    """A phase sent by several workers, on the coordinator's clock.

    Attributes:
        timing: merged figures: start = first request sent by any worker, last end = the
            last request finished on any, loop lag = the worst worker's (max and p99), late
            sends summed, warm-up connections summed (its duration: the slowest worker's).
        workers: one row per worker (its node, requests, statuses, loop lag, late sends,
            warm-up, clock offset bound, error) for ``phases.jsonl``.
        statuses: records written by all workers, by status.
        offsets: the clock offsets measured before the phase (``None`` on one host).
    """

    timing: PhaseTiming
    workers: list[WorkerPhaseRow]
    statuses: dict[str, int]
    offsets: list[ClockOffset] | None = None
    errors: list[str] = field(default_factory=list)


def worker_tasks(
    phase: PhaseSpec, shares: Sequence[WorkerShare], case: str, seed: int, tokens: Any,
    target: Target,
) -> list[WorkerTask]:  # fmt: skip
    """One task per share of ``phase``."""
    return [
        WorkerTask(worker=s.worker, case=case, phase=phase.name, workload=phase.workload,
                   arrival=phase.arrival, seed=seed, tokens=tokens, share=s, target=target)
        for s in shares
    ]  # fmt: skip


async def _poll_until_done(
    pool: WorkerPool, on_progress: Callable[[int, int], None] | None
) -> list[WorkerResult]:
    while True:
        polls: list[WorkerPoll] = await asyncio.gather(
            *(pool.call(k, "poll") for k in range(pool.size))
        )
        if on_progress is not None:
            on_progress(sum(p.done for p in polls), sum(p.failed for p in polls))
        if all(p.result is not None for p in polls):
            return [p.result for p in polls if p.result is not None]
        await asyncio.sleep(POLL_S)


async def run_split_phase(
    pool: WorkerPool,
    *,
    case: str,
    phase: PhaseSpec,
    seed: int,
    tokens: Any,
    target: Target,
    clock: Clock,
    on_progress: Callable[[int, int], None] | None = None,
    on_offsets: Callable[[list[ClockOffset]], None] | None = None,
    cut_reason: Callable[[], str | None] | None = None,
) -> SplitPhase:
    """Send ``phase`` with every worker of ``pool`` (see the module docstring).

    Clock offsets (a pool across hosts) are measured first and handed to ``on_offsets``
    before any load is sent. Cancellation cancels every worker's share and waits (up to
    :data:`CANCEL_GRACE_S`) until each has written its records, then propagates; the
    workers' requests in flight are ``interrupted``, or cut short by the reason
    ``cut_reason()`` gives then (its server died).
    """
    n = phase.workload.requests
    if n is None:  # a duration-driven open loop is resolved (its count known) before it is sent
        raise ValueError(f"phase {phase.name}: its request count is not resolved")
    shares = partition_phase(phase.arrival, n, pool.size)
    offsets = await pool.clock_offsets()
    if offsets is not None and on_offsets is not None:
        on_offsets(offsets)
    shift = [o.offset_ns for o in offsets] if offsets else [0] * pool.size
    tasks = worker_tasks(phase, shares, case, seed, tokens, target)
    warmups = await asyncio.gather(*(pool.call(t.worker, "prepare", t) for t in tasks))
    start = clock.now_ns() + START_MARGIN_NS
    await asyncio.gather(*(pool.call(k, "start", start + shift[k]) for k in range(pool.size)))
    try:
        results = await _poll_until_done(pool, on_progress)
    except BaseException:
        with contextlib.suppress(BaseException):
            async with asyncio.timeout(CANCEL_GRACE_S):
                reason = cut_reason() if cut_reason is not None else None
                await asyncio.shield(_cancel_all(pool, reason))
        raise
    return merge_results(results, warmups, shift, pool.nodes(), offsets, start)


async def _cancel_all(pool: WorkerPool, reason: str | None) -> None:
    await asyncio.gather(*(pool.call(k, "cancel", reason) for k in range(pool.size)))
    await _poll_until_done(pool, None)


def merge_results(
    results: Sequence[WorkerResult],
    warmups: Sequence[Any],
    shift: Sequence[int],
    nodes: Sequence[str],
    offsets: Sequence[ClockOffset] | None,
    start_ns: int,
) -> SplitPhase:
    """Merge the workers' figures onto the coordinator's clock (worker stamp − its offset)."""
    firsts = [r.first_sent_ns - shift[r.worker] for r in results if r.first_sent_ns is not None]
    ends = [r.timing.last_end_ns - shift[r.worker] for r in results]
    statuses: dict[str, int] = {}
    rows = []
    for r in results:
        for status, n in r.statuses.items():
            statuses[status] = statuses.get(status, 0) + n
        warm = warmups[r.worker]
        rows.append(WorkerPhaseRow(
            worker=r.worker, node=nodes[r.worker], requests=sum(r.statuses.values()),
            statuses=r.statuses, loop_lag_max_ms=r.timing.loop_lag_max_ms,
            loop_lag_p99_ms=r.timing.loop_lag_p99_ms, late_sends=r.timing.late_sends,
            warmup_connections=warm.connections, warmup_opened=warm.opened,
            warmup_failed=warm.failed, warmup_ms=warm.duration_ms,
            clock_offset_ns=offsets[r.worker].offset_ns if offsets else None,
            clock_offset_bound_ns=offsets[r.worker].bound_ns if offsets else None,
            error=r.error,
        ))  # fmt: skip
    opened = [w.opened for w in warmups]
    timing = PhaseTiming(
        start_ns=min(firsts) if firsts else start_ns,
        last_end_ns=max(ends) if ends else start_ns,
        loop_lag_max_ms=max((r.timing.loop_lag_max_ms for r in results), default=0.0),
        loop_lag_p99_ms=max((r.timing.loop_lag_p99_ms for r in results), default=0.0),
        late_sends=sum(r.timing.late_sends for r in results),
        warmup_connections=sum(w.connections for w in warmups),
        warmup_opened=None if any(o is None for o in opened) else sum(opened),
        warmup_failed=sum(w.failed for w in warmups),
        warmup_ms=max((w.duration_ms for w in warmups), default=0.0),
        dispatched=sum(r.timing.dispatched for r in results),
    )
    return SplitPhase(
        timing=timing,
        workers=rows,
        statuses=statuses,
        offsets=list(offsets) if offsets else None,
        errors=[f"worker {r.worker}: {r.error}" for r in results if r.error],
    )


@dataclass(frozen=True)
class WorkersConfig:
    """How the load is spread (``loadgen run --workers/--ray``).

    Attributes:
        workers: worker count; ``None`` = the default: 1 (the run's own process, exactly as
            without workers) or, with ``ray``, one per alive node of the cluster.
        ray: a Ray cluster address (or ``auto``) to place the workers on as actors.
    """

    workers: int | None = None
    ray: str | None = None

    @property
    def split(self) -> bool:
        """Whether phases go through workers (more than one, or any on Ray)."""
        return self.ray is not None or (self.workers or 1) > 1

    def describe(self) -> dict[str, Any]:
        """What ``run.json`` records."""
        return {"workers": self.workers or 1 if self.ray is None else self.workers,
                "ray": self.ray}  # fmt: skip


@contextlib.asynccontextmanager
async def open_pool(
    config: WorkersConfig,
    cdir: Path,
    pool_limit: int,
    read_timeout_s: float,
    total_timeout_s: float | None = None,
    placement: Placement | None = None,
) -> Any:
    """The workers of one case: processes on this host, or Ray actors (Ray imported only
    here, only with ``config.ray``). Closed on exit, also on error or cancellation. Each
    worker's requests fail as stalled after ``read_timeout_s`` without a byte and as timed out
    after ``total_timeout_s`` (``None``: no limit), as :func:`loadgen.connections.open_session`
    says. ``placement`` schedules the workers on this machine
    (:meth:`loadgen.placement.Placement.for_worker`); Ray actors on other hosts run as Ray
    starts them (the placement names this machine's cores)."""
    pool: WorkerPool
    if config.ray is not None:
        from loadgen.workers.ray import RayWorkers

        pool = await RayWorkers.start(
            config.ray, config.workers, cdir, pool_limit, read_timeout_s,
            total_timeout_s=total_timeout_s, placement=placement,
        )  # fmt: skip
    else:
        pool = await ProcessWorkers(
            config.workers or 1, cdir, pool_limit, read_timeout_s, total_timeout_s, placement
        ).start()
    try:
        yield pool
    finally:
        await asyncio.shield(pool.close())
