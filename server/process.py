"""Process-group lifecycle: spawn a command in its own group, stop the whole group, verify.

vLLM runs as three processes (API server, engine core, worker); signalling only the parent
can leave the others holding memory and the port, so every stop addresses the group.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path


def free_loopback_port() -> int:
    """A TCP port on 127.0.0.1 that is free right now (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def port_is_free(port: int, host: str = "127.0.0.1") -> bool:
    """True when nothing listens on ``host:port`` (a connect attempt is refused)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.settimeout(0.5)
        return sock.connect_ex((host, port)) != 0


@dataclass(frozen=True)
class ProcessStat:
    """A process as ``/proc/PID/stat`` shows it: pid, command name (``comm``, at most 15
    characters), state letter (``Z`` for a zombie), parent pid and process group."""

    pid: int
    comm: str
    state: str
    ppid: int
    pgrp: int


def process_stats(proc: Path = Path("/proc")) -> list[ProcessStat] | None:
    """Every process in ``proc``, zombies included, sorted by pid (those exiting while we look
    are skipped); ``None`` where ``proc`` is absent."""
    if not proc.is_dir():
        return None
    found = []
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue  # exited while we looked
        # "pid (comm) state ppid pgrp ...": split after the parenthesised command name.
        comm = stat.split("(", 1)[1].rsplit(")", 1)[0]
        fields = stat.rsplit(")", 1)[1].split()
        found.append(ProcessStat(int(entry.name), comm, fields[0], int(fields[1]), int(fields[2])))
    return sorted(found, key=lambda s: s.pid)


def group_members(pgid: int, proc: Path = Path("/proc")) -> list[ProcessStat] | None:
    """Every process of group ``pgid``, zombies included, sorted by pid, from ``proc``;
    ``None`` where it is absent."""
    stats = process_stats(proc)
    return None if stats is None else [s for s in stats if s.pgrp == pgid]


def thread_ids(pid: int | str, proc: Path = Path("/proc")) -> list[int]:
    """The thread ids of process ``pid`` (``"self"``: this one); ``[]`` once it is gone."""
    try:
        return [int(t.name) for t in (proc / str(pid) / "task").iterdir()]
    except OSError:
        return []


def live_members(pgid: int) -> list[str] | None:
    """Members of group ``pgid`` that are not zombies, as ``"pid name state"`` strings, from
    /proc; ``None`` where /proc is absent."""
    members = group_members(pgid)
    if members is None:
        return None
    return [f"{m.pid} {m.comm} {m.state}" for m in members if m.state != "Z"]


def group_alive(pgid: int) -> bool:
    """True while a process of group ``pgid`` is still running.

    Zombies do not count: they hold no memory, port or CPU, and one re-parented to init is
    reaped only when init gets to it (seen to take seconds here).
    """
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    live = live_members(pgid)
    return True if live is None else bool(live)


#: The cores this process could run on when it started, before any thread of it was pinned.
START_CPUS = frozenset(os.sched_getaffinity(0))


def spawn_group(
    argv: list[str], log_path: Path, env: dict[str, str], cwd: Path | None = None
) -> subprocess.Popen[bytes]:
    """Start ``argv`` as the leader of a new session/process group, stdout+stderr to ``log_path``.

    The log file is opened in append mode and inherited by the child, so it survives the caller.
    The child runs on :data:`START_CPUS` whatever the calling thread is pinned to; a
    real-time policy set with ``SCHED_RESET_ON_FORK`` is not inherited either.
    """
    log_path.parent.mkdir(parents=True, exist_ok=True)

    def spawn() -> subprocess.Popen[bytes]:
        with open(log_path, "ab", buffering=0) as log:
            return subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                cwd=cwd,
                start_new_session=True,
            )

    if os.sched_getaffinity(0) == START_CPUS:
        return spawn()
    # A child inherits its parent thread's CPU set: a caller pinned to fewer cores (the load
    # generator's sending thread, ``loadgen.placement``) spawns from a thread of its own on
    # the whole set, so vLLM picks the cores it binds from all of them.
    spawned: list[subprocess.Popen[bytes]] = []
    failed: list[BaseException] = []

    def spawn_unpinned() -> None:
        try:
            os.sched_setaffinity(0, START_CPUS)
            spawned.append(spawn())
        except BaseException as exc:
            failed.append(exc)

    thread = threading.Thread(target=spawn_unpinned, name="spawn-group")
    thread.start()
    thread.join()
    if failed:
        raise failed[0]
    return spawned[0]


@dataclass(frozen=True)
class StopResult:
    """How a group stop went: signals used and whether anything of the group survived.

    ``survivors`` lists what still ran at the end (``"pid name state"``), empty when gone.
    """

    sent_sigkill: bool
    group_gone: bool
    elapsed_s: float
    survivors: tuple[str, ...] = ()


def stop_group(
    pgid: int,
    grace_s: float = 15.0,
    reap: Callable[[], object] | None = None,
    poll_s: float = 0.1,
    kill_wait_s: float = 60.0,
) -> StopResult:
    """SIGTERM the group, wait up to ``grace_s`` seconds, SIGKILL what is left, and verify.

    Args:
        pgid: process-group id (the leader's pid when spawned by :func:`spawn_group`).
        grace_s: seconds between SIGTERM and SIGKILL.
        reap: called while waiting so the caller can reap its own child (``Popen.poll``);
            an unreaped leader stays a zombie and keeps the group "alive".
        poll_s: seconds between liveness checks.
        kill_wait_s: seconds to wait for the group to vanish after SIGKILL. A killed vLLM
            worker was seen still running (state R, tearing down) 5 s after SIGKILL on a
            loaded 2-core machine, so this is generous; it returns as soon as all are gone.

    Returns:
        A :class:`StopResult`; ``group_gone`` is False only if processes survived SIGKILL.
    """
    start = time.monotonic()

    def wait_gone(deadline: float) -> bool:
        while True:
            if reap is not None:
                reap()
            if not group_alive(pgid):
                if reap is not None:
                    reap()  # the leader may have turned zombie since the last call
                return True
            if time.monotonic() >= deadline:
                return False
            time.sleep(poll_s)

    try:
        os.killpg(pgid, signal.SIGTERM)
    except ProcessLookupError:
        return StopResult(sent_sigkill=False, group_gone=True, elapsed_s=0.0)
    if wait_gone(start + grace_s):
        return StopResult(False, True, time.monotonic() - start)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, signal.SIGKILL)
    gone = wait_gone(time.monotonic() + kill_wait_s)
    survivors = () if gone else tuple(live_members(pgid) or ())
    return StopResult(True, gone, time.monotonic() - start, survivors)
