"""A case's phases in order: each resolved, sent by the case's sender, settled, and written
to ``phases.jsonl``.

Per phase: its late-bound figures resolved (``loadgen.case.late``); its requests sent
(``loadgen.senders``) while a :class:`~loadgen.server_watch.ServerWatch` probes the server
and its faults are injected (``loadgen.replicas``); then, when asked, a wait until the server
is idle again; a wait for a scrape that started after its last request (so counter deltas
cover it); the settle wait; its measurement if a figure names it; its line in
``phases.jsonl``. A phase cut short (its server died, Ctrl-C, a failure) still gets its line,
marked ``interrupted`` with what ended it; when the server is gone, every later phase's
requests are recorded ``not_sent``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from loadgen.case.ending import CaseOutcome
from loadgen.case.hooks import RunHooks
from loadgen.case.late import LateFigures
from loadgen.clock import Clock
from loadgen.measure import RequestFacts
from loadgen.phase import write_not_sent
from loadgen.records import RequestRecord
from loadgen.replicas import Replicas
from loadgen.runformat import PhaseRow, RunWriteError
from loadgen.runformat.layout import PHASES_FILE, append_jsonl
from loadgen.runformat.rows import PhaseEnd
from loadgen.senders.base import Sender, SentPhase
from loadgen.server_watch import ServerGone, ServerWatch
from metrics.probe import read_gauge, wait_for_gauge_at_most
from metrics.scraper import ScraperProcess
from scenarios.plan import CaseSpec, PhaseSpec, Plan
from scenarios.requests import PhaseRequests
from scenarios.workloads import materialize
from server.manager import RunningServer
from server.net.errors import describe_exception


@dataclass
class CaseRun:
    """What the phases of one case share while they run."""

    plan: Plan
    case: CaseSpec
    server: RunningServer
    cdir: Path
    sender: Sender
    clock: Clock
    hooks: RunHooks
    replicas: Replicas | None
    outcome: CaseOutcome
    late: LateFigures


class PhaseTally:
    """The case's side of a phase being sent (``loadgen.senders.base.PhaseObserver``): counts
    go to the outcome, failures to the server watch, facts to the phase's measurement (when
    ``facts`` is a list), progress to the hooks."""

    def __init__(self, run: CaseRun, watch: ServerWatch, facts: list[RequestFacts] | None):
        self.run, self.watch, self.facts = run, watch, facts
        self.failed_before = 0

    def record(self, record: RequestRecord) -> None:
        self.watch.note(record)
        self.run.outcome.requests += 1
        if record.status == "error":
            self.run.outcome.failed_requests += 1
        if self.facts is not None:
            self.facts.append(RequestFacts.of(record))
        if self.run.hooks.on_request_done:
            self.run.hooks.on_request_done(record)

    def progress(self, done: int, failed: int) -> None:
        if failed > self.failed_before:  # a growing failure count: is the server there?
            self.watch.note_failure()
        self.failed_before = failed
        if self.run.hooks.on_requests_progress is not None:
            self.run.hooks.on_requests_progress(done, failed)

    def counted(self, statuses: Mapping[str, int]) -> None:
        self.run.outcome.requests += sum(statuses.values())
        self.run.outcome.failed_requests += statuses.get("error", 0)

    def cut_reason(self) -> str | None:
        return self.watch.gone


async def run_phases(run: CaseRun, phases: tuple[PhaseSpec, ...], scraper: ScraperProcess) -> None:
    """Run ``phases`` in order; when the server goes away, the rest are recorded unsent.
    After each phase that ended, the hooks' ``between_phases`` is awaited (a gate pair's turn).

    Raises:
        ServerGone: the server died or stopped answering.
        Exception: whatever failed the phase (its line is written first).
    """
    for k, phase in enumerate(phases):
        try:
            await run_one_phase(run, phase, scraper)
        except ServerGone:
            _account_phases_not_run(run, phases[k + 1 :])
            raise
        if run.hooks.between_phases is not None:
            await run.hooks.between_phases(run.case.name, phase.name)


async def run_one_phase(run: CaseRun, planned: PhaseSpec, scraper: ScraperProcess) -> None:
    """Resolve the phase's late-bound figures, send it, inject its faults, wait for a scrape
    that saw it all, settle, measure it if a figure names it, and append its line to
    phases.jsonl (see the module docstring).

    Raises:
        ServerGone: the server died or stopped answering (during or right after it).
        RuntimeError: the scraper could not write its files, or a worker failed.
    """
    phase, resolution = run.late.resolve(planned)
    requests = materialize(phase.workload, phase.name, run.plan.seed, run.plan.tokens)
    running_before = None
    if phase.settle_until_idle_s > 0:
        async with httpx.AsyncClient(timeout=5.0) as probe:
            running_before = await read_gauge(probe, run.server.url, "num_requests_running")
    if run.hooks.on_phase_start:
        shown = None if phase.arrival.ends_on_time else len(requests)
        run.hooks.on_phase_start(run.case.name, phase.name, shown)
    # Facts for the phases a late-bound figure names: a few ints per request, dropped after.
    facts: list[RequestFacts] | None = [] if phase.name in run.plan.measured_phases() else None
    watch = ServerWatch(run.server, phase.name)
    sent = await _send(run, phase, requests, PhaseTally(run, watch, facts), watch, resolution)
    idle = None
    if running_before is not None:
        # Orphaned work outlives the clients: wait for the server to finish it.
        idle = await wait_for_gauge_at_most(
            run.server.url, "num_requests_running", running_before, phase.settle_until_idle_s
        )
    post_scrape, waited_s = await _scrape_after(run, phase, scraper, sent.timing.last_end_ns)
    end_ns = run.clock.now_ns()
    measured = run.late.measure(phase, facts) if facts is not None else {}
    row = _completed_row(phase, sent, resolution, measured, end_ns, len(requests))
    row.server_idle_after, row.post_scrape_start_ns = idle, post_scrape
    row.post_scrape_waited_s = waited_s
    append_jsonl(run.cdir / PHASES_FILE, row)
    if run.hooks.on_phase_end:
        run.hooks.on_phase_end(run.case.name, phase.name)
    code = run.server.exit_code()
    if code is not None:
        raise ServerGone(f"vLLM exited with code {code} during phase {phase.name}")


async def _send(
    run: CaseRun,
    phase: PhaseSpec,
    requests: PhaseRequests,
    tally: PhaseTally,
    watch: ServerWatch,
    resolution: dict[str, Any] | None,
) -> SentPhase:
    """Send the phase while ``watch`` guards it and its faults are injected; a phase cut
    short gets its ``interrupted`` line in ``phases.jsonl`` before the exception goes on.

    Raises:
        ServerGone: the watch found the server gone (it cut the phase, not the user).
        BaseException: whatever else cut the phase.
    """
    faults = None
    if phase.faults:
        if run.replicas is None:
            raise ValueError(f"phase {phase.name}: faults need replicas")
        faults = asyncio.create_task(run.replicas.inject(phase.faults, run.clock.now_ns()))
    began = run.clock.now_ns()
    try:
        sending = asyncio.ensure_future(run.sender.send(phase, requests, tally))
        watch.guard(sending)
        sent = await sending
        # A dead server fails every request at once: find out before waiting for scrapes.
        gone = watch.gone or await watch.verdict()
        if gone is not None:
            raise ServerGone(gone)
    except BaseException as exc:
        watch.close()
        if faults is not None:
            faults.cancel()
        task = asyncio.current_task()
        stopped_by_watch = isinstance(exc, asyncio.CancelledError) and watch.gone is not None
        by_watch = stopped_by_watch and task is not None and not task.cancelling()
        _record_cut_short(run, phase, exc, watch.gone if by_watch else None, began,
                          len(requests), resolution)  # fmt: skip
        if by_watch:
            raise ServerGone(watch.gone) from None  # the watch cut the phase, not the user
        raise
    if faults is not None:
        await faults  # a restart may still be under way
    return sent


def _record_cut_short(
    run: CaseRun,
    phase: PhaseSpec,
    exc: BaseException,
    watch_gone: str | None,
    began: int,
    requests: int,
    resolution: dict[str, Any] | None,
) -> None:
    """Append the line of a phase cut short by ``exc``: its boundaries, so its (flushed)
    records stay analysable, and what ended it.

    Raises:
        RunWriteError: the line could not be written, and ``exc`` is not itself a write
            error (else the disk is full: the first write that failed is the one to report).
    """
    ended_by, reason = _phase_end(exc, watch_gone)
    now = run.clock.now_ns()
    try:
        append_jsonl(
            run.cdir / PHASES_FILE,
            PhaseRow(phase=phase.name, start_ns=began, last_end_ns=now, end_ns=now,
                     settle_s=0.0, requests=requests, resolved=resolution,
                     interrupted=True, ended_by=ended_by, end_reason=reason),
        )  # fmt: skip
    except RunWriteError:
        if not isinstance(exc, RunWriteError):
            raise


def _phase_end(exc: BaseException, watch_gone: str | None) -> tuple[PhaseEnd, str]:
    """What cut a phase short, and why in words, from the exception that cut it:
    ``watch_gone`` is the server watch's reason when the watch (not the user) cancelled it."""
    if watch_gone is not None:
        return "server_died", watch_gone
    if isinstance(exc, ServerGone):
        return "server_died", str(exc)
    if isinstance(exc, asyncio.CancelledError | KeyboardInterrupt):
        return "interrupt", "interrupted by the user (Ctrl-C or SIGTERM)"
    if isinstance(exc, RunWriteError):
        return "error", str(exc)
    return "error", describe_exception(exc)


async def _scrape_after(
    run: CaseRun, phase: PhaseSpec, scraper: ScraperProcess, last_end_ns: int
) -> tuple[int | None, float]:
    """Wait (bounded) for a scrape that started after the phase's last request ended, then
    the phase's settle time: (that scrape's start, or ``None`` when none landed in time and
    the phase's counter deltas are stale; seconds waited for it).

    Raises:
        RuntimeError: the scraper could not write its files (the case stops; the line is its
            error).
    """
    waited_from = run.clock.now_ns()
    post_scrape = await scraper.wait_scrape_started_at_or_after(
        last_end_ns, scraper.landing_bound_s
    )
    now = run.clock.now_ns()
    if scraper.failure:
        raise RuntimeError(scraper.failure)
    if post_scrape is None:
        run.hooks.message(
            f"phase {phase.name}: no successful scrape within {scraper.landing_bound_s:g} s "
            "after its last request; its counter deltas are stale"
        )
    await run.clock.sleep_until_ns(max(now, last_end_ns) + int(phase.settle_s * 1e9))
    return post_scrape, round((now - waited_from) / 1e9, 3)


def _completed_row(
    phase: PhaseSpec,
    sent: SentPhase,
    resolution: dict[str, Any] | None,
    measured: dict[str, Any],
    end_ns: int,
    planned: int,
) -> PhaseRow:
    """The ``phases.jsonl`` line of a phase that ran to its plan's end (the caller adds
    what the waits after it found)."""
    timing = sent.timing
    return PhaseRow(
        phase=phase.name,
        start_ns=timing.start_ns,
        last_end_ns=timing.last_end_ns,
        end_ns=end_ns,
        settle_s=phase.settle_s,
        requests=timing.dispatched,
        resolved=resolution,
        measurement=measured.get("measurement"),
        derived=measured.get("derived"),
        loop_lag_max_ms=timing.loop_lag_max_ms,
        loop_lag_p99_ms=timing.loop_lag_p99_ms,
        late_sends=timing.late_sends,
        warmup_connections=timing.warmup_connections,
        warmup_opened=timing.warmup_opened,
        warmup_failed=timing.warmup_failed,
        warmup_ms=timing.warmup_ms,
        requested_concurrency=phase.arrival.concurrency_limit(planned),
        workers=sent.workers,
        ended_by="plan",
    )


def _account_phases_not_run(run: CaseRun, phases: tuple[PhaseSpec, ...]) -> None:
    """The phases after the one whose server went away: every request ``not_sent`` (with
    workers, the coordinator writes these into the case's ``requests.jsonl`` itself)."""
    with run.sender.not_sent_writer() as writer:
        for planned in phases:
            if planned.arrival.time_limit_s is not None:
                continue  # sends until its time is up: no planned count to account for
            try:
                phase, _ = planned.resolved(run.late.measurements)
                requests = materialize(phase.workload, phase.name, run.plan.seed, run.plan.tokens)
            except ValueError:
                continue  # sized from a measurement that never came: nothing was planned
            run.outcome.requests += write_not_sent(
                case=run.case.name, phase=phase.name, requests=requests, writer=writer,
                scheduled_ns=run.clock.now_ns(),
            )  # fmt: skip
