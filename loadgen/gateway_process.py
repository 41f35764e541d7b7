"""Running the gateway in its own process in front of a case's server.

A separate process, so the proxy's work never runs on the event loop that timestamps tokens;
its log and its events file (breaker transitions) go to the case directory, and it is always
stopped (SIGTERM, then SIGKILL). It counts as ready when its ``/health`` says 200, which it
only does once an upstream really answers its own ``/health``.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path

import httpx

from server.net.http import get_bounded
from server.net.limits import CONTROL_MAX_BYTES
from server.process import spawn_group, stop_group

_READY_PREFIX = "gateway listening on "


@dataclass(frozen=True)
class GatewayProcess:
    """A started gateway: its base URL and its process id (to keep it off the server's
    cores, ``loadgen.placement``)."""

    url: str
    pid: int
    #: The process's exit code once it has ended (``Popen.poll``), else ``None``.
    exit_code: Callable[[], int | None]


@contextlib.asynccontextmanager
async def running_gateway_process(
    upstreams: list[str],
    log_path: Path,
    *,
    propagate_cancellation: bool,
    events_path: Path | None = None,
    extra_args: tuple[str, ...] = (),
    timeout_s: float = 30.0,
) -> AsyncIterator[GatewayProcess]:
    """Start ``python -m gateway.cli`` for ``upstreams`` on a free loopback port; yield its URL
    and pid.

    ``events_path`` receives the gateway's breaker transitions (``--events-file``).

    Raises:
        RuntimeError: the gateway did not report its URL and answer ``/health`` in time; the
            message quotes its log.
    """
    argv = [sys.executable, "-m", "gateway.cli", "--port", "0"]
    for upstream in upstreams:
        argv += ["--upstream", upstream]
    if not propagate_cancellation:
        argv.append("--no-propagate-cancellation")
    if events_path is not None:
        argv += ["--events-file", str(events_path)]
    argv += list(extra_args)
    # Unbuffered, so the log shows transitions as they happen and the ready line at once.
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc: subprocess.Popen[bytes] = spawn_group(argv, log_path, env)
    try:
        url = await _wait_ready(proc, log_path, timeout_s)
        yield GatewayProcess(url, proc.pid, proc.poll)
    finally:
        await asyncio.shield(asyncio.to_thread(stop_group, proc.pid, 5.0, proc.poll))


async def _wait_ready(proc: subprocess.Popen[bytes], log_path: Path, timeout_s: float) -> str:
    deadline = time.monotonic() + timeout_s
    # Longer than the gateway's own live checks of its upstreams (1 s by default).
    async with httpx.AsyncClient(timeout=5.0) as client:
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                break
            text = log_path.read_text(errors="replace") if log_path.exists() else ""
            for line in text.splitlines():
                if line.startswith(_READY_PREFIX):
                    url = line[len(_READY_PREFIX) :].split(" ", 1)[0]
                    with contextlib.suppress(httpx.HTTPError):
                        health = await get_bounded(client, f"{url}/health", CONTROL_MAX_BYTES)
                        if health.status_code == 200:
                            return url
            await asyncio.sleep(0.1)
    log = log_path.read_text(errors="replace")[-2000:] if log_path.exists() else ""
    raise RuntimeError(f"the gateway did not become ready within {timeout_s:.0f} s:\n{log}")
