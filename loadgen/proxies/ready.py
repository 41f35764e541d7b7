"""Is a relay ready? Its ``/health`` through it (``server.net.health``), and its logs quoted
(``server.logs``) when it is not."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from server.logs import log_tail
from server.net.health import NotHealthy, wait_healthy


def is_executable_file(path: str) -> bool:
    """``path`` is a regular file (after symlinks) this process may execute: a directory has
    the execute bit too, and fails only when it is run."""
    return os.path.isfile(path) and os.access(path, os.X_OK)


async def wait_relaying(
    proc: subprocess.Popen[bytes], url: str, logs: list[Path], timeout_s: float, name: str
) -> None:
    """Return once ``GET url/health`` through the proxy is healthy (``server.net.health``: so
    the proxy listens and reaches its upstream).

    Raises:
        RuntimeError: the process exited, or was not healthy within ``timeout_s`` seconds;
            the message quotes the end of each of ``logs`` (``server.logs.log_tail``).
    """
    try:
        # Each check may take longer than the gateway's own live checks of its upstreams
        # (1 s by default).
        await wait_healthy(url, timeout_s=timeout_s, check_timeout_s=5.0, exited=proc.poll)
    except NotHealthy as exc:
        if exc.exit_code is not None:
            raise RuntimeError(
                f"{name} exited with code {exc.exit_code} before it relayed a request; "
                f"{log_tail(logs)}"
            ) from None
        raise RuntimeError(
            f"{name} did not become ready within {timeout_s:.0f} s (no 200 from /health through "
            f"it); {log_tail(logs)}"
        ) from None
