"""The one interface of a relay: a process a case's requests cross on their way to its servers.

The project's gateway, nginx and vllm-router are relays of three kinds. A kind only says how
it is found (:meth:`RelayKind.find`) and what command runs it in front of some upstreams
(:meth:`RelayKind.command`); every kind is then started, health-checked and stopped the same
way (:func:`running_relay`): its own process group on a free loopback port, ready once a
``GET /health`` through it answers 200 (so it listens and reaches an upstream), stopped with
SIGTERM to its group, then SIGKILL.
"""

from __future__ import annotations

import asyncio
import contextlib
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from loadgen.proxies.ready import wait_relaying
from server.process import spawn_group, stop_group


@dataclass(frozen=True)
class RelayCommand:
    """How to run one relay: its command line and environment, the base URL it will listen
    on (``http://127.0.0.1:PORT``), the file its output goes to and the files quoted when it
    fails to start."""

    argv: list[str]
    env: dict[str, str]
    url: str
    log: Path
    logs: list[Path]


@dataclass(frozen=True)
class Relay:
    """A started relay: its name in messages, base URL and process id (to keep it off the
    servers' cores, ``loadgen.placement``)."""

    name: str
    url: str
    pid: int
    #: The process's exit code once it has ended (``Popen.poll``; negative for a signal),
    #: else ``None``.
    exit_code: Callable[[], int | None]


class RelayKind(ABC):
    """One kind of relay (the gateway, nginx, vllm-router)."""

    #: The kind's name in messages ("the gateway", "nginx").
    name: ClassVar[str]
    #: Seconds it gets to relay its first ``/health``.
    timeout_s: ClassVar[float] = 60.0
    #: The variable that names its executable explicitly (``None``: nothing to install).
    env_var: ClassVar[str | None] = None
    #: What to say when it is not installed.
    install_hint: ClassVar[str] = ""

    @abstractmethod
    def find(self) -> str | None:
        """Its executable, ``None`` when it is not installed."""

    @abstractmethod
    def command(
        self, spec: Any, binary: str, upstreams: Sequence[str], workdir: Path
    ) -> RelayCommand:
        """The command that runs it per ``spec`` in front of ``upstreams`` (base URLs), its
        files in ``workdir``.

        Raises:
            ValueError: it cannot relay to these upstreams.
            OSError: a file of its config cannot be written.
        """

    def workdir(self, case_dir: Path) -> Path:
        """Where its files go within a case's directory."""
        return case_dir


@contextlib.asynccontextmanager
async def running_relay(command: RelayCommand, name: str, timeout_s: float) -> AsyncIterator[Relay]:
    """Start ``command`` as its own process group; yield it once its URL relays ``/health``;
    stop the group on exit (SIGTERM, then SIGKILL after 5 s).

    Raises:
        RuntimeError: it exited, or did not relay ``/health`` within ``timeout_s`` seconds;
            the message quotes its logs.
    """
    proc = spawn_group(command.argv, command.log, command.env)
    try:
        await wait_relaying(proc, command.url, command.logs, timeout_s, name)
        yield Relay(name, command.url, proc.pid, proc.poll)
    finally:
        await asyncio.shield(asyncio.to_thread(stop_group, proc.pid, 5.0, proc.poll))
