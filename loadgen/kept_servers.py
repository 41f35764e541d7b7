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
"""

from __future__ import annotations

from pathlib import Path

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


def _key(case: CaseSpec) -> str:
    return case.model_dump_json(include={"server", "url"})


class KeptServers:
    """Running servers by case config (module docstring); one instance per gate side."""

    def __init__(self, root: Path) -> None:
        """``root``: where each kept server's files go (``root/server-N``)."""
        self._root = root
        self._servers: dict[str, RunningServer] = {}
        self._started = 0

    def owns(self, server: RunningServer) -> bool:
        """Whether ``server`` is one of these (its run must not stop it)."""
        return any(s is server for s in self._servers.values())

    async def open(self, case: CaseSpec, hooks: RunHooks) -> RunningServer:
        """The running server of ``case``'s config, or a new one (its files in
        ``root/server-N``) kept from now on; a kept one that exited is started again.

        Raises:
            Exception: what ``loadgen.case.starts.open_server`` raises.
        """
        key = _key(case)
        server = self._servers.get(key)
        if server is not None and server.exit_code() is None:
            hooks.message(f"case {case.name}: kept server {server.url} (prefix cache reset)")
            return server
        self._started += 1
        server = await open_server(case, self._root / f"server-{self._started}", hooks)
        self._servers[key] = server
        return server

    def stop_all(self) -> None:
        """Stop every kept server (each its process group)."""
        servers, self._servers = list(self._servers.values()), {}
        for server in servers:
            server.stop()
