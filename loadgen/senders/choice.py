"""Which sender a case gets: this process alone, or the pool of workers the run asks for."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable, Sequence
from pathlib import Path

from loadgen.client import Target
from loadgen.clock import Clock
from loadgen.connections import pool_limit
from loadgen.placement import Placement
from loadgen.senders.base import Sender
from loadgen.senders.local import open_local_sender
from loadgen.workers.process import WorkersConfig
from loadgen.workers.sender import open_pool_sender
from scenarios.plan import PhaseSpec, Plan


@contextlib.asynccontextmanager
async def open_sender(
    workers: WorkersConfig,
    plan: Plan,
    phases: Sequence[PhaseSpec],
    case: str,
    cdir: Path,
    target: Target,
    clock: Clock,
    *,
    placement: Placement,
    helpers_problem: str | None,
    message: Callable[[str], None],
) -> AsyncIterator[Sender]:
    """The sender of one case's ``phases`` to ``target``: worker processes or Ray actors when
    ``workers`` split the load (``loadgen.workers``), else this process. The connection
    pool's limit is the largest requested concurrency of the phases (none for an uncapped
    open loop), so it never caps the load.

    Raises:
        ValueError: the workers cannot send one of the phases (before any load).
    """
    # A duration-driven open loop has no request count yet; its limit does not use one.
    limit = pool_limit(p.arrival.concurrency_limit(p.workload.requests or 0) for p in phases)
    opened: contextlib.AbstractAsyncContextManager[Sender]
    if workers.split:
        opened = open_pool_sender(
            workers, plan, phases, case, cdir, target, clock, pool_limit=limit,
            placement=placement, helpers_problem=helpers_problem, message=message,
        )  # fmt: skip
    else:
        opened = open_local_sender(
            case, cdir, target, clock, pool_limit=limit, read_timeout_s=plan.stall_timeout_s,
            total_timeout_s=plan.request_timeout_s, placement=placement,
            helpers_problem=helpers_problem, message=message,
        )  # fmt: skip
    async with opened as sender:
        yield sender
