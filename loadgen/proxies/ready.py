"""Is a relay ready? Its ``/health`` through it, and its logs quoted when it is not."""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import subprocess
import time
from pathlib import Path

import httpx

from server.net.http import get_bounded
from server.net.limits import CONTROL_MAX_BYTES

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
    # Longer than the gateway's own live checks of its upstreams (1 s by default).
    async with httpx.AsyncClient(timeout=5.0) as client:
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
    raise RuntimeError(
        f"{name} did not become ready within {timeout_s:.0f} s (no 200 from /health through "
        f"it); {log_tail(logs)}"
    )
