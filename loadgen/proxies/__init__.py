"""The relays a case can put in front of its servers: the project's gateway and two
third-party reverse proxies, nginx and vllm-router.

Every relay is one :class:`~loadgen.proxies.relay.RelayKind` (how it is found, what command
runs it) and is started, health-checked and stopped the same way
(:func:`~loadgen.proxies.relay.running_relay`): its own process on a free loopback port, its
files (config, log) in the case directory, always stopped with the case (SIGTERM to its group,
then SIGKILL). The third-party proxies answer the question the project's own gateway cannot:
what does a proxy people really deploy do when a client disconnects? :func:`check_installed`
says before any load is sent whether each one a plan names is installed;
:func:`running_relay_for` starts the relay a case names in front of every one of its servers.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import AsyncIterator, Iterable, Sequence
from pathlib import Path

from loadgen.proxies.gateway import GatewayKind
from loadgen.proxies.nginx import NginxKind
from loadgen.proxies.relay import Relay, RelayKind, running_relay
from loadgen.proxies.vllm_router import VllmRouterKind
from scenarios.plan import CaseSpec, GatewaySpec, ProxySpec

#: Every relay kind by the ``kind`` of the spec that names it.
RELAYS: dict[str, RelayKind] = {
    "gateway": GatewayKind(),
    "nginx": NginxKind(),
    "vllm-router": VllmRouterKind(),
}


class ProxyNotInstalledError(RuntimeError):
    """The proxy a case names is not installed here; the message says how to install it."""


def find_proxy(spec: GatewaySpec | ProxySpec) -> str:
    """The executable that runs ``spec``'s relay.

    Raises:
        ProxyNotInstalledError: it is not installed (the message says how to install it).
    """
    kind = RELAYS[spec.kind]
    found = kind.find()
    if found is None:
        named = os.environ.get(kind.env_var) if kind.env_var else None
        if named:
            raise ProxyNotInstalledError(
                f"${kind.env_var} names {named}, which is not an executable file"
            )
        raise ProxyNotInstalledError(kind.install_hint)
    return found


def check_installed(cases: Iterable[CaseSpec]) -> None:
    """Check, before anything starts, that every relay the cases name is installed.

    Raises:
        ProxyNotInstalledError: one is not ("case NAME: ..." and how to install it).
    """
    for case in cases:
        if case.relay is not None:
            try:
                find_proxy(case.relay)
            except ProxyNotInstalledError as exc:
                raise ProxyNotInstalledError(f"case {case.name}: {exc}") from None


@contextlib.asynccontextmanager
async def running_relay_for(
    spec: GatewaySpec | ProxySpec,
    upstreams: Sequence[str],
    case_dir: Path,
    *,
    timeout_s: float | None = None,
) -> AsyncIterator[Relay]:
    """Start ``spec``'s relay in front of ``upstreams`` (base URLs, ``http://host:port``),
    its files under ``case_dir`` (the gateway's log and events file in it, a proxy's config
    and logs in its ``proxy/``); yield it once it relays a request to an upstream's
    ``/health``; stop it on exit.

    Raises:
        ProxyNotInstalledError: the relay is not installed.
        ValueError: it cannot relay to ``upstreams`` (nginx: a path or credentials in one).
        RuntimeError: it exited or did not relay ``/health`` within ``timeout_s`` seconds
            (the kind's own limit by default); the message quotes its log.
    """
    kind = RELAYS[spec.kind]
    binary = find_proxy(spec)
    command = kind.command(spec, binary, upstreams, kind.workdir(case_dir))
    limit = kind.timeout_s if timeout_s is None else timeout_s
    async with running_relay(command, kind.name, limit) as relay:
        yield relay


@contextlib.asynccontextmanager
async def running_proxy(
    spec: ProxySpec, upstream_url: str, workdir: Path, *, timeout_s: float = 60.0
) -> AsyncIterator[Relay]:
    """Start ``spec``'s proxy in front of ``upstream_url`` with its files in ``workdir``
    (nginx: ``nginx.conf``, ``error.log``, ``nginx.log``; vllm-router: ``vllm-router.log``);
    yield it once it relays ``/health``; stop it on exit.

    Raises:
        as :func:`running_relay_for`.
    """
    kind = RELAYS[spec.kind]
    command = kind.command(spec, find_proxy(spec), [upstream_url], workdir)
    async with running_relay(command, kind.name, timeout_s) as relay:
        yield relay
