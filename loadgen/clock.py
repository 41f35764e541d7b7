"""Injectable time source: the load loop reads and waits on time only through a ``Clock``."""

from __future__ import annotations

import asyncio
import time
from typing import Protocol


class Clock(Protocol):
    """Monotonic time in integer nanoseconds, and waiting until a point on that scale."""

    def now_ns(self) -> int: ...

    async def sleep_until_ns(self, deadline_ns: int) -> None: ...


class MonotonicClock:
    """The real clock: ``time.monotonic_ns`` (CLOCK_MONOTONIC, comparable across processes)."""

    def now_ns(self) -> int:
        return time.monotonic_ns()

    async def sleep_until_ns(self, deadline_ns: int) -> None:
        delay_ns = deadline_ns - time.monotonic_ns()
        if delay_ns > 0:
            await asyncio.sleep(delay_ns / 1e9)


class ShiftedClock(MonotonicClock):
    """The monotonic clock read ``shift_ns`` ahead. Stands in, in tests, for the clock of
    another host, whose monotonic time counts from another origin (its boot)."""

    def __init__(self, shift_ns: int) -> None:
        self.shift_ns = shift_ns

    def now_ns(self) -> int:
        return time.monotonic_ns() + self.shift_ns

    async def sleep_until_ns(self, deadline_ns: int) -> None:
        delay_ns = deadline_ns - self.now_ns()
        if delay_ns > 0:
            await asyncio.sleep(delay_ns / 1e9)


def wall_anchor() -> dict[str, int]:
    """One pairing of wall-clock and monotonic time, written once per run to convert stamps."""
    return {"wall_ns": time.time_ns(), "monotonic_ns": time.monotonic_ns()}
