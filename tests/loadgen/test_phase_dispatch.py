"""loadgen.phase.run_phase: arrival patterns, concurrency limits, records, schedule lateness.

Closed-loop and all-at-once run on the real clock against the fake vLLM; open-loop scheduling
runs on a virtual clock (sleepers wake in deadline order and time jumps to each deadline), so
exact scheduled times and lateness can be asserted without waiting for them.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import itertools
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import aiohttp
import pytest
from fake_openai_server import FakeOpenAIServer, StreamScript

from loadgen.client import Target
from loadgen.clock import Clock, MonotonicClock
from loadgen.phase import PhaseTiming, run_phase
from loadgen.records import RecordWriter, RequestRecord, read_records
from scenarios.arrivals import AllAtOnce, ClosedLoop, OpenLoop, open_loop_offsets_ns
from scenarios.workloads import PlannedRequest

pytestmark = [pytest.mark.asyncio, pytest.mark.timeout(30)]

MS = 1_000_000


class VirtualClock:
    """Virtual monotonic ns: each sleeper wakes at its deadline + ``lateness_ns``, in order.

    A driver task advances time one sleeper at a time, every millisecond of real time, so the
    woken task runs (and stamps) before time moves again. Real I/O does not advance time.
    """

    def __init__(self, start_ns: int, lateness_ns: int = 0) -> None:
        self._now = start_ns
        self._lateness = lateness_ns
        self._heap: list[tuple[int, int, asyncio.Future[None]]] = []
        self._seq = itertools.count()

    def now_ns(self) -> int:
        return self._now

    async def sleep_until_ns(self, deadline_ns: int) -> None:
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        heapq.heappush(self._heap, (deadline_ns, next(self._seq), fut))
        await fut

    async def _drive(self) -> None:
        while True:
            await asyncio.sleep(0.001)
            while self._heap:
                deadline, _, fut = heapq.heappop(self._heap)
                if fut.done():  # a cancelled sleeper (the lag monitor at phase end)
                    continue
                self._now = max(self._now, deadline + self._lateness)
                fut.set_result(None)
                break

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[VirtualClock]:
        task = asyncio.get_running_loop().create_task(self._drive())
        try:
            yield self
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task


def requests(n: int, max_tokens: int = 3) -> list[PlannedRequest]:
    return [
        PlannedRequest(request_id=f"p-{i:04d}", prompt_token_ids=(i, 7, 7), max_tokens=max_tokens)
        for i in range(n)
    ]


async def run(
    fake: FakeOpenAIServer,
    arrival: ClosedLoop | AllAtOnce | OpenLoop,
    planned: list[PlannedRequest],
    path: Path,
    clock: Clock,
    on_done: Callable[[RequestRecord], None] | None = None,
) -> PhaseTiming:
    async with aiohttp.ClientSession() as session:
        with RecordWriter(path) as writer:
            return await run_phase(
                case="c",
                phase="ph",
                requests=planned,
                arrival=arrival,
                target=Target(fake.url, "m"),
                session=session,
                writer=writer,
                clock=clock,
                on_done=on_done,
            )


async def test_closed_loop_keeps_exactly_c_in_flight_in_list_order(tmp_path: Path) -> None:
    fake = FakeOpenAIServer(StreamScript(ttft_s=0.05, itl_s=0.01))
    path = tmp_path / "requests.jsonl"
    async with fake.serve():
        timing = await run(fake, ClosedLoop(concurrency=3), requests(9), path, MonotonicClock())
    assert fake.max_active == 3
    assert len(fake.seen) == 9
    records = read_records(path)
    assert sorted(r["request_id"] for r in records) == [f"p-{i:04d}" for i in range(9)]
    assert all(r["status"] == "ok" for r in records)
    # The semaphore admits waiters FIFO: send order is list order.
    by_send = sorted(records, key=lambda r: r["sent_ns"])
    assert [r["index"] for r in by_send] == list(range(9))
    assert timing.start_ns == min(r["sent_ns"] for r in records)
    assert timing.last_end_ns == max(r["end_ns"] for r in records)
    assert timing.late_sends == 0


async def test_each_record_is_on_disk_before_the_writer_closes(tmp_path: Path) -> None:
    fake = FakeOpenAIServer(StreamScript(itl_s=0.005))
    path = tmp_path / "requests.jsonl"
    on_disk: list[int] = []
    done: list[RequestRecord] = []

    def check(record: RequestRecord) -> None:
        done.append(record)
        lines = read_records(path)
        on_disk.append(len(lines))
        assert lines[-1]["request_id"] == record.request_id

    async with fake.serve():
        await run(fake, ClosedLoop(concurrency=2), requests(5), path, MonotonicClock(), check)
    assert on_disk == [1, 2, 3, 4, 5]
    assert len(done) == 5


async def test_all_at_once_has_every_request_in_flight_together(tmp_path: Path) -> None:
    fake = FakeOpenAIServer(StreamScript(ttft_s=0.2))
    async with fake.serve():
        await run(fake, AllAtOnce(), requests(6), tmp_path / "r.jsonl", MonotonicClock())
    assert fake.max_active == 6
    assert len(read_records(tmp_path / "r.jsonl")) == 6


async def test_open_loop_sends_at_phase_start_plus_offsets_on_time(tmp_path: Path) -> None:
    arrival = OpenLoop(rate_rps=20.0, seed=3)
    offsets = open_loop_offsets_ns(arrival, 10)
    start = 5_000_000_000
    clock = VirtualClock(start)
    fake = FakeOpenAIServer()
    async with fake.serve(), clock.running():
        timing = await run(fake, arrival, requests(10), tmp_path / "r.jsonl", clock)
    records = sorted(read_records(tmp_path / "r.jsonl"), key=lambda r: r["index"])
    assert [r["scheduled_ns"] - start for r in records] == offsets
    assert [r["sent_ns"] for r in records] == [r["scheduled_ns"] for r in records]
    assert all(r["status"] == "ok" for r in records)
    assert timing.start_ns == start  # the first offset is 0
    assert timing.late_sends == 0
    assert timing.loop_lag_max_ms == 0.0


async def test_open_loop_counts_sends_more_than_10ms_late(tmp_path: Path) -> None:
    # Every wake-up comes 15 ms after its deadline: all 8 sends are late, loop lag is 15 ms.
    arrival = OpenLoop(rate_rps=20.0, seed=1)
    start = 5_000_000_000
    clock = VirtualClock(start, lateness_ns=15 * MS)
    fake = FakeOpenAIServer()
    async with fake.serve(), clock.running():
        timing = await run(fake, arrival, requests(8), tmp_path / "r.jsonl", clock)
    records = read_records(tmp_path / "r.jsonl")
    assert all(r["sent_ns"] - r["scheduled_ns"] == 15 * MS for r in records)
    assert timing.late_sends == 8
    assert timing.loop_lag_max_ms == 15.0
    assert timing.loop_lag_p99_ms == 15.0
