"""A pool of workers sends a case's load (``loadgen.senders.base.Sender``): the coordinator
(this process) hands each phase to the workers (:func:`~loadgen.workers.process.
run_split_phase`), sends nothing itself and keeps off the servers' cores."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import AbstractContextManager
from pathlib import Path

from loadgen.client import Target
from loadgen.clock import Clock
from loadgen.placement import Placement, placed
from loadgen.records import RecordWriter
from loadgen.runformat.layout import CLOCK_OFFSETS_FILE, REQUESTS_FILE, append_jsonl
from loadgen.senders.base import PhaseObserver, Sender, SentPhase
from loadgen.workers.base import ClockOffset, WorkerPool
from loadgen.workers.process import WorkersConfig, open_pool, run_split_phase
from scenarios.plan import PhaseSpec, Plan
from scenarios.requests import PhaseRequests


def check_splittable(plan: Plan, phases: Sequence[PhaseSpec]) -> None:
    """Refuse, before any load, phases whose sending needs one process: a phase whose records
    a late-bound figure measures (the coordinator holds no records while workers send) and a
    closed loop that staggers its senders' starts (``ramp_s``; the workers' senders would not
    keep one staggered order).

    Raises:
        ValueError: such a phase is in ``phases``.
    """
    measured = plan.measured_phases()
    for phase in phases:
        ramp = phase.arrival.ramps_senders
        if phase.name in measured or ramp:
            why = "later figures are measured from it" if not ramp else "it ramps its senders"
            raise ValueError(f"phase {phase.name} cannot be split across workers: {why}")


class PoolSender(Sender):
    """Sends each phase through the case's workers; their records land in the case directory
    (``requests.worker-K.jsonl``), clock offsets in ``clock_offsets.jsonl`` before any load."""

    def __init__(
        self,
        pool: WorkerPool,
        case: str,
        plan: Plan,
        cdir: Path,
        target: Target,
        clock: Clock,
        client: list[dict[str, object] | None],
    ) -> None:
        self.pool, self.case, self.plan, self.cdir = pool, case, plan, cdir
        self.target, self.clock, self.client = target, clock, client

    async def send(
        self, phase: PhaseSpec, requests: PhaseRequests, observer: PhaseObserver
    ) -> SentPhase:
        def offsets(found: list[ClockOffset]) -> None:
            for o in found:
                append_jsonl(self.cdir / CLOCK_OFFSETS_FILE, o.as_row(phase.name))

        try:
            split = await run_split_phase(
                self.pool, case=self.case, phase=phase, seed=self.plan.seed,
                tokens=self.plan.tokens, target=self.target, clock=self.clock,
                on_progress=observer.progress, on_offsets=offsets,
                cut_reason=observer.cut_reason,
            )  # fmt: skip
        finally:
            await asyncio.shield(self.pool.gather_records(self.cdir))
        observer.counted(split.statuses)
        if split.errors:
            raise RuntimeError("; ".join(split.errors))
        return SentPhase(split.timing, split.workers)

    def not_sent_writer(self) -> AbstractContextManager[RecordWriter]:
        return RecordWriter(self.cdir / REQUESTS_FILE)


@contextlib.asynccontextmanager
async def open_pool_sender(
    config: WorkersConfig,
    plan: Plan,
    phases: Sequence[PhaseSpec],
    case: str,
    cdir: Path,
    target: Target,
    clock: Clock,
    *,
    pool_limit: int,
    placement: Placement,
    helpers_problem: str | None,
    message: Callable[[str], None],
) -> AsyncIterator[PoolSender]:
    """The workers' sender for one case: refuses phases they cannot send
    (:func:`check_splittable`), opens the pool (``open_pool``, its workers placed by
    ``placement``), says where each worker runs with ``message``, and keeps this coordinating
    thread off the servers' cores (not real-time: it sends nothing) until exit.

    Raises:
        ValueError: a phase cannot be split (before any worker starts).
    """
    check_splittable(plan, phases)
    async with open_pool(
        config, cdir, pool_limit, plan.stall_timeout_s, plan.request_timeout_s, placement
    ) as pool:
        client: list[dict[str, object] | None] = []
        for k, worker in enumerate(await pool.placements()):
            applied = worker.with_problem(helpers_problem) if worker else None
            client.append(applied.as_dict() if applied else None)
            shown = applied.describe() if applied else "as Ray started it"
            message(f"load generator worker {k}: {shown}")
        with placed(Placement(False, placement.cpus, placement.reason)) as coordinator:
            if coordinator.problem:
                message(f"load generator coordinator: {coordinator.problem}")
            yield PoolSender(pool, case, plan, cdir, target, clock, client)
