"""Executing a plan: per case, a server (started or attached), a scraper, the phases in order.

Flow: sizing case's server → real capacity → plan (written before any load) → for each case:
what it starts (``loadgen.case.starts``: scraper, replicas, relay), its phases in order sent
by its sender (``loadgen.case.phases``, ``loadgen.senders``; each: requests, then a settle
wait so counters catch up), how it ends (``loadgen.case.ending``: its status in
``case.json``), everything it started stopped; consecutive cases of one server config share
the server.

Late-bound figures (``scenarios.late``): a phase that a plan's figure names is measured right
after it ran (``loadgen.measure``, from the facts of its records, kept in memory for those
phases only); a phase whose rate depends on such a measurement is resolved just before it runs
(``PhaseSpec.resolved``), and the plan's derived figures right after their source phase. Each
resolution is printed (``RunHooks.on_figure``) and recorded with its inputs on the phase's
line of ``phases.jsonl`` (``measurement``, ``resolved``, ``derived``); one that cannot be
made (its source measured nothing) fails the case before the phase sends anything.

Failures are recorded, not raised past the case: a server that dies mid-run (a started one
exits; an attached one stops answering ``/health``, probed after a request loses its
connection and after each phase, :mod:`loadgen.server_watch`) stops the case at once: the
phase is cut, its unsent requests and every later phase's are recorded ``not_sent``, the
records are flushed and the case is marked failed ("server at URL stopped answering during
phase X"); the run goes on to the next case and ends with status ``failed``. Failed requests
alone do not fail a case: they are data, counted and reported.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
from pathlib import Path

from loadgen.case.ending import (
    CaseOutcome,
    check_relays_ran_through,
    ended_to_the_end,
    recorded_failures,
    write_case_info,
)
from loadgen.case.hooks import RunHooks
from loadgen.case.late import LateFigures
from loadgen.case.phases import CaseRun, run_phases
from loadgen.case.starts import open_server, start_case, start_scraper
from loadgen.clock import Clock, MonotonicClock
from loadgen.kept_servers import KeptServers
from loadgen.kvevents.hub import KvEventHub
from loadgen.replicas import SharedReplicas
from loadgen.runformat import CaseInfo, RunWriteError
from loadgen.runformat.layout import CASE_FILE, PLAN_FILE, SERVER_DIR, case_dir, write_json
from loadgen.senders.choice import open_sender
from loadgen.workers.process import WorkersConfig
from metrics.scraper import ScraperProcess
from scenarios.late import LateBindingError
from scenarios.plan import CaseSpec, Plan
from server.manager import RunningServer
from server.net.errors import describe_exception

__all__ = ["CaseOutcome", "RunHooks", "execute_plan", "open_server", "run_case"]


async def run_case(
    plan: Plan,
    case: CaseSpec,
    server: RunningServer,
    run_dir: Path,
    hooks: RunHooks,
    clock: Clock,
    workers: WorkersConfig | None = None,
    shared: SharedReplicas | None = None,
    late: LateFigures | None = None,
) -> CaseOutcome:
    """Run every phase of ``case`` against ``server``; records go to the case directory.
    Its replicas 1…n−1 come from ``shared`` (kept for the next case of the same config);
    without it they are started for this case alone. ``late`` holds the run's measurements
    so far (shared by its cases); without it the case starts with none.

    What the case starts (``loadgen.case.starts``: scraper, replicas, relay), how its load is
    sent (``loadgen.senders``: with ``workers`` that split the load, worker processes or Ray
    actors writing one record file each; otherwise this process into ``requests.jsonl``) and
    how it ends (``loadgen.case.ending``: its status is ``failed`` only when its
    infrastructure failed; failed requests are data, counted in ``failed_requests``).

    Raises:
        RunWriteError: a file of the run could not be written (the case is recorded first).
        asyncio.CancelledError: the user interrupted the run (likewise).
    """
    workers = workers or WorkersConfig()
    cdir = case_dir(run_dir, case.name)
    outcome = CaseOutcome(case.name)
    write_case_info(cdir, case, server, None)
    try:
        scraper = start_scraper(plan, server, cdir)
    except Exception as exc:  # no case.json left ``running``: the case failed, then the run
        why = describe_exception(exc)
        outcome.status, outcome.error = "failed", f"scraper did not start: {why}"
        write_case_info(cdir, case, server, outcome, None, exc)
        raise
    stack = contextlib.AsyncExitStack()
    if shared is None:
        shared = SharedReplicas(clock)
        stack.push_async_callback(shared.stop)
    client: list[dict[str, object] | None] = []  # how each sending thread was placed
    try:
        with recorded_failures(outcome, cdir):
            started = await start_case(stack, plan, case, server, cdir, scraper, shared)
            phases = plan.phases_of(case)
            async with open_sender(
                workers, plan, phases, case.name, cdir, started.target, clock,
                placement=started.placement, helpers_problem=started.helpers_problem,
                message=hooks.message,
            ) as sender:  # fmt: skip
                client = sender.client
                run = CaseRun(
                    plan, case, server, cdir, sender, clock, hooks, started.servers.replicas,
                    outcome, late or LateFigures(plan, hooks),
                )  # fmt: skip
                await run_phases(run, phases, scraper)
            check_relays_ran_through((r.name, r.exit_code) for r in started.relays)
    finally:
        pending = sys.exc_info()[1]  # the exception ending the case, if one does
        if hooks.on_case_ending:
            hooks.on_case_ending(case.name)
        try:
            await ended_to_the_end(outcome, _stop_started(stack, scraper))
        except BaseException as exc:  # a signal now, too: case.json is final all the same
            pending = exc
            raise
        finally:
            if scraper.failure and outcome.status != "interrupted":  # the cause, in one line
                outcome.status, outcome.error = "failed", scraper.failure
                hooks.message(f"case {case.name}: {scraper.failure}")
            write_case_info(cdir, case, server, outcome, client, pending)
    return outcome


def _resolved_case(
    case: CaseSpec, late: LateFigures, run_dir: Path, hooks: RunHooks
) -> CaseSpec | None:
    """``case`` with its late flags resolved from the earlier cases' measurements
    (``CaseSpec.resolved``; each printed); ``None``, with the case recorded failed, when one
    cannot be (its source measured nothing usable)."""
    try:
        resolved, record = case.resolved(late.measurements)
    except LateBindingError as exc:
        write_json(
            case_dir(run_dir, case.name) / CASE_FILE,
            CaseInfo(case=case.model_dump(mode="json"), status="failed", error=str(exc)),
        )
        hooks.message(f"case {case.name}: late flags unresolved: {exc}")
        return None
    for flag, used in (record or {}).items():
        hooks.figure(f"case {case.name}: {flag} {used['value']} = {case_flag(case, flag)}")
    return resolved


def case_flag(case: CaseSpec, flag: str) -> str:
    """How the late ``flag`` of ``case`` is made, in words."""
    return next(f.figure.describe() for f in case.late_flags if f.flag == flag)


async def _stop_started(stack: contextlib.AsyncExitStack, scraper: ScraperProcess) -> None:
    """Stop what the case started: its replicas and relays, then its scraper."""
    await stack.aclose()
    await asyncio.to_thread(scraper.stop)


async def execute_plan(
    plan: Plan,
    run_dir: Path,
    hooks: RunHooks | None = None,
    first_server: RunningServer | None = None,
    clock: Clock | None = None,
    workers: WorkersConfig | None = None,
    kv_events: KvEventHub | None = None,
    kept: KeptServers | None = None,
) -> list[CaseOutcome]:
    """Run all cases of ``plan`` in order; cases with identical server configs share a start.

    ``first_server`` is the already-started server of ``plan.cases[0]`` (the sizing case);
    ``workers`` how the load is spread (default: this process alone); ``kv_events`` the
    run's KV-event recorders, which the servers of cases that record events publish to;
    ``kept``: servers kept across runs (``loadgen.kept_servers``), taken from there and never
    stopped here (a case recording KV events gets its own, as its recorder is the run's).
    """
    hooks = hooks or RunHooks()
    clock = clock or MonotonicClock()
    write_json(run_dir / PLAN_FILE, plan.model_dump(mode="json"))
    outcomes: list[CaseOutcome] = []
    shared = SharedReplicas(clock, kv_events)  # replicas 1…n−1, kept like ``server``
    server = first_server
    server_key: str | None = (
        plan.cases[0].model_dump_json(include={"server", "url"}) if server else None
    )
    late = LateFigures(plan, hooks)  # one set of measurements for every case
    try:
        for planned in plan.cases:
            case = _resolved_case(planned, late, run_dir, hooks)
            if case is None:
                outcomes.append(CaseOutcome(planned.name, "failed", "late flags unresolved"))
                continue
            key = case.model_dump_json(include={"server", "url"})
            # A different config, or a shared server that died (or, attached, stopped
            # answering) in the last case: start anew, or attach anew, which fails fast.
            gone = bool(outcomes) and outcomes[-1].server_gone
            if server is not None and (key != server_key or gone or server.exit_code() is not None):
                await shared.stop()
                await _stop_unless_kept(server, kept)
                server = None
            if server is None:
                try:
                    workdir = case_dir(run_dir, case.name) / SERVER_DIR
                    keep = kept is not None and not case.record_kv_events
                    opened = kept.open(case, hooks) if kept and keep else None
                    server = await (opened or open_server(case, workdir, hooks, kv_events))
                    server_key = key
                except RunWriteError:
                    raise  # the run cannot go on
                except Exception as exc:
                    why = f"server did not start: {describe_exception(exc)}"
                    outcome = CaseOutcome(case.name, "failed", why)
                    write_json(
                        case_dir(run_dir, case.name) / CASE_FILE,
                        CaseInfo(
                            case=case.model_dump(mode="json"),
                            status="failed",
                            error=outcome.error,
                        ),
                    )
                    outcomes.append(outcome)
                    hooks.message(f"case {case.name}: server did not start")
                    continue
            if hooks.on_case_start:
                hooks.on_case_start(case, server)
            outcomes.append(
                await run_case(plan, case, server, run_dir, hooks, clock, workers, shared, late)
            )
    finally:
        await shared.stop()
        if server is not None:
            await _stop_unless_kept(server, kept)
    return outcomes


async def _stop_unless_kept(server: RunningServer, kept: KeptServers | None) -> None:
    """Stop ``server`` (shielded from cancellation) unless ``kept`` keeps it for later runs;
    a kept one is released (``KeptServers.release``: idle, it may be stopped to make room)."""
    if kept is None or not kept.owns(server):
        await asyncio.shield(asyncio.to_thread(server.stop))
    else:
        kept.release(server)
