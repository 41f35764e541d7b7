"""Waiting for a started proxy to relay a request, and quoting its log when it does not."""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
import time
from pathlib import Path

import httpx

from server.net.http import get_bounded
from server.net.limits import CONTROL_MAX_BYTES


def log_tail(log_path: Path, limit: int = 2000) -> str:
    """The last ``limit`` characters of ``log_path`` ('' when it does not exist)."""
    return log_path.read_text(errors="replace")[-limit:] if log_path.exists() else ""


async def wait_relaying(
    proc: subprocess.Popen[bytes], url: str, log_path: Path, timeout_s: float, name: str
) -> None:
    """Return once ``GET url/health`` through the proxy answers 200 (so the proxy listens and
    reaches its upstream).

    Raises:
        RuntimeError: the process exited, or no 200 within ``timeout_s`` seconds; the message
            quotes the end of ``log_path``.
    """
    deadline = time.monotonic() + timeout_s
    async with httpx.AsyncClient(timeout=2.0) as client:
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise RuntimeError(
                    f"{name} exited with code {proc.returncode} before it relayed a request:\n"
                    f"{log_tail(log_path)}"
                )
            with contextlib.suppress(httpx.HTTPError):
                health = await get_bounded(client, f"{url}/health", CONTROL_MAX_BYTES)
                if health.status_code == 200:
                    return
            await asyncio.sleep(0.1)
    raise RuntimeError(
        f"{name} did not relay /health within {timeout_s:.0f} s:\n{log_tail(log_path)}"
    )
