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
3.5–3.9 ms and send lateness p99 2.3 and 3.8 ms. A/B on one server, alternating, two runs
each (closed-loop saturation over 25 s, open loops at 6 and 14 req/s): send lateness p99 at
6 req/s 3.1–4.6 ms at nice 19 vs 34–118 ms at 0; saturation 9.79–10.23 vs 9.63–10.08 req/s;
at 14 req/s completed 8.84–9.36 vs 9.36–10.36 req/s, TPOT p50 53–55 vs 47–50 ms. The server
figures lie within this machine's run-to-run spread (two identical runs at nice 5 gave
saturation 8.37 and 9.79 req/s), so no cost to vLLM is shown, but a small one in overload,
where the engine core's real work waits behind the API server, is not ruled out.

What remains is the rest of vLLM's session on that core: its API server answering
``/metrics`` and streaming, in a scheduling group of its own (the kernel's autogroup: one per
session, and the server is started in a new one), which competes with the load generator's
group as an equal whatever its members' nice values. :func:`lower_session_priority` can set
that group's nice value, but it is off by default because it slows vLLM: A/B on one server,
alternating (open loops at 6 and 14 req/s, closed-loop saturation over 25 s): at nice 10
the load generator's send lateness p99 was 1.8–3.1 ms (1.7–6.4 ms at 0), but saturation fell
from 10.26–10.62 to 9.48–9.73 req/s and TPOT p50 at 6 req/s rose from 22.3 to 25.4–28.8 ms:
the favoured load generator and scraper also take turns on the worker's core. A testbed must
not slow the server it measures, so ``--server-group-nice`` is there for whoever prefers the
client's timing on a small machine, and says what it did in ``server.json``.

Only the embedded servers this project starts are changed, never an attached one, and only
by raising nice values (allowed without privileges). ``server.json`` records what was done.
The load generator's own side (its threads off the server's compute cores, its sending
thread at real-time priority) is ``loadgen.placement``.
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
