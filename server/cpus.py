"""Which CPU cores a vLLM server computes on, read from /proc, so the load generator that
shares the host can keep off them.

vLLM's CPU backend binds the threads of its worker process to the cores it computes on
(``VLLM_CPU_OMP_THREADS_BIND``, by default every core but ``VLLM_CPU_NUM_OF_RESERVED_CPU``;
on 2 cores: core 0, its log says ``OpenMP thread binding ... core ids=[0]``) and leaves its
API server and engine core free to run anywhere. Seen here (vLLM 0.32.0 CPU, 2 cores): all
46 threads of ``VLLM::Worker`` allowed only core 0, the API server's 11 and the engine core's
15 threads cores 0-1. So a thread of the server's process tree that may run on fewer cores
than the server's root process is a computing thread, and the union of those threads' cores
is the server's **compute set**. A GPU build binds nothing: no compute set.

An attached server is found on this host by its listening port (``/proc/net/tcp*`` gives the
socket's inode, ``/proc/PID/fd`` the process holding it); a server elsewhere has no process
here.
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import socket
from pathlib import Path

#: TCP state LISTEN in /proc/net/tcp (``include/net/tcp_states.h``: TCP_LISTEN = 10).
_TCP_LISTEN = "0A"


def process_tree(root_pid: int, proc: Path = Path("/proc")) -> list[int]:
    """``root_pid`` and every live descendant of it (by parent pid), sorted; ``[]`` when
    ``root_pid`` is not running."""
    parents: dict[int, int] = {}
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue  # exited while we looked
        # "pid (comm) state ppid ...": the fields after the parenthesised command name.
        fields = stat.rsplit(")", 1)[1].split()
        if fields[0] != "Z":
            parents[int(entry.name)] = int(fields[1])
    if root_pid not in parents:
        return []
    tree, frontier = {root_pid}, [root_pid]
    while frontier:
        parent = frontier.pop()
        children = [pid for pid, ppid in parents.items() if ppid == parent and pid not in tree]
        tree.update(children)
        frontier.extend(children)
    return sorted(tree)


def _thread_affinities(pid: int, proc: Path) -> list[set[int]]:
    """The CPU sets each thread of ``pid`` may run on (threads that exit meanwhile are
    skipped)."""
    try:
        tids = [int(t.name) for t in (proc / str(pid) / "task").iterdir()]
    except OSError:
        return []
    found = []
    for tid in tids:
        with contextlib.suppress(OSError):
            found.append(set(os.sched_getaffinity(tid)))
    return found


def compute_cpus(root_pid: int, proc: Path = Path("/proc")) -> set[int] | None:
    """The cores the server rooted at ``root_pid`` computes on: the union of the cores of
    every thread in its process tree that is bound to fewer cores than the root process may
    use (see the module docstring); ``None`` when no thread is bound that way (a GPU build,
    or the workers have not started yet) or ``root_pid`` is gone."""
    try:
        free = set(os.sched_getaffinity(root_pid))
    except OSError:
        return None
    bound: set[int] = set()
    for pid in process_tree(root_pid, proc):
        for cpus in _thread_affinities(pid, proc):
            if cpus < free:
                bound |= cpus
    return bound or None


def _listening_inodes(port: int, proc: Path) -> set[str]:
    inodes = set()
    for table in ("tcp", "tcp6"):
        try:
            lines = (proc / "net" / table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            # "sl local_address rem_address st tx:rx tr:when retrnsmt uid timeout inode ..."
            fields = line.split()
            if len(fields) < 10 or fields[3] != _TCP_LISTEN:
                continue
            if int(fields[1].rsplit(":", 1)[1], 16) == port:
                inodes.add(fields[9])
    return inodes


def listener_pid(port: int, proc: Path = Path("/proc")) -> int | None:
    """The lowest pid of the processes on this host holding a TCP socket that listens on
    ``port`` (any local address), or ``None`` when there is none or it is not visible to us
    (another user's process without privileges, another network namespace)."""
    wanted = {f"socket:[{inode}]" for inode in _listening_inodes(port, proc)}
    if not wanted:
        return None
    holders = []
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fds = list((entry / "fd").iterdir())
        except OSError:
            continue
        for fd in fds:
            try:
                target = os.readlink(fd)
            except OSError:
                continue
            if target in wanted:
                holders.append(int(entry.name))
                break
    return min(holders) if holders else None


def is_this_host(host: str) -> bool:
    """Whether ``host`` (a name or an address) names this machine: a loopback address, or
    an address one of its interfaces holds (a socket can be bound to it)."""
    try:
        infos = socket.getaddrinfo(host, None, type=socket.SOCK_DGRAM)
    except OSError:
        return False
    for family, _, _, _, sockaddr in infos:
        address = str(sockaddr[0])
        if ipaddress.ip_address(address.split("%", 1)[0]).is_loopback:
            return True
        with contextlib.suppress(OSError), socket.socket(family, socket.SOCK_DGRAM) as probe:
            probe.bind((address, 0))
            return True
    return False
