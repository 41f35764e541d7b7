"""Running a proxy process: start it, wait until it relays a request (quoting its logs when it
does not), stop its whole group."""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import subprocess
import time
from collections.abc import AsyncIterator
from pathlib import Path

import httpx

from server.net.http import get_bounded
from server.net.limits import CONTROL_MAX_BYTES
from server.process import spawn_group, stop_group

#: Terminal colour and cursor sequences (CSI ... final byte), which a quoted log must not carry.
_ANSI_ESCAPE = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]")


def is_executable_file(path: str) -> bool:
    """``path`` is a regular file (after symlinks) this process may execute: a directory has
    the execute bit too, and fails only when it is run."""
    return os.path.isfile(path) and os.access(path, os.X_OK)


def log_tail(paths: list[Path], limit: int = 2000) -> str:
    """The last ``limit`` characters of each of ``paths`` that has any (terminal escape
    sequences removed), each under its path; says so when none has a line."""
    parts = []
    for path in paths:
        text = path.read_text(errors="replace") if path.exists() else ""
        text = _ANSI_ESCAPE.sub("", text).strip()  # vllm-router colours its log regardless
        if text:
            parts.append(f"{path}:\n{text[-limit:]}")
    return "\n".join(parts) if parts else f"(nothing in {', '.join(map(str, paths))})"


async def wait_relaying(
    proc: subprocess.Popen[bytes], url: str, logs: list[Path], timeout_s: float, name: str
) -> None:
    """Return once ``GET url/health`` through the proxy answers 200 (so the proxy listens and
    reaches its upstream).

    Raises:
        RuntimeError: the process exited, or no 200 within ``timeout_s`` seconds; the message
            quotes the end of each of ``logs``.
    """
    deadline = time.monotonic() + timeout_s
    async with httpx.AsyncClient(timeout=2.0) as client:
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise RuntimeError(
                    f"{name} exited with code {proc.returncode} before it relayed a request; "
                    f"{log_tail(logs)}"
                )
            with contextlib.suppress(httpx.HTTPError):
                health = await get_bounded(client, f"{url}/health", CONTROL_MAX_BYTES)
                if health.status_code == 200:
                    return
            await asyncio.sleep(0.1)
    raise RuntimeError(f"{name} did not relay /health within {timeout_s:.0f} s; {log_tail(logs)}")


@contextlib.asynccontextmanager
async def running_relay(
    argv: list[str],
    env: dict[str, str],
    url: str,
    log: Path,
    logs: list[Path],
    timeout_s: float,
    name: str,
) -> AsyncIterator[subprocess.Popen[bytes]]:
    """Start ``argv`` as its own process group (output to ``log``); yield the process once
    ``url`` relays ``/health`` (:func:`wait_relaying`, quoting ``logs``); stop the group on
    exit (SIGTERM, then SIGKILL after 5 s).

    Raises:
        RuntimeError: it exited or did not relay ``/health`` in time.
    """
    proc = spawn_group(argv, log, env)
    try:
        await wait_relaying(proc, url, logs, timeout_s, name)
        yield proc
    finally:
        await asyncio.shield(asyncio.to_thread(stop_group, proc.pid, 5.0, proc.poll))
