"""``GET /health``: the one check of a server's health and the one wait until it is healthy.

Every package asks a server (vLLM, a proxy, the gateway, the gateway's upstreams) whether it
is healthy the same way: :func:`check_health` makes one bounded ``GET URL/health`` and says
why not in words; :func:`wait_healthy` repeats it until the server is healthy, its process
exits, time runs out or the tries are spent.

Healthy means a 2xx answer (vLLM answers 200 with an empty body); a redirect is not followed
and is not healthy. Each check reads at most ``server.net.limits.CONTROL_MAX_BYTES`` of the
answer and takes at most its timeout, connecting included. The checks go straight to the
server (``trust_env=False``: no proxy from the environment).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass

import httpx

from server.net.errors import describe_exception
from server.net.http import get_bounded
from server.net.limits import CONTROL_MAX_BYTES

#: Seconds between two checks while waiting: a server that becomes healthy is noticed at most
#: this late (a 1 s poll added 0.5 s per vLLM start on average, and stamped a restarted
#: replica's recovery later than the gateway's breaker saw it).
HEALTH_POLL_S = 0.1


@dataclass(frozen=True)
class Health:
    """What one ``GET URL/health`` found.

    Attributes:
        status: the HTTP status of the answer, ``None`` when none came.
        problem: ``None`` when healthy; else why not, one line: ``"HTTP 503"``, ``"no answer
            within 2 s"``, ``"cannot connect: ConnectError: … (ECONNREFUSED)"`` or ``"check
            failed (RemoteProtocolError: …)"``.
        cause: when no answer came, the failure described (``server.net.errors``), else
            ``None``.
    """

    status: int | None
    problem: str | None = None
    cause: str | None = None

    @property
    def ok(self) -> bool:
        """Whether the server answered 2xx."""
        return self.problem is None


def health_client(timeout_s: float = 2.0) -> httpx.AsyncClient:
    """An ``httpx`` client for health checks: each request bounded by ``timeout_s`` seconds,
    no proxy from the environment, no redirect followed. The caller closes it."""
    return httpx.AsyncClient(timeout=timeout_s, trust_env=False)


async def check_health(client: httpx.AsyncClient, url: str, timeout_s: float) -> Health:
    """``GET url/health`` once, within ``timeout_s`` seconds in all; never raises for the
    server's trouble (refused, reset, slow, oversized, any status)."""
    try:
        async with asyncio.timeout(timeout_s):
            answer = await get_bounded(client, f"{url}/health", CONTROL_MAX_BYTES)
    except (TimeoutError, httpx.TimeoutException) as exc:
        return Health(None, f"no answer within {timeout_s:g} s", describe_exception(exc))
    except httpx.ConnectError as exc:  # the cause named: refused, unreachable, DNS
        cause = describe_exception(exc)
        return Health(None, f"cannot connect: {cause}", cause)
    except httpx.HTTPError as exc:
        cause = describe_exception(exc)
        return Health(None, f"check failed ({cause})", cause)
    status = answer.status_code
    return Health(status, None if 200 <= status < 300 else f"HTTP {status}")


class NotHealthy(Exception):
    """:func:`wait_healthy` gave up: the process exited, or time or tries ran out.

    Attributes:
        url: the server's base URL.
        exit_code: the process's exit code when it exited, else ``None``.
        elapsed_s: seconds from the start of the wait.
        last: what the last check found (``None`` when the process exited before the first).
    """

    def __init__(
        self, url: str, exit_code: int | None, elapsed_s: float, last: Health | None
    ) -> None:
        self.url, self.exit_code, self.elapsed_s, self.last = url, exit_code, elapsed_s, last
        if exit_code is not None:
            why = f"the process exited with code {exit_code}"
        else:
            why = f"{url}/health was not healthy ({last.problem if last else 'not checked'})"
        super().__init__(f"{why} after {elapsed_s:.0f} s")


async def wait_healthy(
    url: str,
    *,
    timeout_s: float | None = None,
    attempts: int | None = None,
    every_s: float = HEALTH_POLL_S,
    check_timeout_s: float = 2.0,
    exited: Callable[[], int | None] | None = None,
    on_wait: Callable[[float], None] | None = None,
) -> None:
    """Check ``url/health`` (:func:`check_health`) every ``every_s`` seconds until healthy.

    Before each check ``exited()`` (a process's ``poll``) is asked whether the server's
    process ended; at least one check is made, and the wait gives up after the first failed
    check past the deadline or the last of the attempts; after each other failed check
    ``on_wait(elapsed_s)`` is called (a caller's progress line).

    Args:
        url: the server's base URL (``http://127.0.0.1:8000``).
        timeout_s: give up after this many seconds (``None``: no deadline).
        attempts: give up after this many checks (``None``: no limit).
        every_s: the pause between two checks (s).
        check_timeout_s: the bound of each check (s).
        exited: the server process's exit code, ``None`` while it runs.
        on_wait: called after each failed check with the seconds since the start.

    Raises:
        NotHealthy: the process exited, the deadline passed, or ``attempts`` checks failed.
    """
    start = time.monotonic()
    last: Health | None = None
    tries = 0
    async with health_client(check_timeout_s) as client:
        while True:
            if exited is not None and (code := exited()) is not None:
                raise NotHealthy(url, code, time.monotonic() - start, last)
            last = await check_health(client, url, check_timeout_s)
            tries += 1
            if last.ok:
                return
            elapsed = time.monotonic() - start
            if (timeout_s is not None and elapsed > timeout_s) or tries == attempts:
                raise NotHealthy(url, None, elapsed, last)
            if on_wait is not None:
                on_wait(elapsed)
            await asyncio.sleep(every_s)
