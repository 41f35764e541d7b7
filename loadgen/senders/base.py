"""The interface of a case's load sender: it sends one phase at a time and says how.

A sender is opened for one case (its connections, record files, the placement of its sending
threads) and sends that case's phases one after the other. What it tells the case while a
phase runs goes to a :class:`PhaseObserver`: the records this process writes one by one, or,
for records written elsewhere (workers), progress counts and the final count by status.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Protocol

from loadgen.phase import PhaseTiming
from loadgen.records import RecordWriter, RequestRecord
from loadgen.runformat.rows import WorkerPhaseRow
from scenarios.plan import PhaseSpec
from scenarios.requests import PhaseRequests


class PhaseObserver(Protocol):
    """What a sender tells the case about the phase it sends."""

    def record(self, record: RequestRecord) -> None:
        """A request's record, written by this process."""

    def progress(self, done: int, failed: int) -> None:
        """Records written elsewhere so far in the phase, and how many of them failed."""

    def counted(self, statuses: Mapping[str, int]) -> None:
        """Records written elsewhere in the phase, by status (once, when it is sent)."""

    def cut_reason(self) -> str | None:
        """Why the phase is being cut short when not by the user (its server died)."""


@dataclass(frozen=True)
class SentPhase:
    """How a phase was sent: its timing (boundaries on this process's clock, loop lag, late
    sends, warm-up) and, with workers, one row per worker for ``phases.jsonl``."""

    timing: PhaseTiming
    workers: list[WorkerPhaseRow] | None = None


class Sender(ABC):
    """Sends a case's phases (see the module docstring)."""

    #: How each sending thread was placed (``case.json``'s ``client``), as the sender opened.
    client: list[dict[str, object] | None]

    @abstractmethod
    async def send(
        self, phase: PhaseSpec, requests: PhaseRequests, observer: PhaseObserver
    ) -> SentPhase:
        """Send ``phase`` (resolved, its ``requests`` materialized); every planned request
        ends with a record. Cancellation cuts the phase: requests in flight are labelled
        ``interrupted`` (or cut short by ``observer.cut_reason()``), those not sent get
        ``not_sent`` records, and it propagates.

        Raises:
            RunWriteError: a record could not be written.
            RuntimeError: a worker failed (its reason).
        """

    @abstractmethod
    def not_sent_writer(self) -> AbstractContextManager[RecordWriter]:
        """Where the coordinator writes the ``not_sent`` records of phases that will never
        run (the case's ``requests.jsonl``)."""
