"""Executing a plan: per case, a server (started or attached), a scraper, the phases in order.

Flow: sizing case's server → real capacity → plan (written before any load) → for each case:
scraper process on, phases in order (each: requests, then a settle wait so counters catch
up), scraper off, server stopped.

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
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import httpx

from loadgen.client import Target
from loadgen.clock import Clock, MonotonicClock
from loadgen.connections import open_session, pool_limit
from loadgen.gateway_process import running_gateway_process
from loadgen.measure import RequestFacts, measure_phase
from loadgen.phase import heap_frozen, run_phase, write_not_sent
from loadgen.placement import Placement, pin_helpers, placed, placement_for_servers
from loadgen.proxies import running_proxy
from loadgen.records import RecordWriter, RequestRecord
from loadgen.replicas import Replicas
from loadgen.runformat import CaseInfo, PhaseRow, RunStatus, RunWriteError
from loadgen.runformat.atomic import write_error_under
from loadgen.runformat.layout import (
    CASE_FILE,
    CLOCK_OFFSETS_FILE,
    GATEWAY_EVENTS_FILE,
    GATEWAY_LOG,
    PHASES_FILE,
    PLAN_FILE,
    PROXY_DIR,
    REQUESTS_FILE,
    SERVER_DIR,
    append_jsonl,
    case_dir,
    write_json,
)
from loadgen.runformat.rows import PhaseEnd
from loadgen.server_watch import ServerGone, ServerWatch
from loadgen.workers.base import ClockOffset, WorkerPool
from loadgen.workers.process import SplitPhase, WorkersConfig, open_pool, run_split_phase
from metrics.probe import read_gauge, wait_for_gauge_at_most
from metrics.scraper import ScraperProcess
from scenarios.arrivals import ClosedLoop, concurrency_limit
from scenarios.late import STATISTIC_LABELS
from scenarios.plan import CaseSpec, PhaseSpec, Plan
from scenarios.workloads import materialize
from server.manager import RunningServer, StatusCallback, attach, start_server
from server.net.errors import describe_exception


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
    on_message: Callable[[str], None] | None = None
    #: a figure measured or resolved at run time, as one line of text
    on_figure: Callable[[str], None] | None = None

    def message(self, text: str) -> None:
        if self.on_message is not None:
            self.on_message(text)

    def figure(self, text: str) -> None:
        if self.on_figure is not None:
            self.on_figure(text)


@dataclass
class CaseOutcome:
    name: str
    status: RunStatus = "ok"
    error: str | None = None
    failed_requests: int = 0
    requests: int = 0
    #: The case failed because its server died or stopped answering.
    server_gone: bool = False


async def open_server(case: CaseSpec, workdir: Path, hooks: RunHooks) -> RunningServer:
    """Start (``case.server``) or attach to (``case.url``) the case's server.

    Raises:
        RunWriteError: a file of the server's ``workdir`` (its log, command, facts) could not
            be written: a failed write of the run, not a server that failed to start.
        Exception: whatever ``server.manager.start_server`` / ``attach`` raise.
    """
    if case.url is not None:
        return await attach(case.url)
    if case.server is None:
        raise ValueError(f"case {case.name} has neither a server config nor a URL")
    try:
        return await start_server(case.server, workdir, on_status=hooks.on_server_status)
    except OSError as exc:
        written = write_error_under(exc, workdir)
        if written is not None:
            raise written from exc
        raise


@dataclass
class _CaseRun:
    """What the phases of one case share while they run."""

    plan: Plan
    case: CaseSpec
    server: RunningServer
    cdir: Path
    target: Target
    session: aiohttp.ClientSession | None
    writer: RecordWriter | None
    clock: Clock
    hooks: RunHooks
    replicas: Replicas | None
    outcome: CaseOutcome
    pool: WorkerPool | None = None
    #: phase → its late-binding statistics (``loadgen.measure.measure_phase``)
    measurements: dict[str, dict[str, Any]] = field(default_factory=dict)


def _resolve(run: _CaseRun, planned: PhaseSpec) -> tuple[PhaseSpec, dict[str, Any] | None]:
    """The concrete phase and what resolving it used; prints the resolution."""
    phase, resolution = planned.resolved(run.measurements)
    if resolution is not None:
        source = resolution.get("rate_from")
        how = (
            f" = {source['factor']:g} × {source['phase']} {source['measured']:.3f} req/s"
            if source
            else ""
        )
        over = f" over {resolution['duration_s']:g} s" if "duration_s" in resolution else ""
        run.hooks.figure(
            f"{phase.name}: rate {resolution['rate_rps']:.3f} req/s{how}; "
            f"{resolution['requests']} requests{over}"
        )
    return phase, resolution


def _measure(run: _CaseRun, phase: PhaseSpec, facts: list[RequestFacts]) -> dict[str, Any]:
    """Measure ``phase`` for the figures that name it; print and return what it gave, with the
    plan's derived figures it resolves (``{"measurement": …, "derived": …}``)."""
    measurement = measure_phase(phase, facts)
    run.measurements[phase.name] = measurement
    shown = ", ".join(
        f"{STATISTIC_LABELS[k]} {measurement[k]:.3f}"
        for k in STATISTIC_LABELS
        if measurement.get(k) is not None
    )
    run.hooks.figure(
        f"{phase.name} measured over {measurement['window_s'] or 0:.1f} s "
        f"({measurement['ok_in_window']} ok requests sent in its window): {shown or 'nothing'}"
    )
    derived: dict[str, Any] = {}
    for name, figure in run.plan.derived.items():
        if figure.phase != phase.name:
            continue
        try:
            derived[name] = figure.inputs(run.measurements)
        except ValueError as exc:  # e.g. no TPOT from 1-token outputs: recorded, not fatal
            derived[name] = {"error": str(exc)}
            run.hooks.message(f"derived figure {name}: {exc}")
            continue
        run.hooks.figure(f"{name} = {figure.describe()} = {derived[name]['value']:.3f}")
    return {"measurement": measurement, "derived": derived}


async def _run_one_phase(run: _CaseRun, planned: PhaseSpec, scraper: ScraperProcess) -> None:
    """Resolve the phase's late-bound figures, send it, inject its faults, wait for a scrape
    that saw it all, settle, measure it if a figure names it, and append its line to
    phases.jsonl."""
    phase, resolution = _resolve(run, planned)
    requests = materialize(phase.workload, phase.name, run.plan.seed, run.plan.tokens)
    running_before = None
    if phase.settle_until_idle_s > 0:
        async with httpx.AsyncClient(timeout=5.0) as probe:
            running_before = await read_gauge(probe, run.server.url, "num_requests_running")
    by_duration = getattr(phase.arrival, "duration_s", None) is not None
    if run.hooks.on_phase_start:
        shown = None if by_duration and isinstance(phase.arrival, ClosedLoop) else len(requests)
        run.hooks.on_phase_start(run.case.name, phase.name, shown)
    # Facts for the phases a late-bound figure names: a few ints per request, dropped after.
    facts: list[RequestFacts] | None = [] if phase.name in run.plan.measured_phases() else None

    watch = ServerWatch(run.server, phase.name)

    def done(record: RequestRecord) -> None:
        watch.note(record)
        run.outcome.requests += 1
        if record.status == "error":
            run.outcome.failed_requests += 1
        if facts is not None:
            facts.append(RequestFacts.of(record))
        if run.hooks.on_request_done:
            run.hooks.on_request_done(record)

    faults = None
    if phase.faults:
        if run.replicas is None:
            raise ValueError(f"phase {phase.name}: faults need replicas")
        faults = asyncio.create_task(run.replicas.inject(phase.faults, run.clock.now_ns()))
    began = run.clock.now_ns()
    split: SplitPhase | None = None
    try:
        if run.pool is None:
            assert run.session is not None and run.writer is not None
            with heap_frozen():
                sending = asyncio.ensure_future(
                    run_phase(
                        case=run.case.name,
                        phase=phase.name,
                        requests=requests,
                        arrival=phase.arrival,
                        target=run.target,
                        session=run.session,
                        writer=run.writer,
                        clock=run.clock,
                        on_done=done,
                        cut_reason=lambda: watch.gone,
                    )
                )
                watch.guard(sending)
                timing = await sending
        else:
            splitting = asyncio.ensure_future(_run_split(run, phase, watch))
            watch.guard(splitting)
            split = await splitting
            timing = split.timing
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
        ended_by, reason = _phase_end(exc, watch.gone if by_watch else None)
        # Boundaries of the cut-short phase, so its (flushed) records stay analysable.
        now = run.clock.now_ns()
        try:
            append_jsonl(
                run.cdir / PHASES_FILE,
                PhaseRow(phase=phase.name, start_ns=began, last_end_ns=now, end_ns=now,
                         settle_s=0.0, requests=len(requests), resolved=resolution,
                         interrupted=True, ended_by=ended_by, end_reason=reason),
            )  # fmt: skip
        except RunWriteError:
            if not isinstance(exc, RunWriteError):
                raise
            # else the disk is full: the first write that failed is the one to report
        if by_watch:
            raise ServerGone(watch.gone) from None  # the watch cut the phase, not the user
        raise
    if faults is not None:
        await faults  # a restart may still be under way
    idle = None
    if running_before is not None:
        # Orphaned work outlives the clients: wait for the server to finish it.
        idle = await wait_for_gauge_at_most(
            run.server.url, "num_requests_running", running_before, phase.settle_until_idle_s
        )
    # Counter deltas must rest on a scrape that started after the last request ended; wait
    # for one (bounded); None means none landed in time and the phase's deltas are stale.
    waited_from = run.clock.now_ns()
    post_scrape = await scraper.wait_scrape_started_at_or_after(
        timing.last_end_ns, scraper.landing_bound_s
    )
    now = run.clock.now_ns()
    if scraper.failure:  # it could not write its files: the case stops (the line is its error)
        raise RuntimeError(scraper.failure)
    if post_scrape is None:
        run.hooks.message(
            f"phase {phase.name}: no successful scrape within {scraper.landing_bound_s:g} s "
            "after its last request; its counter deltas are stale"
        )
    await run.clock.sleep_until_ns(max(now, timing.last_end_ns) + int(phase.settle_s * 1e9))
    end_ns = run.clock.now_ns()
    measured = _measure(run, phase, facts) if facts is not None else {}
    append_jsonl(
        run.cdir / PHASES_FILE,
        PhaseRow(
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
            server_idle_after=idle,
            requested_concurrency=concurrency_limit(phase.arrival, len(requests)),
            post_scrape_start_ns=post_scrape,
            post_scrape_waited_s=round((now - waited_from) / 1e9, 3),
            workers=split.workers if split is not None else None,
            ended_by="plan",
        ),
    )
    if run.hooks.on_phase_end:
        run.hooks.on_phase_end(run.case.name, phase.name)
    code = run.server.exit_code()
    if code is not None:
        raise ServerGone(f"vLLM exited with code {code} during phase {phase.name}")


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


async def _run_phases(
    run: _CaseRun, phases: tuple[PhaseSpec, ...], scraper: ScraperProcess
) -> None:
    """Run ``phases`` in order; when the server goes away, the rest are recorded unsent."""
    for k, phase in enumerate(phases):
        try:
            await _run_one_phase(run, phase, scraper)
        except ServerGone:
            _account_phases_not_run(run, phases[k + 1 :])
            raise


def _account_phases_not_run(run: _CaseRun, phases: tuple[PhaseSpec, ...]) -> None:
    """The phases after the one whose server went away: every request ``not_sent`` (with
    workers, the coordinator writes these into the case's ``requests.jsonl`` itself)."""
    with contextlib.ExitStack() as stack:
        writer = run.writer or stack.enter_context(RecordWriter(run.cdir / REQUESTS_FILE))
        for planned in phases:
            if getattr(planned.arrival, "duration_s", None) is not None:
                continue  # sends until its time is up: no planned count to account for
            try:
                phase, _ = planned.resolved(run.measurements)
                requests = materialize(phase.workload, phase.name, run.plan.seed, run.plan.tokens)
            except ValueError:
                continue  # sized from a measurement that never came: nothing was planned
            run.outcome.requests += write_not_sent(
                case=run.case.name, phase=phase.name, requests=requests, writer=writer,
                scheduled_ns=run.clock.now_ns(),
            )  # fmt: skip


def _check_splittable(plan: Plan, phases: tuple[PhaseSpec, ...]) -> None:
    """Refuse, before any load, phases whose sending needs one process: a phase whose records
    a late-bound figure measures (the coordinator holds no records while workers send) and a
    closed loop that staggers its senders' starts (``ramp_s``; the workers' senders would not
    keep one staggered order).

    Raises:
        ValueError: such a phase is in ``phases``.
    """
    measured = plan.measured_phases()
    for phase in phases:
        ramp = isinstance(phase.arrival, ClosedLoop) and phase.arrival.ramp_s > 0
        if phase.name in measured or ramp:
            why = "later figures are measured from it" if not ramp else "it ramps its senders"
            raise ValueError(f"phase {phase.name} cannot be split across workers: {why}")


async def _run_split(run: _CaseRun, phase: PhaseSpec, watch: ServerWatch) -> SplitPhase:
    """Send ``phase`` through the case's workers; counts go to the outcome, clock offsets to
    ``clock_offsets.jsonl`` (before any load), records into the case directory; a growing
    failure count makes ``watch`` probe the server (the records stay in the workers)."""
    assert run.pool is not None
    failed_before = 0

    def progress(done: int, failed: int) -> None:
        nonlocal failed_before
        if failed > failed_before:
            watch.note_failure()
        failed_before = failed
        if run.hooks.on_requests_progress is not None:
            run.hooks.on_requests_progress(done, failed)

    def offsets(found: list[ClockOffset]) -> None:
        for o in found:
            append_jsonl(run.cdir / CLOCK_OFFSETS_FILE, o.as_row(phase.name))

    try:
        split = await run_split_phase(
            run.pool, case=run.case.name, phase=phase, seed=run.plan.seed,
            tokens=run.plan.tokens, target=run.target, clock=run.clock,
            on_progress=progress, on_offsets=offsets, cut_reason=lambda: watch.gone,
        )  # fmt: skip
    finally:
        await asyncio.shield(run.pool.gather_records(run.cdir))
    run.outcome.requests += sum(split.statuses.values())
    run.outcome.failed_requests += split.statuses.get("error", 0)
    if split.errors:
        raise RuntimeError("; ".join(split.errors))
    return split


def _check_relays_ran_through(relays: list[tuple[str, Callable[[], int | None]]]) -> None:
    """Fail the case when a process its requests went through (the gateway, a proxy) ended
    before the case did: requests through it failed for the relay's sake, not the server's.

    Raises:
        RuntimeError: one ended (its name and exit code, negative for a signal).
    """
    for name, exit_code in relays:
        code = exit_code()
        if code is not None:
            how = f"signal {-code}" if code < 0 else f"exit code {code}"
            raise RuntimeError(
                f"{name} ended during the case ({how}): requests through it failed because of "
                "it, not the server"
            )


async def run_case(
    plan: Plan,
    case: CaseSpec,
    server: RunningServer,
    run_dir: Path,
    hooks: RunHooks,
    clock: Clock,
    workers: WorkersConfig | None = None,
) -> CaseOutcome:
    """Run every phase of ``case`` against ``server``; records go to the case directory.

    The case's status is ``failed`` only when its infrastructure failed (server, scraper,
    gateway, a worker); failed requests are data, counted in ``failed_requests`` and in the
    report. With ``workers`` that split the load, each phase is sent by worker processes or
    Ray actors (``loadgen.workers``) writing one record file each; otherwise by this process
    into ``requests.jsonl``. The connection pool's limit is the largest requested concurrency
    of the case's phases (none for an uncapped open loop), so it never caps the load.
    """
    workers = workers or WorkersConfig()
    cdir = case_dir(run_dir, case.name)
    outcome = CaseOutcome(case.name)
    write_json(
        cdir / CASE_FILE,
        CaseInfo(case=case.model_dump(mode="json"), server=server.describe(), status="running"),
    )
    target = Target(server.url, server.model_name)
    scraper = ScraperProcess(
        server.url, cdir, plan.scrape_interval_s, max_bytes=plan.metrics_max_bytes
    )
    scraper.start()
    stack = contextlib.AsyncExitStack()
    replicas = Replicas(case.server, cdir, clock) if case.server is not None else None
    client: list[dict[str, object] | None] = []  # how each sending thread was placed
    relays: list[tuple[str, Callable[[], int | None]]] = []  # the processes requests cross
    try:
        if case.replicas > 1:
            if replicas is None:
                raise ValueError(f"case {case.name}: replicas need a server config, not a URL")
            stack.push_async_callback(replicas.stop_all)
            await replicas.start(case.replicas)
        placement = placement_for_servers(
            plan.client_priority,
            [server.host, *(r.host for r in (replicas.servers.values() if replicas else ()))],
        )
        # Helpers keep off the server's cores from the start: the first scrape is awaited
        # next, and a process left on the worker's busy core can wait there for many seconds.
        helper_problems = [pin_helpers([scraper.pid] if scraper.pid else [], placement)]
        if case.gateway is not None:
            gateway = await stack.enter_async_context(
                running_gateway_process(
                    [server.url, *(replicas.urls() if replicas else [])],
                    cdir / GATEWAY_LOG,
                    propagate_cancellation=case.gateway.propagate_cancellation,
                    events_path=cdir / GATEWAY_EVENTS_FILE,
                    extra_args=case.gateway.extra_args,
                )
            )
            target = Target(gateway.url, server.model_name)
            helper_problems.append(pin_helpers([gateway.pid], placement))
            relays.append(("the gateway", gateway.exit_code))
        elif case.proxy is not None:
            proxy = await stack.enter_async_context(
                running_proxy(case.proxy, server.url, cdir / PROXY_DIR)
            )
            target = Target(proxy.url, server.model_name)
            helper_problems.append(pin_helpers([proxy.pid], placement))
            relays.append((case.proxy.kind, proxy.exit_code))
        helpers_problem = "; ".join(p for p in helper_problems if p) or None
        if not await asyncio.to_thread(scraper.wait_first_scrape):
            # Without samples no counter delta can be computed: fail before sending load.
            raise RuntimeError(
                scraper.failure
                or f"no successful /metrics scrape from {server.url} (errors in {cdir}/metrics)"
            )
        # Two scrapes of baseline before the first phase starts.
        await asyncio.sleep(2 * plan.scrape_interval_s)
        phases = plan.phases_of(case)
        # A duration-driven open loop has no request count yet; its limit does not use one.
        limit = pool_limit(concurrency_limit(p.arrival, p.workload.requests or 0) for p in phases)
        if workers.split:
            _check_splittable(plan, phases)
            pool = await stack.enter_async_context(
                open_pool(
                    workers, cdir, limit, plan.stall_timeout_s, plan.request_timeout_s, placement
                )
            )
            for k, worker in enumerate(await pool.placements()):
                applied = worker.with_problem(helpers_problem) if worker else None
                client.append(applied.as_dict() if applied else None)
                shown = applied.describe() if applied else "as Ray started it"
                hooks.message(f"load generator worker {k}: {shown}")
            # The coordinator sends nothing itself: no session, no record file of its own;
            # it only keeps off the server's cores.
            with placed(Placement(False, placement.cpus, placement.reason)) as coordinator:
                if coordinator.problem:
                    hooks.message(f"load generator coordinator: {coordinator.problem}")
                run = _CaseRun(
                    plan, case, server, cdir, target, None, None, clock, hooks, replicas,
                    outcome, pool,
                )  # fmt: skip
                await _run_phases(run, phases, scraper)
        else:
            async with open_session(
                read_timeout_s=plan.stall_timeout_s,
                total_timeout_s=plan.request_timeout_s,
                pool_limit=limit,
            ) as session:
                with (
                    RecordWriter(cdir / REQUESTS_FILE) as writer,
                    placed(placement) as sending,
                ):
                    applied = sending.with_problem(helpers_problem)
                    client = [applied.as_dict()]
                    hooks.message(f"load generator: {applied.describe()}")
                    run = _CaseRun(
                        plan, case, server, cdir, target, session, writer, clock, hooks,
                        replicas, outcome,
                    )  # fmt: skip
                    await _run_phases(run, phases, scraper)
        _check_relays_ran_through(relays)
    except ServerGone as exc:
        outcome.status, outcome.error, outcome.server_gone = "failed", str(exc), True
    except RunWriteError as exc:  # the run cannot go on: recorded, then the run ends
        outcome.status, outcome.error = "failed", str(exc)
        raise
    except OSError as exc:  # the gateway's log, say: a file of the case that cannot be written
        written = write_error_under(exc, cdir)
        outcome.status = "failed"
        outcome.error = str(written) if written else describe_exception(exc)
        if written is not None:
            raise written from exc
    except Exception as exc:  # recorded as the case's failure; the run goes on
        outcome.status = "failed"
        outcome.error = describe_exception(exc)
    except asyncio.CancelledError:
        outcome.status, outcome.error = "interrupted", "interrupted (Ctrl-C or SIGTERM)"
        raise
    finally:
        await stack.aclose()
        await asyncio.to_thread(scraper.stop)
        if scraper.failure and outcome.status != "interrupted":  # the cause, in one line
            outcome.status, outcome.error = "failed", scraper.failure
            hooks.message(f"case {case.name}: {scraper.failure}")
        info = CaseInfo(
            case=case.model_dump(mode="json"),
            server=server.describe(),
            status=outcome.status,
            error=outcome.error,
            requests=outcome.requests,
            failed_requests=outcome.failed_requests,
            client=client,
        )
        pending = sys.exc_info()[1]  # the exception ending the case, if one does
        try:
            write_json(cdir / CASE_FILE, info)
        except RunWriteError:
            if pending is None:
                raise  # else the error under way (maybe the first write error) is reported
    return outcome


async def execute_plan(
    plan: Plan,
    run_dir: Path,
    hooks: RunHooks | None = None,
    first_server: RunningServer | None = None,
    clock: Clock | None = None,
    workers: WorkersConfig | None = None,
) -> list[CaseOutcome]:
    """Run all cases of ``plan`` in order; cases with identical server configs share a start.

    ``first_server`` is the already-started server of ``plan.cases[0]`` (the sizing case);
    ``workers`` how the load is spread (default: this process alone).
    """
    hooks = hooks or RunHooks()
    clock = clock or MonotonicClock()
    write_json(run_dir / PLAN_FILE, plan.model_dump(mode="json"))
    outcomes: list[CaseOutcome] = []
    server = first_server
    server_key: str | None = (
        plan.cases[0].model_dump_json(include={"server", "url"}) if server else None
    )
    try:
        for case in plan.cases:
            key = case.model_dump_json(include={"server", "url"})
            # A different config, or a shared server that died (or, attached, stopped
            # answering) in the last case: start anew, or attach anew, which fails fast.
            gone = bool(outcomes) and outcomes[-1].server_gone
            if server is not None and (key != server_key or gone or server.exit_code() is not None):
                await asyncio.shield(asyncio.to_thread(server.stop))
                server = None
            if server is None:
                try:
                    server = await open_server(
                        case, case_dir(run_dir, case.name) / SERVER_DIR, hooks
                    )
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
            outcomes.append(await run_case(plan, case, server, run_dir, hooks, clock, workers))
    finally:
        if server is not None:
            await asyncio.shield(asyncio.to_thread(server.stop))
    return outcomes
