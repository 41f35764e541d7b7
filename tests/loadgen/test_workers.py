"""loadgen.workers.process: phases sent by two worker processes against the in-process fake vLLM.

One pool of two spawned workers serves every phase of this module (as one case would): the
closed loop keeps exactly the requested number in flight at the server, 128 streams split over
two workers are all in flight at once (no pool caps them), an open loop's records carry the
merged schedule, and every request of the phase has exactly one record in one worker's file.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from loadgen.client import Target
from loadgen.clock import MonotonicClock
from loadgen.runformat.layout import worker_request_files
from loadgen.runformat.record_files import read_records
from loadgen.workers.process import ProcessWorkers, run_split_phase
from scenarios.arrivals import AllAtOnce, ClosedLoop, OpenLoop
from scenarios.partition import merged_open_loop
from scenarios.plan import PhaseSpec
from scenarios.tokens import TokenSpace
from scenarios.workloads import UniquePrompts
from tests.support.fake_openai_server import FakeOpenAIServer, StreamScript

pytestmark = [pytest.mark.timeout(60), pytest.mark.asyncio(loop_scope="session")]

MS = 1_000_000


@pytest.fixture(scope="module")
async def fake() -> AsyncIterator[FakeOpenAIServer]:
    server = FakeOpenAIServer(StreamScript(ttft_s=0.05, itl_s=0.005))
    async with server.serve():
        yield server


@pytest.fixture(scope="module")
async def pool(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[ProcessWorkers]:
    cdir = tmp_path_factory.mktemp("case")
    workers = await ProcessWorkers(2, cdir, pool_limit=128, read_timeout_s=30).start()
    try:
        yield workers
    finally:
        await workers.close()


def _phase(
    name: str, n: int, arrival: ClosedLoop | AllAtOnce | OpenLoop, tokens: int = 4
) -> PhaseSpec:
    return PhaseSpec(
        name=name,
        workload=UniquePrompts(prompt_tokens=8, requests=n, output_tokens=tokens),
        arrival=arrival,
    )


async def _send(pool: ProcessWorkers, fake: FakeOpenAIServer, phase: PhaseSpec) -> list[dict]:
    fake.max_active = 0
    progress: list[tuple[int, int]] = []
    split = await run_split_phase(
        pool, case="c", phase=phase, seed=0, tokens=TokenSpace(), target=Target(fake.url, "m"),
        clock=MonotonicClock(), on_progress=lambda d, f: progress.append((d, f)),
    )  # fmt: skip
    assert split.errors == []
    assert split.statuses == {"ok": phase.workload.requests}
    assert progress[-1] == (phase.workload.requests, 0)
    assert [w.worker for w in split.workers] == [0, 1]
    records = [r for r in read_records(pool._cdir).records if r.phase == phase.name]
    # Every planned request exactly once.
    assert sorted(r.index for r in records) == list(range(phase.workload.requests))
    assert split.timing.start_ns == min(r.sent_ns for r in records)
    assert split.timing.last_end_ns == max(r.end_ns for r in records)
    return records


async def test_closed_loop_keeps_exactly_the_requested_concurrency(
    pool: ProcessWorkers, fake: FakeOpenAIServer
) -> None:
    records = await _send(pool, fake, _phase("closed", 20, ClosedLoop(concurrency=5)))
    # 5 in flight over 2 workers = 3 + 2: the server never sees more than 5, and sees 5.
    assert fake.max_active == 5
    # Slots 0, 2, 4 (worker 0) take 3/5 of the 20 requests, slots 1, 3 (worker 1) 2/5.
    assert sum(r.worker == 0 for r in records) == 12
    assert sum(r.worker == 1 for r in records) == 8
    assert [w for w, _ in worker_request_files(pool._cdir)] == [0, 1]


async def test_128_streams_split_over_two_workers_are_all_in_flight(
    pool: ProcessWorkers, fake: FakeOpenAIServer
) -> None:
    # The hidden cap: a 100-connection pool per worker would hold 128 streams at 100.
    # Each request waits 1 s for its first token, far longer than sending 128 takes.
    fake.script = StreamScript(ttft_s=1.0)
    try:
        await _send(pool, fake, _phase("flood", 128, AllAtOnce()))
    finally:
        fake.script = StreamScript(ttft_s=0.05, itl_s=0.005)
    assert fake.max_active == 128


async def test_open_loop_records_follow_the_merged_schedule(
    pool: ProcessWorkers, fake: FakeOpenAIServer
) -> None:
    arrival = OpenLoop(rate_rps=100.0, seed=5)
    records = await _send(pool, fake, _phase("open", 30, arrival))
    offsets, source = merged_open_loop(arrival, 30, 2)
    start = min(r.scheduled_ns for r in records)
    for r in records:
        # Request i was scheduled at the shared start + the i-th merged arrival, by the worker
        # whose stream drew it.
        assert r.scheduled_ns - start == offsets[r.index]
        assert r.worker == source[r.index]


def _cores_of_threads(pid: int) -> set[int]:
    """Every core some thread of ``pid`` may run on (threads exiting meanwhile skipped)."""
    import contextlib
    import os

    cores: set[int] = set()
    for tid in os.listdir(f"/proc/{pid}/task"):
        with contextlib.suppress(ProcessLookupError):
            cores |= os.sched_getaffinity(int(tid))
    return cores


async def test_each_worker_is_placed_on_its_own_core(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    import os

    from loadgen.placement import Placement

    cores = sorted(os.sched_getaffinity(0))
    if len(cores) < 2:
        pytest.skip("needs a core per worker")
    placement = Placement(True, tuple(cores[:2]), "test")
    cdir = tmp_path_factory.mktemp("placed")
    workers = await ProcessWorkers(
        2, cdir, pool_limit=4, read_timeout_s=30, placement=placement
    ).start()
    try:
        applied = await workers.placements()
        pids = [p.pid for p in workers._procs]
        pinned = [_cores_of_threads(pid) for pid in pids]
    finally:
        await workers.close()
    assert [a.cpus for a in applied if a] == [[cores[0]], [cores[1]]]
    assert pinned == [{cores[0]}, {cores[1]}]  # every thread of each worker process
    for a in applied:
        assert a is not None
        # Real-time where this machine allows it; where not, the refusal is on the record.
        assert a.policy == "SCHED_FIFO 1" or (a.problem or "").startswith("SCHED_FIFO refused")
