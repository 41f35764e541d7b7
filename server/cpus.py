"""Which CPU cores a vLLM server computes on, read from /proc, so the load generator that
shares the host can keep off them.

vLLM's CPU backend binds the threads of its worker process to the cores it computes on
(``VLLM_CPU_OMP_THREADS_BIND``, by default every core but ``VLLM_CPU_NUM_OF_RESERVED_CPU``)
and leaves its API server and engine core free to run anywhere (what was seen on 2 cores is
in docs/placement.md). So a thread of the server's process tree that may run on fewer cores
than the server's root process is a computing thread, and the union of those threads' cores
is the server's **compute set**. A GPU build binds nothing: no compute set.

An attached server is found on this host by the socket it listens on (``/proc/net/tcp*``
gives the socket's inode, ``/proc/PID/fd`` the processes holding it). A URL whose address no
interface of this machine holds counts as another host; a server in a container or VM of
this machine therefore counts as elsewhere too (its processes are not visible here).
See docs/placement.md.
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import socket
import struct
from dataclasses import asdict, dataclass
from pathlib import Path
from urllib.parse import urlsplit

from server.process import process_stats, thread_ids

#: TCP state LISTEN in /proc/net/tcp (``include/net/tcp_states.h``: TCP_LISTEN = 10).
_TCP_LISTEN = "0A"
_Address = ipaddress.IPv4Address | ipaddress.IPv6Address


def _parents(proc: Path) -> dict[int, int]:
    """pid → parent pid of every live (not zombie) process in ``proc``."""
    return {s.pid: s.ppid for s in process_stats(proc) or [] if s.state != "Z"}


def process_tree(root_pid: int, proc: Path = Path("/proc")) -> list[int]:
    """``root_pid`` and every live descendant of it (by parent pid), sorted; ``[]`` when
    ``root_pid`` is not running."""
    parents = _parents(proc)
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
    found = []
    for tid in thread_ids(pid, proc):
        with contextlib.suppress(OSError):
            found.append(set(os.sched_getaffinity(tid)))
    return found


def compute_cpus(root_pid: int, proc: Path = Path("/proc")) -> set[int] | None:
    """The cores the server rooted at ``root_pid`` computes on: the union of the cores of
    every thread in its process tree that is bound to fewer cores than the root process may
    use (see the module docstring); ``None`` when no thread is bound that way (a GPU build,
    workers not started yet, a server whose root is bound as tightly as its workers) or
    ``root_pid`` is gone."""
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


def _proc_net_address(field: str) -> _Address:
    """The address of a ``/proc/net/tcp*`` ``ADDR:PORT`` field: 32-bit words printed in hex,
    each in this machine's byte order."""
    hex_address = field.rsplit(":", 1)[0]
    raw = b"".join(
        struct.pack("=I", int(hex_address[i : i + 8], 16)) for i in range(0, len(hex_address), 8)
    )
    return ipaddress.ip_address(raw)


def _matches(listening: _Address, wanted: set[_Address]) -> bool:
    """A socket listening on ``listening`` accepts connections to one of ``wanted``: the
    wildcard address, or one of them (an IPv4-mapped IPv6 address counts as its IPv4)."""
    if listening.is_unspecified:
        return True
    if isinstance(listening, ipaddress.IPv6Address) and listening.ipv4_mapped is not None:
        listening = listening.ipv4_mapped
    return listening in wanted


def _listening_inodes(port: int, wanted: set[_Address] | None, proc: Path) -> set[str]:
    """Inodes of the sockets listening on ``port`` for one of ``wanted`` (``None``: any)."""
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
            if int(fields[1].rsplit(":", 1)[1], 16) != port:
                continue
            with contextlib.suppress(ValueError):
                if wanted is None or _matches(_proc_net_address(fields[1]), wanted):
                    inodes.add(fields[9])
    return inodes


def listener_pid(
    port: int, addresses: set[_Address] | None = None, proc: Path = Path("/proc")
) -> int | None:
    """The process on this host that listens on TCP ``port`` for one of ``addresses`` (a
    socket bound to the wildcard address counts; ``None``: any address), or ``None`` when
    there is none or it is not visible to us (another user's process without privileges,
    another network namespace).

    Several processes can hold one listening socket (children forked after the bind inherit
    it): the one whose parent does not hold it is the server's root; among several such, the
    lowest pid.
    """
    targets = {f"socket:[{inode}]" for inode in _listening_inodes(port, addresses, proc)}
    if not targets:
        return None
    holders = set()
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
            if target in targets:
                holders.add(int(entry.name))
                break
    if not holders:
        return None
    parents = _parents(proc)
    roots = [pid for pid in holders if parents.get(pid) not in holders]
    return min(roots or holders)


def local_addresses(host: str) -> set[_Address]:
    """The addresses ``host`` (a name or an address) resolves to that name this machine: a
    loopback address, or one an interface of it holds (a socket can be bound to it); empty
    when none does or it does not resolve."""
    try:
        infos = socket.getaddrinfo(host, None, type=socket.SOCK_DGRAM)
    except (OSError, UnicodeError):
        return set()
    found: set[_Address] = set()
    for family, _, _, _, sockaddr in infos:
        try:
            address = ipaddress.ip_address(str(sockaddr[0]).split("%", 1)[0])
        except ValueError:
            continue
        if address.is_loopback:
            found.add(address)
            continue
        with contextlib.suppress(OSError), socket.socket(family, socket.SOCK_DGRAM) as probe:
            probe.bind((str(sockaddr[0]), 0))
            found.add(address)
    return found


def is_this_host(host: str) -> bool:
    """Whether ``host`` names this machine (:func:`local_addresses` finds one)."""
    return bool(local_addresses(host))


@dataclass(frozen=True)
class ServerHost:
    """Where a server runs, as seen from the load generator's host.

    Attributes:
        this_host: the server runs on this machine (started here, or attached at an address
            of this machine).
        pid: the root of its process tree here (the API server), ``None`` when not found.
        compute_cpus: the cores its bound (computing) threads run on, sorted; ``None`` when
            unknown: elsewhere, not found, or nothing bound (a GPU build).
    """

    this_host: bool
    pid: int | None = None
    compute_cpus: list[int] | None = None

    def as_dict(self) -> dict[str, object]:
        return asdict(self)

    @classmethod
    def of_process(cls, pid: int) -> ServerHost:
        """A server of this host whose process tree is rooted at ``pid``."""
        cpus = compute_cpus(pid)
        return cls(True, pid, sorted(cpus) if cpus is not None else None)

    @classmethod
    def of_url(cls, url: str) -> ServerHost:
        """The server answering at ``url``: found here by the socket it listens on when the
        URL names this machine, else elsewhere."""
        parts = urlsplit(url)
        addresses = local_addresses(parts.hostname) if parts.hostname else set()
        if not addresses:
            return cls(False)
        port = parts.port or (443 if parts.scheme == "https" else 80)
        pid = listener_pid(port, addresses)
        return cls.of_process(pid) if pid is not None else cls(True)
