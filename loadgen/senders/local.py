"""This process alone sends a case's load: one connection pool, one record file, the sending
thread placed off the servers' cores."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractContextManager
from pathlib import Path

import aiohttp

from loadgen.client import Target
from loadgen.clock import Clock
from loadgen.connections import open_session
from loadgen.phase import heap_frozen, run_phase
from loadgen.placement import AppliedPlacement, Placement, placed
from loadgen.records import RecordWriter
from loadgen.runformat.layout import REQUESTS_FILE
from loadgen.senders.base import PhaseObserver, Sender, SentPhase
from scenarios.plan import PhaseSpec
from scenarios.requests import PhaseRequests


class LocalSender(Sender):
    """Sends each phase on this process's event loop into ``requests.jsonl``."""

    def __init__(
        self,
        case: str,
        target: Target,
        session: aiohttp.ClientSession,
        writer: RecordWriter,
        clock: Clock,
        placement: AppliedPlacement,
    ) -> None:
        self.case, self.target, self.clock = case, target, clock
        self.session, self.writer = session, writer
        self.client = [placement.as_dict()]

    async def send(
        self, phase: PhaseSpec, requests: PhaseRequests, observer: PhaseObserver
    ) -> SentPhase:
        with heap_frozen():
            timing = await run_phase(
                case=self.case, phase=phase.name, requests=requests, arrival=phase.arrival,
                target=self.target, session=self.session, writer=self.writer, clock=self.clock,
                on_done=observer.record, cut_reason=observer.cut_reason,
            )  # fmt: skip
        return SentPhase(timing)

    def not_sent_writer(self) -> AbstractContextManager[RecordWriter]:
        return contextlib.nullcontext(self.writer)


@contextlib.asynccontextmanager
async def open_local_sender(
    case: str,
    cdir: Path,
    target: Target,
    clock: Clock,
    *,
    pool_limit: int,
    read_timeout_s: float,
    total_timeout_s: float | None,
    placement: Placement,
    helpers_problem: str | None,
    message: Callable[[str], None],
) -> AsyncIterator[LocalSender]:
    """This process's sender for one case: a session (``loadgen.connections.open_session``),
    the case's ``requests.jsonl`` and this thread placed by ``placement`` (its problems, and
    ``helpers_problem`` of the helper processes, in ``client`` and said with ``message``),
    undone on exit."""
    async with open_session(
        read_timeout_s=read_timeout_s, total_timeout_s=total_timeout_s, pool_limit=pool_limit
    ) as session:
        with RecordWriter(cdir / REQUESTS_FILE) as writer, placed(placement) as sending:
            applied = sending.with_problem(helpers_problem)
            message(f"load generator: {applied.describe()}")
            yield LocalSender(case, target, session, writer, clock, applied)
