"""The layered timeouts of one proxied exchange: first token, idle, total (seconds, monotonic).

Every wait on the upstream goes through :func:`within`, which never waits past the exchange's
total deadline and says which limit fired.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable
from typing import TypeVar

T = TypeVar("T")


class PhaseTimeout(Exception):
    """One of the layered timeouts expired; ``kind`` is first_token, idle or total."""

    def __init__(self, kind: str, limit_s: float) -> None:
        super().__init__(f"{kind} timeout after {limit_s:g} s")
        self.kind = kind
        self.limit_s = limit_s


async def within(
    aw: Awaitable[T], limit_s: float | None, kind: str, deadline_s: float, total_s: float
) -> T:
    """Await ``aw`` for at most ``limit_s`` and never past ``deadline_s`` (monotonic s).

    Raises :class:`PhaseTimeout` naming the limit that fired (``kind`` or ``"total"``).
    """
    remaining_s = deadline_s - time.monotonic()
    if limit_s is None or remaining_s <= limit_s:
        budget_s, kind, limit_s = remaining_s, "total", total_s
    else:
        budget_s = limit_s
    timeout = asyncio.timeout(max(budget_s, 0.0))
    try:
        async with timeout:
            return await aw
    except TimeoutError:
        if timeout.expired():
            raise PhaseTimeout(kind, limit_s) from None
        raise
