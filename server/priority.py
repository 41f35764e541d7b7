"""Run vLLM at a lower CPU priority than the load generator that shares its cores.

Why: vLLM's CPU backend runs the model in a worker process whose threads it binds to the
cores it computes on (``VLLM_CPU_OMP_THREADS_BIND``; on 2 cores: core 0, one core reserved).
The engine-core process waits for the worker's output on a shared-memory queue and, for
1 s after each read, busy-waits with ``sched_yield()`` instead of sleeping (vLLM
``distributed/device_communicators/shm_broadcast.py``: ``SpinCondition``,
``busy_loop_s=1``). Under load it is always runnable on the core that the API server, the
load generator and the scraper share. Measured here (AMD EPYC, 2 vCPUs, vLLM 0.32.0, fp32
model, open loop at 6 and 14 req/s): the engine core took 61 % of that core; the load
generator's event loop woke late by p99 13–36 ms (max 475 ms) and its send lateness p99 was
339 ms at 6 req/s. With the engine core at nice 19, the same load gave loop lag p99
3.5–3.9 ms, send lateness p99 2.3 and 3.8 ms, and the server completed as many requests
(10.50 req/s at 14 offered vs 10.15 at nice 0): the spin only yields the core sooner to a
process that has work, and the engine core's own work needs little of it.

What remained was the rest of vLLM's session on that core: its API server answering
``/metrics`` and streaming, in a scheduling group of its own (the kernel's autogroup: one per
session, and the server is started in a new one), which competes with the load generator's
group as an equal whatever its members' nice values. With that group at nice 10
(``/proc/PID/autogroup``), the load generator's loop lag p99 fell again from 3.4–4.9 ms to
1.5–2.2 ms and its worst send lateness from 11–110 ms to 5.6–6.1 ms (open loops at 5, 9 and
14 req/s, 1,121 sends a run, two runs each), and the server completed 10.7 req/s at 14
offered (9.5 without). The load generator needs a few percent of a core, so vLLM keeps all
the rest; a machine whose client saturates a core would take it from vLLM's API server.

Only the embedded servers this project starts are changed, never an attached one, and only
by raising nice values (allowed without privileges). ``server.json`` records what was done.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass, field
from pathlib import Path

#: vLLM names its engine-core process ``VLLM::EngineCore`` (``setproctitle``); the kernel's
#: ``comm`` keeps 15 characters.
ENGINE_CORE_COMM = "VLLM::EngineCor"
#: The default nice value of the engine-core process (19: the lowest priority).
ENGINE_CORE_NICE = 19
#: The default nice value of the server's scheduling group (its session's autogroup).
SERVER_GROUP_NICE = 10


@dataclass(frozen=True)
class PriorityChange:
    """What :func:`lower_engine_core_priority` or :func:`lower_session_priority` did
    (JSON-ready with :meth:`as_dict`).

    Attributes:
        nice: the nice value asked for.
        pids: the processes changed: the engine cores found, or the session's leader (its
            autogroup).
        threads: threads whose nice value was set (Linux keeps one per thread).
        problem: why nothing or not everything was changed; ``None`` when all was.
    """

    nice: int
    pids: list[int] = field(default_factory=list)
    threads: int = 0
    problem: str | None = None

    def as_dict(self) -> dict[str, object]:
        return asdict(self)


def _comm_and_group(entry: Path) -> tuple[str, int] | None:
    try:
        stat = (entry / "stat").read_text()
    except OSError:
        return None  # exited while we looked
    # "pid (comm) state ppid pgrp ...": split after the parenthesised command name.
    comm = stat.split("(", 1)[1].rsplit(")", 1)[0]
    fields = stat.rsplit(")", 1)[1].split()
    return comm, int(fields[2])


def engine_core_pids(pgid: int, proc: Path = Path("/proc")) -> list[int]:
    """Pids of the processes of group ``pgid`` named like vLLM's engine core (sorted)."""
    found = []
    for entry in proc.iterdir() if proc.is_dir() else ():
        if entry.name.isdigit():
            facts = _comm_and_group(entry)
            if facts is not None and facts[1] == pgid and facts[0].startswith(ENGINE_CORE_COMM):
                found.append(int(entry.name))
    return sorted(found)


def lower_engine_core_priority(
    pgid: int, nice: int = ENGINE_CORE_NICE, proc: Path = Path("/proc")
) -> PriorityChange:
    """Set the nice value of every thread of the engine-core processes of group ``pgid``.

    Never raises: a process or thread that exits meanwhile is skipped, and a refusal (a nice
    value lower than the current one needs privileges) is reported in ``problem``.
    """
    pids = engine_core_pids(pgid, proc)
    if not pids:
        return PriorityChange(nice, problem=f"no {ENGINE_CORE_COMM}* process in group {pgid}")
    threads, problems = 0, []
    for pid in pids:
        try:
            tids = [int(t.name) for t in (proc / str(pid) / "task").iterdir()]
        except OSError:
            continue  # exited
        for tid in tids:
            try:
                os.setpriority(os.PRIO_PROCESS, tid, nice)
                threads += 1
            except ProcessLookupError:
                continue
            except OSError as exc:
                problems.append(f"thread {tid}: {exc.strerror}")
    problem = "; ".join(problems[:3]) if problems else None
    return PriorityChange(nice, pids, threads, problem)


def lower_session_priority(
    leader_pid: int, nice: int = SERVER_GROUP_NICE, proc: Path = Path("/proc")
) -> PriorityChange:
    """Set the nice value of the autogroup of ``leader_pid``'s session (``/proc/PID/autogroup``:
    the weight of the whole session against other sessions, Linux ``sched(7)``).

    Never raises: where autogroups are off or absent (``/proc/sys/kernel/
    sched_autogroup_enabled`` is 0, or another kernel), nothing changes and ``problem`` says
    why; so does a refusal.
    """
    enabled = proc / "sys" / "kernel" / "sched_autogroup_enabled"
    try:
        if enabled.read_text().strip() != "1":
            return PriorityChange(nice, problem="autogroups are off (sched_autogroup_enabled 0)")
        (proc / str(leader_pid) / "autogroup").write_text(f"{nice}\n")
    except OSError as exc:
        return PriorityChange(nice, problem=f"autogroup of {leader_pid}: {exc.strerror or exc}")
    return PriorityChange(nice, pids=[leader_pid])
