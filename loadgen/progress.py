"""Terminal progress for long runs (rich): server start-up status, one bar per phase (a bar
without a total when a duration ends the sending), and the figures measured or resolved at run
time (late-bound rates, derived SLOs) printed between phases.

Rendering runs on rich's refresh thread at a low rate; the phase's loop-lag figures in the
report show whether it disturbed the load loop.
"""

from __future__ import annotations

import sys

from rich.console import Console
from rich.markup import escape
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
)
from rich.status import Status

from loadgen.execute import RunHooks
from loadgen.records import RequestRecord
from scenarios.plan import CaseSpec
from server.manager import RunningServer
from server.net.urls import RedactingStream


def make_console() -> Console:
    """A stderr console; 160 columns when not a terminal (logs, CI) so tables stay readable."""
    console = Console(file=RedactingStream(sys.stderr))  # type: ignore[arg-type]
    if not console.is_terminal:
        console.width = 160
    return console


class RichProgress:
    """Builds :class:`RunHooks` that draw on ``console`` (stderr by default)."""

    def __init__(self, console: Console | None = None, label: str = "") -> None:
        """``label``: put before every line (a gate pair's two runs share one console)."""
        self.console = console or make_console()
        self._label = escape(label)
        self._status: Status | None = None
        self._progress: Progress | None = None
        self._task: TaskID | None = None
        self._failed = 0

    def _server_status(self, elapsed_s: float, last_line: str) -> None:
        shown = escape(last_line[-90:])
        text = f"{self._label}starting vLLM… {elapsed_s:.0f} s  [dim]{shown}[/dim]"
        if self._status is None:
            self._status = self.console.status(text)
            self._status.start()
        else:
            self._status.update(text)

    def _stop_status(self) -> None:
        if self._status is not None:
            self._status.stop()
            self._status = None

    def _case_start(self, case: CaseSpec, server: RunningServer) -> None:
        self._stop_status()
        cap = server.capacity
        startup = f", started in {server.startup_s:.0f} s" if server.startup_s else ""
        self.console.print(
            f"{self._label}[bold]case {case.name}[/bold]: {server.url}, vLLM {server.version}, "
            f"KV capacity {cap.tokens if cap else '?'} tokens{startup}"
            + (f" ({escape(server.capacity_error)})" if server.capacity_error else "")
        )

    def _phase_start(self, case: str, phase: str, n: int | None) -> None:
        self._failed = 0
        self._progress = Progress(
            TextColumn("  {task.description:<22}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("failed {task.fields[failed]}"),
            TimeElapsedColumn(),
            console=self.console,
            refresh_per_second=2,
            transient=False,
        )
        self._progress.start()
        shown = escape(f"{self._label}{case}/{phase}")
        self._task = self._progress.add_task(shown, total=n, failed=0)

    def _request_done(self, record: RequestRecord) -> None:
        if record.status == "error":
            self._failed += 1
        if self._progress is not None and self._task is not None:
            self._progress.update(self._task, advance=1, failed=self._failed)

    def _requests_progress(self, done: int, failed: int) -> None:
        if self._progress is not None and self._task is not None:
            self._progress.update(self._task, completed=done, failed=failed)

    def _phase_end(self, case: str, phase: str) -> None:
        if self._progress is not None:
            self._progress.stop()
            self._progress = None

    def _message(self, text: str) -> None:
        self._stop_status()
        self.console.print(f"{self._label}[yellow]{escape(text)}[/yellow]")

    def _figure(self, text: str) -> None:
        # Between phases (no bar is live then): a figure measured or resolved at run time.
        self.console.print(f"  {self._label}[cyan]{escape(text)}[/cyan]")

    def hooks(self) -> RunHooks:
        return RunHooks(
            on_server_status=self._server_status,
            on_case_start=self._case_start,
            on_phase_start=self._phase_start,
            on_request_done=self._request_done,
            on_requests_progress=self._requests_progress,
            on_phase_end=self._phase_end,
            on_message=self._message,
            on_figure=self._figure,
        )

    def close(self) -> None:
        self._stop_status()
        if self._progress is not None:
            self._progress.stop()
