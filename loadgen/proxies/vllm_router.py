"""vllm-router (vLLM's Rust load balancer, package ``vllm-router``) in front of one vLLM.

It is installed into its own virtualenv (``make proxies``: ``.engines/vllm-router/``), so its
dependencies never meet the project's, and runs as our own process on loopback. Its settings
are its defaults except: loopback ports chosen here (its Prometheus endpoint too, whose default
29000 two runs would share), a 1 s start-up health poll (default 30 s) and no retries (a
retried request would be sent to vLLM twice and counted once).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path

from loadgen.proxies.ready import is_executable_file, running_relay
from server.engines import engines_root
from server.process import free_loopback_port

#: The router's own virtualenv under the engines root (``make proxies`` creates it).
VENV_NAME = "vllm-router"
#: Names the router's executable explicitly.
VLLM_ROUTER_ENV = "SERVING_TESTBED_VLLM_ROUTER"
#: Its log is a file, not a terminal (it colours it all the same: quoted logs are stripped).
ROUTER_ENV = {"NO_COLOR": "1", "RUST_LOG_STYLE": "never"}


def find_vllm_router() -> str | None:
    """Path of the ``vllm-router`` executable: ``$SERVING_TESTBED_VLLM_ROUTER``, else
    ``<engines root>/vllm-router/bin/vllm-router``, else ``PATH``; ``None`` when none."""
    named = os.environ.get(VLLM_ROUTER_ENV)
    if named:
        return named if is_executable_file(named) else None
    local = engines_root() / VENV_NAME / "bin" / "vllm-router"
    if is_executable_file(str(local)):
        return str(local)
    return shutil.which("vllm-router")


def router_argv(binary: str, upstream_url: str, port: int, metrics_port: int) -> list[str]:
    """The command line that runs the router on ``127.0.0.1:port`` with one worker."""
    return [
        binary,
        "--host", "127.0.0.1",
        "--port", str(port),
        "--worker-urls", upstream_url,
        "--prometheus-host", "127.0.0.1",
        "--prometheus-port", str(metrics_port),
        "--worker-startup-check-interval", "1",
        "--disable-retries",
        "--log-level", "warning",
    ]  # fmt: skip


@contextlib.asynccontextmanager
async def running_vllm_router(
    binary: str, upstream_url: str, workdir: Path, timeout_s: float
) -> AsyncIterator[tuple[str, subprocess.Popen[bytes]]]:
    """Start the router in front of ``upstream_url``; yield ``(url, process)`` once it relays
    ``/health``; stop it on exit. Its log is ``workdir/vllm-router.log``.

    Raises:
        RuntimeError: it exited or did not relay ``/health`` in time (its log quoted).
    """
    port = free_loopback_port()
    while (metrics_port := free_loopback_port()) == port:
        pass  # the OS may hand out the same free port twice
    log = workdir / "vllm-router.log"
    url = f"http://127.0.0.1:{port}"
    argv = router_argv(binary, upstream_url, port, metrics_port)
    env = {**os.environ, **ROUTER_ENV}
    async with running_relay(argv, env, url, log, [log], timeout_s, "vllm-router") as proc:
        yield url, proc
