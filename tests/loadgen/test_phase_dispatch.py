"""loadgen.phase.run_phase: arrival patterns, concurrency limits, records, schedule lateness,
connection warm-up, bounded memory and accounting of a cut-short phase.

Closed-loop and all-at-once run on the real clock against the fake vLLM; open-loop scheduling
runs on a virtual clock (sleepers wake in deadline order and time jumps to each deadline), so
exact scheduled times and lateness can be asserted without waiting for them.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import itertools
import weakref
from collections.abc import AsyncIterator, Callable, Sequence
from pathlib import Path

import aiohttp
import pytest

from loadgen.client import Target
from loadgen.clock import Clock, MonotonicClock
from loadgen.connections import open_session
from loadgen.phase import WARMUP_MAX_CONNECTIONS, PhaseTiming, run_phase, warmup_connections
from loadgen.records import RecordWriter, RequestRecord
from loadgen.runformat import ReadRecord
from loadgen.runformat.reading import read_jsonl
from scenarios.arrivals import AllAtOnce, ClosedLoop, OpenLoop, open_loop_offsets_ns
from scenarios.requests import PhaseRequests, PlannedRequest, header_of
from tests.support.fake_openai_server import FakeOpenAIServer, StreamScript

# asyncio_mode = "auto" runs the async tests; one test here is plain.


def _records(path: Path) -> list[ReadRecord]:
    return read_jsonl(path, ReadRecord).rows


pytestmark = [pytest.mark.timeout(30)]

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
    planned: Sequence[PlannedRequest],
    path: Path,
    clock: Clock,
    on_done: Callable[[RequestRecord], None] | None = None,
    session: aiohttp.ClientSession | None = None,
) -> PhaseTiming:
    async with contextlib.AsyncExitStack() as stack:
        if session is None:
            session = await stack.enter_async_context(open_session(read_timeout_s=10))
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
    records = _records(path)
    assert sorted(r.request_id for r in records) == [f"p-{i:04d}" for i in range(9)]
    assert all(r.status == "ok" for r in records)
    # Workers take the next index in turn: send order is list order.
    by_send = sorted(records, key=lambda r: r.sent_ns)
    assert [r.index for r in by_send] == list(range(9))
    # The first 3 are admitted at once; request k ≥ 3 only after k − 2 others finished.
    ends = sorted(r.end_ns for r in records)
    for r in by_send:
        assert r.scheduled_ns <= r.admitted_ns <= r.sent_ns
        if r.index >= 3:
            assert r.admitted_ns >= ends[r.index - 3]
    assert timing.start_ns == min(r.sent_ns for r in records)
    assert timing.last_end_ns == max(r.end_ns for r in records)
    assert timing.late_sends == 0


async def test_each_record_is_on_disk_before_the_writer_closes(tmp_path: Path) -> None:
    fake = FakeOpenAIServer(StreamScript(itl_s=0.005))
    path = tmp_path / "requests.jsonl"
    on_disk: list[int] = []
    done: list[RequestRecord] = []

    def check(record: RequestRecord) -> None:
        done.append(record)
        lines = _records(path)
        on_disk.append(len(lines))
        assert lines[-1].request_id == record.request_id

    async with fake.serve():
        await run(fake, ClosedLoop(concurrency=2), requests(5), path, MonotonicClock(), check)
    assert on_disk == [1, 2, 3, 4, 5]
    assert len(done) == 5


async def test_all_at_once_has_every_request_in_flight_together(tmp_path: Path) -> None:
    fake = FakeOpenAIServer(StreamScript(ttft_s=0.2))
    async with fake.serve():
        await run(fake, AllAtOnce(), requests(6), tmp_path / "r.jsonl", MonotonicClock())
    assert fake.max_active == 6
    assert len(_records(tmp_path / "r.jsonl")) == 6


async def test_open_loop_sends_at_phase_start_plus_offsets_on_time(tmp_path: Path) -> None:
    arrival = OpenLoop(rate_rps=20.0, seed=3)
    offsets = open_loop_offsets_ns(arrival, 10)
    start = 5_000_000_000
    clock = VirtualClock(start)
    fake = FakeOpenAIServer()
    async with fake.serve(), clock.running():
        timing = await run(fake, arrival, requests(10), tmp_path / "r.jsonl", clock)
    records = sorted(_records(tmp_path / "r.jsonl"), key=lambda r: r.index)
    assert [r.scheduled_ns - start for r in records] == offsets
    assert [r.sent_ns for r in records] == [r.scheduled_ns for r in records]
    assert all(r.status == "ok" for r in records)
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
    records = _records(tmp_path / "r.jsonl")
    assert all(r.sent_ns - r.scheduled_ns == 15 * MS for r in records)
    assert timing.late_sends == 8
    assert timing.loop_lag_max_ms == 15.0
    assert timing.loop_lag_p99_ms == 15.0


def test_warm_up_size_follows_what_the_phase_keeps_in_flight() -> None:
    assert warmup_connections(ClosedLoop(concurrency=4), 48) == 4
    assert warmup_connections(ClosedLoop(concurrency=8), 3) == 3  # never more than requests
    assert warmup_connections(AllAtOnce(), 16) == 16
    assert warmup_connections(AllAtOnce(), 100_000) == WARMUP_MAX_CONNECTIONS
    # Uncapped open loop: the first second of arrivals, ceil(2.5 req/s × 1 s) = 3.
    assert warmup_connections(OpenLoop(rate_rps=2.5), 300) == 3
    assert warmup_connections(OpenLoop(rate_rps=2.5, max_concurrency=2), 300) == 2
    assert warmup_connections(OpenLoop(rate_rps=500.0, max_concurrency=64), 300) == 64


async def test_warm_up_opens_the_connections_so_no_request_connects(tmp_path: Path) -> None:
    # Closed loop C = 3: the warm-up opens 3 connections and all 9 requests reuse them, so
    # no TTFT includes a connect; a second phase on the same pool opens none.
    fake = FakeOpenAIServer(StreamScript(ttft_s=0.02, itl_s=0.005))
    path = tmp_path / "requests.jsonl"
    async with fake.serve(), open_session(read_timeout_s=10) as session:
        first = await run(
            fake, ClosedLoop(concurrency=3), requests(9), path, MonotonicClock(), session=session
        )
        second = await run(
            fake, ClosedLoop(concurrency=3), requests(3), path, MonotonicClock(), session=session
        )
    assert (first.warmup_connections, first.warmup_opened, first.warmup_failed) == (3, 3, 0)
    assert (second.warmup_connections, second.warmup_opened) == (3, 0)
    assert fake.health_checks == 6
    assert len(fake.connections) == 3
    records = _records(path)
    assert len(records) == 12
    assert all(r.new_connection is False for r in records)


async def test_open_loop_cap_is_honoured_and_the_wait_is_recorded(tmp_path: Path) -> None:
    # 1000 req/s (arrivals ~1 ms apart) against 50 ms responses, cap 2: never more than 2 in
    # flight; request k ≥ 2 is admitted only after k − 1 others finished (by hand: before
    # admitting k, k requests were admitted and at most 1 may still run).
    fake = FakeOpenAIServer(StreamScript(ttft_s=0.05))
    arrival = OpenLoop(rate_rps=1000.0, max_concurrency=2, seed=5)
    path = tmp_path / "r.jsonl"
    async with fake.serve():
        await run(fake, arrival, requests(6), path, MonotonicClock())
    assert fake.max_active == 2
    records = sorted(_records(path), key=lambda r: r.index)
    assert all(r.status == "ok" for r in records)
    ends = sorted(r.end_ns for r in records)
    for r in records:
        assert r.scheduled_ns <= r.admitted_ns <= r.sent_ns
        if r.index >= 2:
            assert r.admitted_ns >= ends[r.index - 2]
    assert [r.index for r in sorted(records, key=lambda r: r.sent_ns)] == list(range(6))


async def test_uncapped_open_loop_is_admitted_at_its_scheduled_time(tmp_path: Path) -> None:
    clock = VirtualClock(5_000_000_000)
    fake = FakeOpenAIServer()
    async with fake.serve(), clock.running():
        await run(fake, OpenLoop(rate_rps=20.0, seed=3), requests(4), tmp_path / "r.jsonl", clock)
    assert all(r.admitted_ns == r.scheduled_ns for r in _records(tmp_path / "r.jsonl"))


async def test_prompts_are_built_one_at_a_time_and_dropped_once_sent(tmp_path: Path) -> None:
    # A phase of 8 over 2 workers: each prompt is built when its request is sent and freed
    # once encoded, so at most one is alive at any moment and each is built exactly once.
    built: list[int] = []
    live = [0, 0]  # now, max

    def gone() -> None:
        live[0] -= 1

    def build(i: int) -> PlannedRequest:
        p = requests(8)[i]
        built.append(i)
        live[0] += 1
        live[1] = max(live)
        weakref.finalize(p, gone)
        return p

    plan = PhaseRequests(8, build, lambda i: header_of(requests(8)[i]))
    fake = FakeOpenAIServer(StreamScript(ttft_s=0.01, itl_s=0.005))
    async with fake.serve():
        await run(fake, ClosedLoop(concurrency=2), plan, tmp_path / "r.jsonl", MonotonicClock())
    assert sorted(built) == list(range(8))
    assert live == [0, 1]
    assert len(_records(tmp_path / "r.jsonl")) == 8


async def _cancel_when(fake: FakeOpenAIServer, task: asyncio.Task[PhaseTiming], n: int) -> None:
    await fake.wait_for(lambda: len(fake.seen) >= n)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_a_cut_short_closed_loop_accounts_for_every_request(tmp_path: Path) -> None:
    # 10 long requests, C = 2, cancelled (as Ctrl-C does) once 2 are streaming: those 2 are
    # interrupted (not failures of the server), the 8 never sent are not_sent; every planned
    # request has exactly one record.
    fake = FakeOpenAIServer(StreamScript(itl_s=0.05))
    path = tmp_path / "r.jsonl"
    async with fake.serve():
        task = asyncio.create_task(
            run(
                fake,
                ClosedLoop(concurrency=2),
                requests(10, max_tokens=200),
                path,
                MonotonicClock(),
            )
        )
        await _cancel_when(fake, task, 2)
    records = sorted(_records(path), key=lambda r: r.index)
    assert [r.index for r in records] == list(range(10))
    assert [r.status for r in records] == ["interrupted"] * 2 + ["not_sent"] * 8
    assert records[0].error == "interrupted before completion (Ctrl-C or SIGTERM)"
    assert all(r.sent_ns is None for r in records[2:])


async def test_a_cut_short_open_loop_keeps_the_schedule_of_the_unsent(tmp_path: Path) -> None:
    # 1 req/s: the first request is sent at once, the phase is cut before the second.
    arrival = OpenLoop(rate_rps=1.0, seed=2)
    offsets = open_loop_offsets_ns(arrival, 5)
    fake = FakeOpenAIServer(StreamScript(itl_s=0.05))
    path = tmp_path / "r.jsonl"
    async with fake.serve():
        task = asyncio.create_task(
            run(fake, arrival, requests(5, max_tokens=200), path, MonotonicClock())
        )
        await _cancel_when(fake, task, 1)
    records = sorted(_records(path), key=lambda r: r.index)
    assert [r.status for r in records] == ["interrupted"] + ["not_sent"] * 4
    start = records[0].scheduled_ns
    assert [r.scheduled_ns - start for r in records] == offsets


async def test_a_closed_loop_with_a_duration_stops_sending_and_plans_only_what_it_sent(
    tmp_path: Path,
) -> None:
    # Up to 1,000 requests, C = 2, 50 ms each, for 0.3 s: the loop stops taking requests at
    # 0.3 s; those it never reached are not part of the phase (no not_sent records).
    fake = FakeOpenAIServer(StreamScript(ttft_s=0.05))
    path = tmp_path / "r.jsonl"
    clock = MonotonicClock()
    async with fake.serve():
        timing = await run(
            fake, ClosedLoop(concurrency=2, duration_s=0.3), requests(1000, 1), path, clock
        )
    records = _records(path)
    assert 2 <= timing.dispatched < 1000
    assert len(records) == timing.dispatched == fake.served
    assert {r.status for r in records} == {"ok"}
    assert sorted(r.index for r in records) == list(range(timing.dispatched))
    # A closed loop's scheduled time is the phase start: nothing was sent 0.3 s after it.
    assert all(r.sent_ns < r.scheduled_ns + 300_000_000 for r in records)


async def test_a_ramped_closed_loop_staggers_its_senders_first_requests(tmp_path: Path) -> None:
    # 4 senders over a 1 s ramp: first sends at 0, 250, 500 and 750 ms after the phase start
    # (the closed loop's scheduled time), on the virtual clock. Each request takes 0.5 s of
    # real time, so no sender finishes (and sends again) before the last one starts.
    clock = VirtualClock(5_000_000_000)
    fake = FakeOpenAIServer(StreamScript(ttft_s=0.5))
    async with fake.serve(), clock.running():
        await run(fake, ClosedLoop(concurrency=4, ramp_s=1.0), requests(4), tmp_path / "r.jsonl",
                  clock)  # fmt: skip
    records = sorted(_records(tmp_path / "r.jsonl"), key=lambda r: r.sent_ns)
    assert [r.sent_ns - r.scheduled_ns for r in records] == [0, 250 * MS, 500 * MS, 750 * MS]


async def test_a_malformed_chunk_fails_its_requests_and_the_phase_goes_on(tmp_path: Path) -> None:
    # Fault E: a count sent as a string used to raise TypeError past the client, abort the
    # TaskGroup and record requests that were sent as not_sent. Now each of the 6 requests
    # (closed loop of 2) is sent, fails on its own record, and the phase ends normally.
    bad = '{"choices":[{"index":0,"text":"~"}],"usage":{"prompt_tokens":3,"completion_tokens":"2"}}'
    fake = FakeOpenAIServer(StreamScript(error_after_chunks=1, error_payload=bad))
    path = tmp_path / "requests.jsonl"
    async with fake.serve():
        await run(fake, ClosedLoop(concurrency=2), requests(6), path, MonotonicClock())
    records = _records(path)
    assert len(fake.seen) == 6
    assert sorted(r.index for r in records) == list(range(6))
    assert {r.status for r in records} == {"error"}
    assert all("`$.usage.completion_tokens`" in r.error for r in records)
    assert all(r.chunk_tokens == [1] for r in records)
