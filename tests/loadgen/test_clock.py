"""The real clock's waits end at their deadline, never before it (loadgen.clock).

Only the never-early property is asserted: how late a wait ends depends on the machine's
load, which tests do not time (the benchmarks do)."""

from __future__ import annotations

import asyncio
import os
import random
import time

import pytest
import uvloop

from loadgen import clock as clock_module
from loadgen.clock import TIMER_GRAIN_NS, MonotonicClock, ShiftedClock


def _deadlines(n: int, seed: int) -> list[int]:
    """Delays from 0.05 ms to 6 ms: both below and above the loop timer's hand-over."""
    rng = random.Random(seed)
    return [int(rng.uniform(50_000, 3 * TIMER_GRAIN_NS)) for _ in range(n)]


async def _earliest_wake_ns(clock: MonotonicClock, delays: list[int]) -> int:
    """Min over the waits of (woke − deadline) on ``clock``'s own scale, in ns."""
    worst = None
    for delay in delays:
        deadline = clock.now_ns() + delay
        await clock.sleep_until_ns(deadline)
        margin = clock.now_ns() - deadline
        worst = margin if worst is None else min(worst, margin)
    assert worst is not None
    return worst


def test_uvloop_sleeps_never_end_before_their_deadline() -> None:
    # A bare asyncio.sleep on uvloop returned early in about a third of such waits here.
    assert uvloop.run(_earliest_wake_ns(MonotonicClock(), _deadlines(300, 1))) >= 0


async def test_default_loop_sleeps_never_end_before_their_deadline() -> None:
    assert await _earliest_wake_ns(MonotonicClock(), _deadlines(200, 2)) >= 0


async def test_a_shifted_clock_waits_on_its_own_scale() -> None:
    # A clock 1000 s ahead: its deadlines are 1000 s ahead of monotonic time too, and a wait
    # must neither return at once (deadline read as monotonic) nor hang for 1000 s.
    shifted = ShiftedClock(1_000 * 10**9)
    started = time.monotonic_ns()
    assert await asyncio.wait_for(_earliest_wake_ns(shifted, _deadlines(50, 3)), 10) >= 0
    assert time.monotonic_ns() - started >= sum(_deadlines(50, 3))


async def test_without_a_timerfd_the_fallback_is_never_early_either(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(clock_module, "_TIMERFD", None)
    assert await _earliest_wake_ns(MonotonicClock(), _deadlines(200, 4)) >= 0


async def test_a_deadline_already_passed_returns_at_once() -> None:
    clock = MonotonicClock()
    before = time.monotonic_ns()
    await clock.sleep_until_ns(before - 5 * 10**9)
    assert time.monotonic_ns() - before < 5 * 10**9  # not a wait of |deadline| either


def _open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


async def test_cancelled_and_finished_waits_leave_no_file_descriptor(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    clock = MonotonicClock()
    before = _open_fds()
    for _ in range(20):  # finished waits, each on a timerfd for its last stretch
        await clock.sleep_until_ns(clock.now_ns() + TIMER_GRAIN_NS // 4)
    assert _open_fds() == before
    # Waits a minute away cannot end before they are cancelled, however slow the machine
    # (a 1 ms wait did, on a loaded CI run). These wait on the loop's timer...
    far = clock.now_ns() + 60 * 10**9
    waits = [asyncio.create_task(clock.sleep_until_ns(far)) for _ in range(20)]
    await asyncio.sleep(0)
    assert _open_fds() == before
    # ...and these, with the hand-over moved beyond their deadline, on a timerfd each.
    monkeypatch.setattr(clock_module, "TIMER_GRAIN_NS", 120 * 10**9)
    waits += [asyncio.create_task(clock.sleep_until_ns(far)) for _ in range(20)]
    await asyncio.sleep(0)
    assert _open_fds() == before + 20
    for wait in waits:
        wait.cancel()
    await asyncio.gather(*waits, return_exceptions=True)
    assert all(w.cancelled() for w in waits)
    assert _open_fds() == before
