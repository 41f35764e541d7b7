"""Servers kept running across runs: a gate keeps its baseline's and its candidate's servers
up for the whole gate and alternates runs between them, so a pair of runs minutes apart shares
the machine's state instead of each run paying a server start at another moment.

A run given :class:`KeptServers` takes a case's server from it when one with the same config is
running (else starts one and leaves it there), never stops it, and starts every case with the
prefix cache emptied: the cases' servers get vLLM's development endpoints
(``VLLM_SERVER_DEV_MODE=1``, as a fleet replica, ``scenarios.fleet_cases.fleet_server``) and
``reset_prefix_cache`` (``loadgen.case.fleet.reset_prefix_caches``, the one reset of the
project), so each block starts from the cold cache the scenario's sequence needs. The owner
stops them (:meth:`KeptServers.stop_all`). A kept server's files (its log, command, facts) live
under the owner's directory, never in a run: a run is sealed by its manifest when it ends,
and a log that goes on growing in it would break the seal.

Kept servers add up: a gate on a scenario with two cases keeps four servers, and on a small
machine the kernel's OOM killer then takes one mid-run. Before starting a server, the sides'
shared :class:`ServerMemory` stops the least recently used *idle* kept servers (of either
side) until the machine's available memory covers the new server's estimate
(:func:`server_bytes`) and :data:`HEADROOM_BYTES`; a stopped one is started again when its
case comes round. A server is in use from :meth:`KeptServers.open` until its run lets it go
(:meth:`KeptServers.release`): a gate pair runs both sides' runs at once, phase by phase
(``loadgen.turns``), and the server the other side is between two phases on must not be
stopped under it.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from pathlib import Path

import psutil

from loadgen.case.hooks import RunHooks
from loadgen.case.starts import open_server
from scenarios.fleet_cases import fleet_server
from scenarios.plan import CaseSpec, Plan
from server.manager import RunningServer


def kept_case(case: CaseSpec) -> CaseSpec:
    """``case`` as a kept server runs it: development endpoints on, prefix cache reset first.
    A case that attaches to a URL is left as it is (its server is not ours to reset)."""
    if case.server is None:
        return case
    return case.model_copy(update={"server": fleet_server(case.server), "reset_prefix_cache": True})


def kept_plan(plan: Plan) -> Plan:
    """Every case of ``plan`` through :func:`kept_case`."""
    return plan.model_copy(update={"cases": tuple(kept_case(c) for c in plan.cases)})


#: What a CPU vLLM server takes beyond its KV cache (bytes): the API server, the engine core and
#: the worker's weights and buffers. Seen with the embedded model: worker RSS − KV cache about
#: 0.5 GB, engine core 0.4 GB, API server 0.43 GB; 1.5 GiB leaves a margin.
SERVER_OVERHEAD_BYTES = 3 * 2**29
#: Available memory kept free for the load generator and the analysis (bytes).
HEADROOM_BYTES = 2**30


def server_bytes(case: CaseSpec) -> int:
    """Memory a server of ``case`` is estimated to take (bytes): its KV cache plus
    :data:`SERVER_OVERHEAD_BYTES`; 0 for a case that attaches to a URL."""
    return 0 if case.server is None else case.server.kv_cache_bytes + SERVER_OVERHEAD_BYTES


def available_bytes() -> int:
    """The machine's available memory (bytes; the kernel's ``MemAvailable``)."""
    return int(psutil.virtual_memory().available)


class ServerMemory:
    """Makes room for a new server among every side's kept servers (module docstring)."""

    def __init__(self, available: Callable[[], int] = available_bytes) -> None:
        """``available``: the machine's available memory (bytes), asked before each stop."""
        self._available = available
        self._owners: list[KeptServers] = []
        self._tick = itertools.count()

    def join(self, owner: KeptServers) -> None:
        """Let ``owner``'s servers be stopped to make room (and use its clock)."""
        self._owners.append(owner)

    def now(self) -> int:
        """A use counter shared by the owners: later uses get larger numbers."""
        return next(self._tick)

    def make_room(self, need: int, hooks: RunHooks) -> None:
        """Stop idle kept servers (none a run is using), least recently used first, until
        ``need`` + :data:`HEADROOM_BYTES` bytes are available or none is left (then the start
        goes ahead; vLLM says if it cannot allocate)."""
        while (free := self._available()) < need + HEADROOM_BYTES:
            owned = [(o.last_use(k), o, k) for o in self._owners for k in o.idle_keys()]
            if not owned:
                return
            _, owner, key = min(owned, key=lambda t: t[0])
            url = owner.stop_one(key)
            hooks.message(
                f"stopped kept server {url}: {free / 2**30:.1f} GiB available, the next server "
                f"needs about {need / 2**30:.1f} GiB + {HEADROOM_BYTES / 2**30:.0f} GiB headroom"
            )


def _key(case: CaseSpec) -> str:
    return case.model_dump_json(include={"server", "url"})


class KeptServers:
    """Running servers by case config (module docstring); one instance per gate side."""

    def __init__(self, root: Path, memory: ServerMemory | None = None) -> None:
        """``root``: where each kept server's files go (``root/server-N``); ``memory``: shared
        with the other sides (a fresh one when ``None``)."""
        self._root = root
        self._servers: dict[str, RunningServer] = {}
        self._used: dict[str, int] = {}
        self._in_use: set[str] = set()
        self._started = 0
        self._memory = memory or ServerMemory()
        self._memory.join(self)

    def kept_keys(self) -> list[str]:
        """The configs (keys) of the servers kept now."""
        return list(self._servers)

    def idle_keys(self) -> list[str]:
        """The configs (keys) of the kept servers no run is using now."""
        return [k for k in self._servers if k not in self._in_use]

    def release(self, server: RunningServer) -> None:
        """A run is done with ``server`` (it moved to another config, or ended): it may be
        stopped to make room from now on. A server not kept here is ignored."""
        self._in_use.difference_update(k for k, s in self._servers.items() if s is server)

    def last_use(self, key: str) -> int:
        """When the server of ``key`` was last taken (the shared use counter)."""
        return self._used[key]

    def stop_one(self, key: str) -> str:
        """Stop the kept server of ``key`` and forget it; returns its URL."""
        server = self._servers.pop(key)
        del self._used[key]
        self._in_use.discard(key)
        server.stop()
        return server.url

    def owns(self, server: RunningServer) -> bool:
        """Whether ``server`` is one of these (its run must not stop it)."""
        return any(s is server for s in self._servers.values())

    async def open(self, case: CaseSpec, hooks: RunHooks) -> RunningServer:
        """The running server of ``case``'s config, or a new one (its files in
        ``root/server-N``) kept from now on; a kept one that exited is started again. It is in
        use (never stopped to make room) until :meth:`release`.

        Raises:
            Exception: what ``loadgen.case.starts.open_server`` raises.
        """
        key = _key(case)
        server = self._servers.get(key)
        if server is not None and server.exit_code() is None:
            self._used[key] = self._memory.now()
            self._in_use.add(key)
            hooks.message(f"case {case.name}: kept server {server.url} (prefix cache reset)")
            return server
        if server is not None:
            self.stop_one(key)  # exited: reap its group before starting another
        self._memory.make_room(server_bytes(case), hooks)
        self._started += 1
        server = await open_server(case, self._root / f"server-{self._started}", hooks)
        self._servers[key] = server
        self._used[key] = self._memory.now()
        self._in_use.add(key)
        return server

    def stop_all(self) -> None:
        """Stop every kept server (each its process group)."""
        servers, self._servers, self._used = list(self._servers.values()), {}, {}
        self._in_use.clear()
        for server in servers:
            server.stop()
