"""Run vLLM at a lower CPU priority than the load generator that shares its cores.

vLLM's CPU backend runs the model in a worker process whose threads it binds to the cores it
computes on (``VLLM_CPU_OMP_THREADS_BIND``; on 2 cores: core 0, one core reserved). The
engine-core process waits for the worker's output on a shared-memory queue and, for 1 s after
each read, busy-waits with ``sched_yield()`` instead of sleeping (vLLM
``distributed/device_communicators/shm_broadcast.py``: ``SpinCondition``, ``busy_loop_s=1``),
so under load it is always runnable on the core that the API server, the load generator and
the scraper share. :func:`lower_engine_core_priority` therefore sets it to nice 19 once the
server is healthy (``--engine-core-nice``).

:func:`lower_session_priority` can also lower the rest of vLLM's session (its scheduling
group, the kernel's autogroup), but it is off by default because it slows vLLM: a testbed must
not slow the server it measures (``--server-group-nice`` is there for whoever prefers the
client's timing on a small machine).

Only the embedded servers this project starts are changed, never an attached one, and only
by raising nice values (allowed without privileges). ``server.json`` records what was done.
The load generator's own side (its threads off the server's compute cores, its sending
thread at real-time priority) is ``loadgen.placement``. See docs/placement.md (the A/B
measurements behind both defaults).
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass, field
from pathlib import Path

from server.process import group_members, thread_ids

#: vLLM names its engine-core process ``VLLM::EngineCore`` (``setproctitle``); the kernel's
#: ``comm`` keeps 15 characters.
ENGINE_CORE_COMM = "VLLM::EngineCor"
#: The default nice value of the engine-core process (19: the lowest priority).
ENGINE_CORE_NICE = 19
#: A nice value for the server's scheduling group (its session's autogroup) when asked for
#: (not by default: see the module docstring).
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


def engine_core_pids(pgid: int, proc: Path = Path("/proc")) -> list[int]:
    """Pids of the live processes of group ``pgid`` named like vLLM's engine core (sorted)."""
    members = group_members(pgid, proc) or []
    return [m.pid for m in members if m.comm.startswith(ENGINE_CORE_COMM) and m.state != "Z"]


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
        for tid in thread_ids(pid, proc):  # none once it exited
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
