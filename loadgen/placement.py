"""Where the load generator runs and how soon its sending thread wakes: off the cores the
server computes on, the sending thread at real-time priority.

On a small machine the load generator shares the host with the server it measures: vLLM's CPU
worker computes on the cores it binds (``server.cpus``), its API server and engine core run on
the rest, with our scraper and the load generator. A thread that lands on the worker's busy
core can wait there for tens of seconds, and at normal priority the sending thread waits its
turn behind vLLM's API server, so open-loop sends go out late. So every thread of the load
generator, its scraper and its gateway is pinned to the cores the server leaves free, and the
sending thread runs at ``SCHED_FIFO`` priority 1 (with ``SCHED_RESET_ON_FORK``: threads and
processes started from it, and a server spawned meanwhile, start at normal priority with the
process's whole CPU set, ``server.process.spawn_group``). Real-time only goes with the
pinning: unpinned, it preempts vLLM's worker.

Real-time scheduling needs root, ``CAP_SYS_NICE`` or an ``RLIMIT_RTPRIO`` of at least 1
(``ulimit -r``); refused, the threads are still pinned and the run records why. Worker
processes place themselves the same way (``loadgen.workers.base``); Ray actors on this machine do
too, those on other hosts run as Ray starts them (``loadgen.workers.ray``).

See docs/placement.md (the modes of ``--client-priority``, and the measurements).
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Collection, Iterator, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from scenarios.plan import ClientPriority
from server.cpus import ServerHost
from server.process import thread_ids

#: The reason :func:`choose_placement` gives when the servers of this host compute on every
#: core the load generator may use (the analysis recognises it: a machine limit).
NO_FREE_CORE = "the server computes on every core this process may use"
#: The lowest real-time priority: above every normal task, below the kernel's own.
REALTIME_PRIORITY = 1
#: The interpreter's GIL switch interval while the sending thread is real-time (s; Python's
#: default is 0.005): a thread holding the GIL (rich's progress refresh, a helper thread)
#: must hand it over this soon once the woken sending thread asks for it.
REALTIME_SWITCH_INTERVAL_S = 0.0005


@dataclass(frozen=True)
class Placement:
    """Where the load generator should run and how its sending thread is scheduled.

    Attributes:
        realtime: the sending thread at ``SCHED_FIFO`` :data:`REALTIME_PRIORITY` (else its
            policy is left as it is).
        cpus: the cores to pin every thread of the process to, sorted; ``None`` leaves them.
        reason: one line: why this placement.
    """

    realtime: bool
    cpus: tuple[int, ...] | None
    reason: str

    def for_worker(self, worker: int, workers: int) -> Placement:
        """The placement of worker ``worker`` of ``workers``: its own core of ``cpus`` when
        there are enough for one each (unpinned stays unpinned). With fewer cores than
        workers they share all of them at normal priority: a real-time thread has no time
        slice, so one busy worker would hold back another on its core until it blocked."""
        if self.cpus is None or workers == 1:
            return self
        if len(self.cpus) < workers:
            return Placement(
                False,
                self.cpus,
                f"normal priority: {workers} workers share core(s) {_cores(self.cpus)} "
                f"(else {self.reason})",
            )
        return Placement(self.realtime, (self.cpus[worker],), self.reason)


def _cores(cpus: Collection[int]) -> str:
    return ",".join(str(c) for c in sorted(cpus))


def choose_placement(
    mode: ClientPriority,
    available: Collection[int],
    server_here: bool,
    server_cpus: Collection[int] | None,
) -> Placement:
    """The load generator's placement for a server, from what is known of it.

    Args:
        mode: ``normal`` (leave everything as it is), ``realtime`` (the sending thread
            real-time in any case), ``auto`` (real-time where the server computes on known
            cores of this machine and leaves one free: there the sending thread competes with
            the server's API server; normal priority otherwise).
        available: the cores this process may run on.
        server_here: the server runs on this machine.
        server_cpus: the cores it computes on (``server.cpus.compute_cpus``), ``None`` when
            unknown.

    Pinned to ``available`` minus ``server_cpus`` whenever that leaves a core (except in
    ``normal``); a server elsewhere leaves every core free.
    """
    if mode == "normal":
        return Placement(False, None, "normal priority, unpinned, as asked")
    if not server_here:
        # Nothing of the server competes here, and a client that runs flat out (why one adds
        # workers) would, real-time, starve its own scraper: real-time only when asked, then
        # with every core free for the workers to get one each (Placement.for_worker).
        if mode == "realtime":
            cores = tuple(sorted(available))
            return Placement(True, cores, "real-time, as asked; the server runs on another host")
        return Placement(False, None, "normal priority, unpinned; the server runs on another host")
    if server_cpus is not None:
        free = sorted(set(available) - set(server_cpus))
        if free:
            return Placement(
                True,
                tuple(free),
                f"real-time on core(s) {_cores(free)}; the server computes on "
                f"core(s) {_cores(server_cpus)}",
            )
        why = f"{NO_FREE_CORE} ({_cores(available)})"
    else:
        why = (
            "the server runs here, but no thread of it is bound to fewer cores than its "
            "root process (where it computes is unknown)"
        )
    if mode == "realtime":
        return Placement(True, None, f"real-time, unpinned, as asked, although {why}")
    return Placement(False, None, f"normal priority: {why}, and a real-time client could take them")


def placement_for_servers(mode: ClientPriority, hosts: Collection[ServerHost | None]) -> Placement:
    """:func:`choose_placement` for a case's servers (a server and its replicas): here if any
    is here (an unknown host counts as here), computing on the union of their compute sets,
    unknown if any here is unknown."""
    here = [h for h in hosts if h is None or h.this_host]
    known = [h.compute_cpus for h in here if h is not None and h.compute_cpus is not None]
    cpus = {c for found in known for c in found} if len(known) == len(here) else None
    return choose_placement(mode, os.sched_getaffinity(0), bool(here), cpus)


@dataclass(frozen=True)
class AppliedPlacement:
    """What :func:`placed` did (JSON-ready with :meth:`as_dict`).

    Attributes:
        policy: the sending thread's scheduling policy, e.g. ``"SCHED_FIFO 1"`` or
            ``"SCHED_OTHER"``.
        cpus: the cores every thread was pinned to, ``None`` when left as they were.
        reason: why this placement was chosen (:attr:`Placement.reason`).
        problem: what was refused (and so not done), else ``None``.
    """

    policy: str
    cpus: list[int] | None
    reason: str
    problem: str | None = None

    def as_dict(self) -> dict[str, object]:
        return asdict(self)

    def with_problem(self, extra: str | None) -> AppliedPlacement:
        """The same, with ``extra`` (e.g. helpers that could not be pinned) added to its
        problem."""
        if extra is None:
            return self
        return replace(self, problem=f"{self.problem}; {extra}" if self.problem else extra)

    def describe(self) -> str:
        """One line for the console, e.g. ``SCHED_FIFO 1 on core(s) 1 (real-time on …)``."""
        where = f" on core(s) {_cores(self.cpus)}" if self.cpus else ""
        problem = f"; {self.problem}" if self.problem else ""
        return f"{self.policy}{where} ({self.reason}{problem})"


def machine_id() -> str | None:
    """This machine's identity for this boot (``/proc/sys/kernel/random/boot_id``), to tell
    whether another process (a Ray actor) runs on the same machine; ``None`` where absent."""
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip() or None
    except OSError:
        return None


def pin_threads(pid: int | str, cpus: Collection[int]) -> tuple[dict[int, set[int]], list[str]]:
    """Pin every thread of process ``pid`` (``"self"``: this one) to ``cpus``.

    Returns the CPU sets the pinned threads had, by thread id, and what was refused (one line
    per thread; threads that exit meanwhile are skipped). Never raises."""
    before, refused = {}, []
    for tid in thread_ids(pid):
        try:
            had = set(os.sched_getaffinity(tid))
            os.sched_setaffinity(tid, cpus)
            before[tid] = had
        except ProcessLookupError:
            continue
        except OSError as exc:
            refused.append(f"thread {tid} of {pid}: {exc.strerror}")
    return before, refused


def pin_helpers(pids: Sequence[int], placement: Placement) -> str | None:
    """Pin every thread of the helper processes ``pids`` (the scraper, a gateway) to the
    placement's cores, for good (they end with the case); what was refused, else ``None``."""
    if placement.cpus is None:
        return None
    refused = [line for pid in pids for line in pin_threads(pid, placement.cpus)[1]]
    if not refused:
        return None
    return f"helpers not pinned to core(s) {_cores(placement.cpus)}: {'; '.join(refused[:3])}"


_POLICIES = {
    os.SCHED_OTHER: "SCHED_OTHER",
    os.SCHED_BATCH: "SCHED_BATCH",
    os.SCHED_IDLE: "SCHED_IDLE",
    os.SCHED_FIFO: "SCHED_FIFO",
    os.SCHED_RR: "SCHED_RR",
}


def _policy_name() -> str:
    """The calling thread's policy, e.g. ``SCHED_FIFO 1`` or ``SCHED_OTHER``."""
    policy = os.sched_getscheduler(0) & ~os.SCHED_RESET_ON_FORK
    name = _POLICIES.get(policy, f"policy {policy}")
    if policy in (os.SCHED_FIFO, os.SCHED_RR):
        name += f" {os.sched_getparam(0).sched_priority}"
    return name


@contextlib.contextmanager
def placed(placement: Placement) -> Iterator[AppliedPlacement]:
    """Apply ``placement`` for the block: every thread of this process pinned to its cores,
    then the calling thread real-time (only if the pinning held: a real-time thread left on
    the server's cores would take them) with the GIL switch interval at
    :data:`REALTIME_SWITCH_INTERVAL_S`. On exit the threads get their CPU sets back
    (threads started meanwhile the calling thread's) and the calling thread its policy.
    Never raises for a refusal: :attr:`AppliedPlacement.problem` says what was not done."""
    old_policy, old_param = os.sched_getscheduler(0), os.sched_getparam(0)
    old_switch = sys.getswitchinterval()
    own_cpus = set(os.sched_getaffinity(0))
    cpus, problems = None, []
    before: dict[int, set[int]] = {}
    if placement.cpus is not None:
        before, refused = pin_threads("self", placement.cpus)
        if refused:
            problems.append(
                f"pinning to core(s) {_cores(placement.cpus)} refused ({'; '.join(refused[:3])})"
            )
        else:
            cpus = list(placement.cpus)
    if placement.realtime and placement.cpus is not None and cpus is None:
        problems.append("not real-time: the threads could not be kept off the server's cores")
    elif placement.realtime:
        try:
            os.sched_setscheduler(
                0, os.SCHED_FIFO | os.SCHED_RESET_ON_FORK, os.sched_param(REALTIME_PRIORITY)
            )
            sys.setswitchinterval(min(old_switch, REALTIME_SWITCH_INTERVAL_S))
        except OSError as exc:
            problems.append(
                f"SCHED_FIFO refused ({exc.strerror}): it needs root, CAP_SYS_NICE or "
                "ulimit -r ≥ 1; the sending thread ran at normal priority"
            )
    try:
        yield AppliedPlacement(_policy_name(), cpus, placement.reason, "; ".join(problems) or None)
    finally:
        sys.setswitchinterval(old_switch)
        with contextlib.suppress(OSError):
            os.sched_setscheduler(0, old_policy, old_param)
        if placement.cpus is not None:
            for tid in thread_ids("self"):
                with contextlib.suppress(OSError):
                    os.sched_setaffinity(tid, before.get(tid, own_cpus))
