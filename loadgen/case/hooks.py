"""Progress callbacks of a run (the CLI renders them; tests leave them empty)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from loadgen.records import RequestRecord
from scenarios.plan import CaseSpec
from server.manager import RunningServer, StatusCallback


@dataclass
class RunHooks:
    """Optional progress callbacks (the CLI renders them; tests leave them empty)."""

    on_server_status: StatusCallback | None = None
    on_case_start: Callable[[CaseSpec, RunningServer], None] | None = None
    #: (case, phase, requests planned; ``None`` when a duration ends the sending)
    on_phase_start: Callable[[str, str, int | None], None] | None = None
    on_request_done: Callable[[RequestRecord], None] | None = None
    #: With workers: records written so far in the phase, and how many failed.
    on_requests_progress: Callable[[int, int], None] | None = None
    on_phase_end: Callable[[str, str], None] | None = None
    #: (case): its phases are over (or cut) and what it started is about to be stopped
    on_case_ending: Callable[[str], None] | None = None
    on_message: Callable[[str], None] | None = None
    #: a figure measured or resolved at run time, as one line of text
    on_figure: Callable[[str], None] | None = None
    #: (case, phase): awaited after each phase ends (its line written), before anything
    #: else of the run; a gate pair's runs hand their turn over here (``loadgen.turns``)
    between_phases: Callable[[str, str], Awaitable[None]] | None = None

    def message(self, text: str) -> None:
        if self.on_message is not None:
            self.on_message(text)

    def figure(self, text: str) -> None:
        if self.on_figure is not None:
            self.on_figure(text)
