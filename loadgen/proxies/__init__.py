"""Third-party reverse proxies a case can put in front of its server: nginx and vllm-router.

Each runs as its own process on a free loopback port, with its files (config, log) in the
case directory, and is always stopped with the case (SIGTERM to its group, then SIGKILL).
They answer the question the project's own gateway cannot: what does a proxy people really
deploy do when a client disconnects? :func:`find_proxy` says before any load is sent whether
one is installed; :func:`running_proxy` starts it.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import AsyncIterator, Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from loadgen.proxies.nginx import NGINX_ENV, find_nginx, running_nginx
from loadgen.proxies.vllm_router import VLLM_ROUTER_ENV, find_vllm_router, running_vllm_router
from scenarios.plan import CaseSpec, ProxySpec


class ProxyNotInstalledError(RuntimeError):
    """The proxy a case names is not installed here; the message says how to install it."""


@dataclass(frozen=True)
class ProxyProcess:
    """A started proxy: its base URL (``http://127.0.0.1:PORT``) and its process id."""

    url: str
    pid: int
    #: The process's exit code once it has ended (``Popen.poll``), else ``None``.
    exit_code: Callable[[], int | None]


#: The variable that names each proxy's executable explicitly.
ENV_VAR = {"nginx": NGINX_ENV, "vllm-router": VLLM_ROUTER_ENV}

INSTALL_HINT = {
    "nginx": "nginx is not installed: `make proxies` installs it (Debian's package, as root), "
    "or put an nginx binary on PATH or in $SERVING_TESTBED_NGINX",
    "vllm-router": "vllm-router is not installed: `make proxies` installs it into "
    ".engines/vllm-router/ (its own virtualenv, from the package index), or set "
    "$SERVING_TESTBED_VLLM_ROUTER to its executable",
}


def find_proxy(spec: ProxySpec) -> str:
    """The executable that runs ``spec``'s proxy.

    Raises:
        ProxyNotInstalledError: it is not installed (the message says how to install it).
    """
    found = find_nginx() if spec.kind == "nginx" else find_vllm_router()
    if found is None:
        named = os.environ.get(ENV_VAR[spec.kind])
        if named:
            raise ProxyNotInstalledError(
                f"${ENV_VAR[spec.kind]} names {named}, which is not an executable file"
            )
        raise ProxyNotInstalledError(INSTALL_HINT[spec.kind])
    return found


def check_installed(cases: Iterable[CaseSpec]) -> None:
    """Check, before anything starts, that every proxy the cases name is installed.

    Raises:
        ProxyNotInstalledError: one is not ("case NAME: ..." and how to install it).
    """
    for case in cases:
        if case.proxy is not None:
            try:
                find_proxy(case.proxy)
            except ProxyNotInstalledError as exc:
                raise ProxyNotInstalledError(f"case {case.name}: {exc}") from None


@contextlib.asynccontextmanager
async def running_proxy(
    spec: ProxySpec, upstream_url: str, workdir: Path, *, timeout_s: float = 60.0
) -> AsyncIterator[ProxyProcess]:
    """Start ``spec``'s proxy in front of ``upstream_url`` (``http://host:port``); yield it
    once it relays a request to the upstream's ``/health``; stop it on exit.

    ``workdir`` receives its config and logs (nginx: ``nginx.conf``, ``error.log``,
    ``nginx.log``; vllm-router: ``vllm-router.log``).

    Raises:
        ProxyNotInstalledError: the proxy is not installed.
        ValueError: nginx cannot proxy to ``upstream_url`` (a path or credentials in it).
        RuntimeError: it exited or did not relay ``/health`` within ``timeout_s`` seconds;
            the message quotes its log.
    """
    binary = find_proxy(spec)
    if spec.kind == "nginx":
        started = running_nginx(binary, upstream_url, workdir, spec.ignore_client_abort, timeout_s)
    else:
        started = running_vllm_router(binary, upstream_url, workdir, timeout_s)
    async with started as (url, proc):
        yield ProxyProcess(url, proc.pid, proc.poll)
