"""Injectable time source: the load loop reads and waits on time only through a ``Clock``.

Waits end at their deadline, never before it. asyncio's timers count in whole milliseconds
(uvloop's are libuv's, on a loop time read once per iteration and floored to the ms; the
default loop rounds its epoll timeout), so a bare ``asyncio.sleep`` to a deadline can return
early by most of a millisecond, and an open-loop scheduler that slept that way sent requests
before their time (measured: docs/benchmarks.md, "Other measurements"). So the real clock sleeps
on the loop's timer only until :data:`TIMER_GRAIN_NS` before the deadline and then waits on a
Linux ``timerfd`` armed at the deadline itself (an hrtimer: it wakes the loop within the
thread's timer slack, 50 µs by default; ``man 2 timerfd_create``). Where there is no timerfd
the last stretch repeats the loop's timer until the deadline has passed: never early, only
less exact.
"""

from __future__ import annotations

import asyncio
import ctypes
import os
import time
from collections.abc import Callable
from typing import Protocol

#: How far before a deadline the loop's own (whole-millisecond) timer hands over to the
#: timerfd: more than the loop timer's early error (under 1 ms), so it never overshoots.
TIMER_GRAIN_NS = 2_000_000


class Clock(Protocol):
    """Monotonic time in integer nanoseconds, and waiting until a point on that scale."""

    def now_ns(self) -> int: ...

    async def sleep_until_ns(self, deadline_ns: int) -> None: ...


class _Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


class _Itimerspec(ctypes.Structure):
    _fields_ = [("it_interval", _Timespec), ("it_value", _Timespec)]


_CLOCK_MONOTONIC = 1  # <linux/time.h>; the clock time.monotonic_ns reads
_TFD_TIMER_ABSTIME = 1  # <sys/timerfd.h>


def _load_timerfd() -> tuple[Callable[..., int], Callable[..., int]] | None:
    """libc's ``timerfd_create`` and ``timerfd_settime``, or ``None`` where they are absent."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        create, settime = libc.timerfd_create, libc.timerfd_settime
    except (OSError, AttributeError):
        return None
    create.argtypes, create.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    settime.argtypes = [
        ctypes.c_int,
        ctypes.c_int,
        ctypes.POINTER(_Itimerspec),
        ctypes.POINTER(_Itimerspec),
    ]
    settime.restype = ctypes.c_int
    return create, settime


_TIMERFD = _load_timerfd()


def _timerfd_at(deadline_ns: int) -> int | None:
    """A non-blocking timerfd that becomes readable at ``deadline_ns`` (CLOCK_MONOTONIC), or
    ``None`` when this system has none (the caller then falls back to the loop's timer)."""
    if _TIMERFD is None:
        return None
    create, settime = _TIMERFD
    fd = create(_CLOCK_MONOTONIC, os.O_NONBLOCK | os.O_CLOEXEC)
    if fd < 0:
        return None
    spec = _Itimerspec()
    spec.it_value.tv_sec, spec.it_value.tv_nsec = divmod(deadline_ns, 1_000_000_000)
    if settime(fd, _TFD_TIMER_ABSTIME, ctypes.byref(spec), None) != 0:
        os.close(fd)
        return None
    return fd


async def _wait_readable(fd: int) -> None:
    loop = asyncio.get_running_loop()
    ready = loop.create_future()

    def wake() -> None:
        if not ready.done():
            ready.set_result(None)

    loop.add_reader(fd, wake)
    try:
        await ready
    finally:
        loop.remove_reader(fd)


async def sleep_until_monotonic_ns(deadline_ns: int) -> None:
    """Return at ``deadline_ns`` on ``time.monotonic_ns``'s scale (CLOCK_MONOTONIC), never
    before it; at once if it has passed. Cancellable; leaves no file descriptor behind."""
    delay_ns = deadline_ns - time.monotonic_ns()
    if delay_ns <= 0:
        return
    if delay_ns > TIMER_GRAIN_NS:
        await asyncio.sleep((delay_ns - TIMER_GRAIN_NS) / 1e9)
        if time.monotonic_ns() >= deadline_ns:
            return
    fd = _timerfd_at(deadline_ns)
    if fd is not None:
        try:
            await _wait_readable(fd)
        finally:
            os.close(fd)
        return
    while (left_ns := deadline_ns - time.monotonic_ns()) > 0:
        await asyncio.sleep(left_ns / 1e9)


class MonotonicClock:
    """The real clock: ``time.monotonic_ns`` (CLOCK_MONOTONIC, comparable across processes);
    waits end at the deadline, never before (:func:`sleep_until_monotonic_ns`)."""

    def now_ns(self) -> int:
        return time.monotonic_ns()

    async def sleep_until_ns(self, deadline_ns: int) -> None:
        await sleep_until_monotonic_ns(deadline_ns)


class ShiftedClock(MonotonicClock):
    """The monotonic clock read ``shift_ns`` ahead. Stands in, in tests, for the clock of
    another host, whose monotonic time counts from another origin (its boot)."""

    def __init__(self, shift_ns: int) -> None:
        self.shift_ns = shift_ns

    def now_ns(self) -> int:
        return time.monotonic_ns() + self.shift_ns

    async def sleep_until_ns(self, deadline_ns: int) -> None:
        await sleep_until_monotonic_ns(deadline_ns - self.shift_ns)


def wall_anchor() -> dict[str, int]:
    """One pairing of wall-clock and monotonic time, written once per run to convert stamps."""
    return {"wall_ns": time.time_ns(), "monotonic_ns": time.monotonic_ns()}
