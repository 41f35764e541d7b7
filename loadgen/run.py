"""One scenario run, end to end: plan → execute (``loadgen.execute``) → ``run.json``.

A *run* is one run directory: this module makes the plan from the sizing server's real
capacity, has ``loadgen.execute`` execute it, and records in ``run.json`` how the run went
(``ok``, ``failed``, ``interrupted``); the CLI then builds the report and writes the manifest
last (``loadgen.cli.run_and_report``), also after a failure or Ctrl-C, so even a run cut
short leaves complete, flushed records. Also here: the event loop a run goes on, SIGTERM
handled as Ctrl-C, and the order of a gate's runs.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import sys
import time
from collections.abc import Callable, Coroutine, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel

from loadgen.clock import wall_anchor
from loadgen.execute import CaseOutcome, RunHooks, execute_plan, open_server
from loadgen.kept_servers import KeptServers, kept_case, kept_plan
from loadgen.kvevents.hub import KvEventHub
from loadgen.proxies import check_installed
from loadgen.redact import redact_command
from loadgen.runformat import FORMAT_VERSION, RunInfo, RunStatus, RunWriteError
from loadgen.runformat.atomic import SpaceReserve
from loadgen.runformat.layout import RUN_FILE, SERVER_DIR, case_dir, write_json
from loadgen.runformat.manifest import environment_facts
from loadgen.workers.process import WorkersConfig
from scenarios.base import Scenario
from scenarios.plan import Plan
from server.group_signals import GROUP_SIGNALS
from server.net.errors import describe_exception
from server.net.jsonl import writing

T = TypeVar("T")


async def cancel_on_sigterm(coro: Coroutine[Any, Any, T]) -> T:
    """Run ``coro``; the first SIGTERM or Ctrl-C cancels it, so servers stop and files close;
    a second or third signal during that cleanup is ignored (cancelling the cleanup itself
    would leave files open and ``running`` statuses). A signal inherited as ignored (a run
    started under ``nohup``) stays ignored. After ``coro`` ends both signals stay ignored,
    so the report and manifest that follow are written whole; ``group_signals_restored``
    restores them."""
    task = asyncio.current_task()
    assert task is not None
    loop = asyncio.get_running_loop()
    cancelled = False

    def first_cancels() -> None:
        nonlocal cancelled
        if not cancelled:
            cancelled = True
            task.cancel()

    handled = [s for s in GROUP_SIGNALS if signal.getsignal(s) is not signal.SIG_IGN]
    for sig in handled:
        loop.add_signal_handler(sig, first_cancels)
    try:
        return await coro
    finally:
        for sig in handled:
            loop.remove_signal_handler(sig)
            signal.signal(sig, signal.SIG_IGN)


@contextlib.contextmanager
def group_signals_restored() -> Iterator[None]:
    """Around a run and the writing of its report and manifest: SIGTERM's and Ctrl-C's
    dispositions from before are restored at the end (``cancel_on_sigterm`` leaves them
    ignored so the files that follow the run are written whole)."""
    before = {sig: signal.getsignal(sig) for sig in GROUP_SIGNALS}
    try:
        yield
    finally:
        for sig, handler in before.items():
            signal.signal(sig, handler)


def gate_order(repeats: int, order: str) -> list[str]:
    """The sequence of sides of a gate's ``repeats`` runs per side: ``abab`` alternates
    (A B A B …); ``abba`` alternates in mirrored pairs (A B B A A B …), which also cancels a
    linear drift of the machine: with A B A B the candidate runs on average half a slot later
    than the baseline."""
    out: list[str] = []
    for i in range(repeats):
        pair = ["baseline", "candidate"]
        out += pair if order == "abab" or i % 2 == 0 else pair[::-1]
    return out


@dataclass
class RunResult:
    """How a run ended: status, its directory, per-case outcomes, wall time (s), and the
    write error that ended it, if one did (``status`` is then ``failed``)."""

    run_dir: Path
    status: RunStatus
    outcomes: list[CaseOutcome] = field(default_factory=list)
    error: str | None = None
    wall_s: float = 0.0
    write_error: RunWriteError | None = None


def new_run_dir(root: Path, scenario: str) -> Path:
    """``root/<scenario>-<UTC timestamp>`` (a suffix is added if it exists)."""
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    path = root / f"{scenario}-{stamp}"
    n = 1
    while path.exists():
        n += 1
        path = root / f"{scenario}-{stamp}-{n}"
    return path


async def _plan_and_execute(
    scenario: Scenario,
    params: BaseModel,
    run_dir: Path,
    hooks: RunHooks,
    workers: WorkersConfig,
    kept: KeptServers | None = None,
    transform: Callable[[Plan], Plan] | None = None,
) -> list[CaseOutcome]:
    """Start the sizing case's server, plan from its real capacity, run every case; with
    ``kept``, on servers kept across runs (``loadgen.kept_servers``); ``transform`` changes
    the plan before it is checked and run (a gate self-test's gateways,
    ``loadgen.planted``). The run's KV-event recorders (for cases that record them) stop
    last, however it ends."""
    sizing = scenario.sizing_case(params)
    sizing = kept_case(sizing) if kept is not None else sizing
    kv_events = KvEventHub()
    try:
        workdir = case_dir(run_dir, sizing.name) / SERVER_DIR
        if kept is not None and not sizing.record_kv_events:
            server = await kept.open(sizing, hooks)
        else:
            server = await open_server(sizing, workdir, hooks, kv_events)
        try:
            if server.capacity is None:
                raise RuntimeError(
                    f"could not read the KV capacity of {server.url}: {server.capacity_error}"
                )
            plan = scenario.plan(params, server.capacity)
            plan = kept_plan(plan) if kept is not None else plan
            plan = transform(plan) if transform is not None else plan
            check_installed(plan.cases)  # before any load is sent
        except BaseException:
            if kept is None or not kept.owns(server):
                await asyncio.shield(asyncio.to_thread(server.stop))
            else:
                kept.release(server)
            raise
        return await execute_plan(
            plan, run_dir, hooks, first_server=server, workers=workers, kv_events=kv_events,
            kept=kept,
        )  # fmt: skip
    finally:
        await kv_events.aclose()


def model_variant_of(scenario: Scenario, params: BaseModel) -> dict[str, str] | None:
    """The embedded model's variant the run's servers get, and why (``auto`` resolved).

    ``{"variant": "bf16" | "fp32", "reason": "..."}``; ``None`` when the run attaches to a
    server or names another model. Resolved by the same rule the server start uses, so it is
    known (and recorded) even when a server fails to start.
    """
    server = scenario.sizing_case(params).server
    decision = server.variant_decision() if server is not None else None
    return decision.as_dict() if decision is not None else None


async def run_scenario(
    scenario: Scenario,
    params: BaseModel,
    run_dir: Path,
    command: list[str] | None = None,
    hooks: RunHooks | None = None,
    workers: WorkersConfig | None = None,
    kept: KeptServers | None = None,
    transform: Callable[[Plan], Plan] | None = None,
    interleaved: dict[str, Any] | None = None,
) -> RunResult:
    """Run ``scenario`` with validated ``params`` into ``run_dir`` (raw files and ``run.json``).

    Never raises for a failing server or request: the result's status says it. A file of the
    run that cannot be written (disk full, permission) ends the run at once: status
    ``failed`` with that reason in ``run.json`` when it can still be written, the error in
    ``write_error``. Cancellation (Ctrl-C) still records the run status before propagating.
    The caller then builds the report and writes the manifest (``loadgen.cli.run_and_report``).
    ``workers`` spreads the load over worker processes or Ray actors (default: this process
    alone); ``kept`` runs on servers kept across runs (``loadgen.kept_servers``: a gate's);
    ``transform`` changes the plan once it is made (``_plan_and_execute``); ``interleaved``
    says, in ``run.json``, that a gate ran it phase by phase beside another run
    (``RunInfo.interleaved``; the turns themselves come from ``hooks.between_phases``).

    Raises:
        RunWriteError: the run directory or the first ``run.json`` could not be written
            (nothing has started yet).
    """
    params = scenario.params(params)  # validated once; the scenario's methods trust it
    hooks = hooks or RunHooks()
    workers = workers or WorkersConfig()
    command = redact_command(command or sys.argv)
    with writing(run_dir):
        run_dir.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    run_info = RunInfo(
        format_version=FORMAT_VERSION,
        scenario=scenario.name,
        command=command,
        started_at=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        clock=wall_anchor(),
        versions=environment_facts(),
        model_variant=model_variant_of(scenario, params),
        load_generator=workers.describe(),
        status="running",
        interleaved=interleaved,
    )
    write_json(run_dir / RUN_FILE, run_info)
    reserve = SpaceReserve(run_dir)
    reserve.hold()
    result = RunResult(run_dir, "running")
    try:
        result.outcomes = await _plan_and_execute(scenario, params, run_dir, hooks, workers,
                                                  kept, transform)  # fmt: skip
        failed = [o for o in result.outcomes if o.status != "ok"]
        result.status = "failed" if failed else "ok"
        if failed:
            result.error = "; ".join(f"{o.name}: {o.error}" for o in failed)
    except asyncio.CancelledError:
        result.status, result.error = "interrupted", "interrupted by the user"
        raise
    except RunWriteError as exc:
        result.status, result.error, result.write_error = "failed", str(exc), exc
    except Exception as exc:
        result.status, result.error = "failed", describe_exception(exc)
    finally:
        reserve.release()  # room for the run's ending (run.json here, the manifest next)
        result.wall_s = round(time.monotonic() - started, 2)
        run_info.status, run_info.error = result.status, result.error
        run_info.wall_s = result.wall_s
        try:
            write_json(run_dir / RUN_FILE, run_info)
        except RunWriteError as exc:  # the first write error is the one to report
            if result.write_error is None:
                result.status, result.error, result.write_error = "failed", str(exc), exc
    return result
