"""One scenario run, end to end: plan → execute → report → manifest (written last).

``run.json`` records how the run went (``ok``, ``failed``, ``interrupted``); the CLI then
builds the report and writes the manifest last, also after a failure or Ctrl-C, so even a run
cut short leaves complete, flushed records.
"""

from __future__ import annotations

import asyncio
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import BaseModel

from loadgen.clock import wall_anchor
from loadgen.manifest import environment_facts
from loadgen.orchestrate import CaseOutcome, RunHooks, execute_plan, open_server
from loadgen.redact import redact_command
from loadgen.rundir import RUN_FILE, SERVER_DIR, case_dir, write_json
from loadgen.workers import WorkersConfig
from scenarios.base import Scenario


@dataclass
class RunResult:
    """How a run ended: status, its directory, per-case outcomes, wall time (s)."""

    run_dir: Path
    status: str
    outcomes: list[CaseOutcome] = field(default_factory=list)
    error: str | None = None
    wall_s: float = 0.0


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
    scenario: Scenario, params: BaseModel, run_dir: Path, hooks: RunHooks, workers: WorkersConfig
) -> list[CaseOutcome]:
    """Start the sizing case's server, plan from its real capacity, run every case."""
    sizing = scenario.sizing_case(params)
    server = await open_server(sizing, case_dir(run_dir, sizing.name) / SERVER_DIR, hooks)
    try:
        if server.capacity is None:
            raise RuntimeError(
                f"could not read the KV capacity of {server.url}: {server.capacity_error}"
            )
        plan = scenario.plan(params, server.capacity)
    except BaseException:
        await asyncio.shield(asyncio.to_thread(server.stop))
        raise
    return await execute_plan(plan, run_dir, hooks, first_server=server, workers=workers)


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
) -> RunResult:
    """Run ``scenario`` with validated ``params`` into ``run_dir`` (raw files and ``run.json``).

    Never raises for a failing server or request: the result's status says it. Cancellation
    (Ctrl-C) still records the run status before propagating. The caller then builds the
    report and writes the manifest (:func:`finalize`). ``workers`` spreads the load over
    worker processes or Ray actors (default: this process alone).
    """
    hooks = hooks or RunHooks()
    workers = workers or WorkersConfig()
    command = redact_command(command or sys.argv)
    run_dir.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    run_info: dict[str, object] = {
        "scenario": scenario.name,
        "command": command,
        "started_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "clock": wall_anchor(),
        "versions": environment_facts(),
        "model_variant": model_variant_of(scenario, params),
        "load_generator": workers.describe(),
        "status": "running",
    }
    write_json(run_dir / RUN_FILE, run_info)
    result = RunResult(run_dir, "running")
    try:
        result.outcomes = await _plan_and_execute(scenario, params, run_dir, hooks, workers)
        failed = [o for o in result.outcomes if o.status != "ok"]
        result.status = "failed" if failed else "ok"
        if failed:
            result.error = "; ".join(f"{o.name}: {o.error}" for o in failed)
    except asyncio.CancelledError:
        result.status, result.error = "interrupted", "interrupted by the user"
        raise
    except Exception as exc:
        result.status, result.error = "failed", f"{type(exc).__name__}: {exc}"
    finally:
        result.wall_s = round(time.monotonic() - started, 2)
        run_info.update(status=result.status, error=result.error, wall_s=result.wall_s)
        write_json(run_dir / RUN_FILE, run_info)
    return result
