"""Load-generator workers as Ray actors on a cluster's nodes (``loadgen run --ray ADDRESS``).

Ray is imported only by this module, and this module only when ``--ray`` is given (Ray is an
optional extra: ``pip install '.[ray]'``). Every node needs the project installed, as on the
coordinator's host.

- **Placement.** Worker k goes to alive node k mod (number of nodes), pinned there
  (``NodeAffinitySchedulingStrategy``); by default one worker per node. Actors reserve no CPU
  (``num_cpus=0``), so a node's other Ray work does not keep a worker from being placed.
- **Plan and records.** Each phase, a worker gets its :class:`~loadgen.workers.base.WorkerTask`
  (the workload spec and its share, never prompts) and writes its records to a file on its
  own node; after the phase the coordinator takes the new complete lines and appends them
  to ``requests.worker-K.jsonl`` in the run directory.
- **Clocks.** Another host's monotonic clock counts from another origin. Before each phase
  the coordinator measures each worker's offset: :data:`OFFSET_SAMPLES` round trips through
  Ray, each reading the worker's clock between two readings of its own; the round trip with
  the least delay is kept (Cristian's method: taking the worker's reading to be at the trip's
  midpoint errs by at most half the trip, the bound recorded). The shared start is sent to
  each worker on its own clock (start + offset); the offsets go to ``clock_offsets.jsonl``
  and the reader moves each worker's stamps onto the coordinator's clock with them.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import shutil
import socket
import tempfile
import time
from pathlib import Path
from typing import Any

from loadgen.clock import Clock, ShiftedClock
from loadgen.placement import Placement, machine_id
from loadgen.runformat.layout import worker_requests_file
from loadgen.workers.base import ClockOffset, WorkerPool, WorkerRuntime
from server.net.errors import describe_exception
from server.net.jsonl import append_lines

#: Round trips per worker and phase for the clock offset; the least-delay one is kept.
OFFSET_SAMPLES = 16


class RayWorkerActor:
    """The actor around a :class:`~loadgen.workers.base.WorkerRuntime` (made remote by
    :meth:`RayWorkers.start`). ``clock_shift_ns`` shifts its clock (tests only: a second
    "host" on the same machine)."""

    def __init__(
        self,
        worker: int,
        pool_limit: int,
        read_timeout_s: float,
        clock_shift_ns: int = 0,
        total_timeout_s: float | None = None,
        placement: Placement | None = None,
        coordinator_machine: str | None = None,
    ) -> None:
        self._dir = Path(tempfile.mkdtemp(prefix=f"loadgen-worker-{worker}-"))
        self._path = self._dir / worker_requests_file(worker)
        clock: Clock | None = ShiftedClock(clock_shift_ns) if clock_shift_ns else None
        # The placement names this machine's cores: on another host it means nothing.
        here = coordinator_machine is not None and machine_id() == coordinator_machine
        self.runtime = WorkerRuntime(
            worker, self._path, pool_limit, read_timeout_s, clock, total_timeout_s,
            placement=placement if here else None,
        )  # fmt: skip
        self._taken = 0

    def node(self) -> str:
        """Host name and Ray node id (first 8 hex digits) of this worker."""
        import ray

        return f"{socket.gethostname()}/{ray.get_runtime_context().get_node_id()[:8]}"

    def now_ns(self) -> int:
        return self.runtime.now_ns()

    def call(self, method: str, *args: Any) -> Any:
        return getattr(self.runtime, method)(*args)

    def take_records(self) -> bytes:
        """The complete record lines written since the last call (a line still being
        written stays for the next)."""
        if not self._path.exists():
            return b""
        with open(self._path, "rb") as fh:
            fh.seek(self._taken)
            data = fh.read()
        complete = data[: data.rfind(b"\n") + 1]
        self._taken += len(complete)
        return complete

    def close(self) -> bytes:
        """Close the runtime; the records not taken yet."""
        self.runtime.close()
        rest = self.take_records()
        shutil.rmtree(self._dir, ignore_errors=True)
        return rest


def _measure_offset(ray: Any, actor: Any, worker: int, node: str, samples: int) -> ClockOffset:
    best: tuple[int, int] | None = None  # (rtt, offset)
    for _ in range(samples):
        t0 = time.monotonic_ns()
        remote_ns = ray.get(actor.now_ns.remote())
        t1 = time.monotonic_ns()
        rtt = t1 - t0
        if best is None or rtt < best[0]:
            best = (rtt, remote_ns - (t0 + t1) // 2)
    assert best is not None
    return ClockOffset(worker, node, best[1], best[0], best[0] // 2, samples)


class RayWorkers(WorkerPool):
    """Workers as Ray actors (see the module docstring)."""

    def __init__(
        self, ray: Any, actors: list[Any], nodes: list[str], owns_ray: bool, cdir: Path
    ) -> None:
        self._ray = ray
        self._cdir = cdir
        self._actors = actors
        self._nodes = nodes
        self._owns_ray = owns_ray
        self.size = len(actors)

    @classmethod
    async def start(
        cls,
        address: str,
        workers: int | None,
        cdir: Path,
        pool_limit: int,
        read_timeout_s: float,
        clock_shifts_ns: list[int] | None = None,
        total_timeout_s: float | None = None,
        placement: Placement | None = None,
    ) -> RayWorkers:
        """Connect to the cluster at ``address`` (``auto``: the one this host belongs to;
        a connection made already is reused), place ``workers`` actors (default one per
        alive node) and wait until each has its loop, pool and record file. Actors on this
        machine run as ``placement.for_worker`` says (``loadgen.placement``), the others as
        Ray starts them.

        Raises:
            RuntimeError: the cluster has no alive node.
        """
        import ray
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        owns = not ray.is_initialized()
        if owns:
            await asyncio.to_thread(
                ray.init, address=address, logging_level=logging.WARNING, log_to_driver=False
            )
        alive = sorted((n for n in ray.nodes() if n.get("Alive")), key=lambda n: str(n["NodeID"]))
        if not alive:
            raise RuntimeError(f"the Ray cluster at {address} has no alive node")
        count = workers or len(alive)
        remote: Any = ray.remote(num_cpus=0, max_restarts=0)(RayWorkerActor)
        actors = []
        for k in range(count):
            node = alive[k % len(alive)]
            strategy = NodeAffinitySchedulingStrategy(node_id=node["NodeID"], soft=False)
            shift = clock_shifts_ns[k] if clock_shifts_ns else 0
            placed_k = placement.for_worker(k, count) if placement else None
            actor = remote.options(scheduling_strategy=strategy).remote(
                k, pool_limit, read_timeout_s, shift, total_timeout_s, placed_k, machine_id()
            )
            actors.append(actor)
        nodes = await asyncio.to_thread(ray.get, [a.node.remote() for a in actors])
        cdir.mkdir(parents=True, exist_ok=True)
        return cls(ray, actors, list(nodes), owns, cdir)

    async def call(self, worker: int, method: str, *args: Any) -> Any:
        ref = self._actors[worker].call.remote(method, *args)
        try:
            return await asyncio.to_thread(self._ray.get, ref)
        except Exception as exc:  # a RayTaskError wraps the worker's own exception
            raise RuntimeError(f"worker {worker} ({self._nodes[worker]}): {method} failed: "
                               f"{describe_exception(exc)}") from None  # fmt: skip

    async def clock_offsets(self) -> list[ClockOffset]:
        return [
            await asyncio.to_thread(
                _measure_offset, self._ray, actor, k, self._nodes[k], OFFSET_SAMPLES
            )
            for k, actor in enumerate(self._actors)
        ]

    def nodes(self) -> list[str]:
        return list(self._nodes)

    async def gather_records(self, cdir: Path) -> None:
        chunks = await asyncio.to_thread(
            self._ray.get, [a.take_records.remote() for a in self._actors]
        )
        for k, data in enumerate(chunks):
            _append(cdir / worker_requests_file(k), data)

    async def close(self) -> None:
        ray = self._ray
        # Closing returns the records not gathered yet (a run cut short): keep them.
        with contextlib.suppress(Exception):
            rests = await asyncio.to_thread(ray.get, [a.close.remote() for a in self._actors])
            for k, data in enumerate(rests):
                _append(self._cdir / worker_requests_file(k), data)
        for actor in self._actors:
            with contextlib.suppress(Exception):
                ray.kill(actor)
        if self._owns_ray:
            await asyncio.to_thread(ray.shutdown)


def _append(path: Path, data: bytes) -> None:
    """Append a worker's records to its file, synced to disk (``server.net.jsonl``).

    Raises:
        RunWriteError: the append failed.
    """
    if data:
        append_lines(path, data, sync=True)
