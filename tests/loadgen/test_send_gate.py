"""loadgen.client.SendGate: a request's send stamp is taken only when no other request of its
phase lies between its own stamp and its write (issue 13: a burst of C requests stamped all at
once put the whole burst's sending into every TTFT)."""

from __future__ import annotations

import asyncio
import itertools
from pathlib import Path

import pytest
from fake_openai_server import FakeOpenAIServer, StreamScript

from analysis.load import read_jsonl
from loadgen.client import SendGate, Target, send_request
from loadgen.clock import MonotonicClock
from loadgen.connections import open_session
from loadgen.phase import run_phase
from loadgen.records import RecordWriter, RequestRecord
from scenarios.arrivals import AllAtOnce
from scenarios.workloads import PlannedRequest

pytestmark = [pytest.mark.timeout(30)]


def _planned(i: int) -> PlannedRequest:
    return PlannedRequest(f"r{i}", tuple(range(10, 18)), 3)


async def test_a_burst_is_stamped_one_request_at_a_time(tmp_path: Path) -> None:
    # 16 requests at once on 16 warmed connections: with the gate, sorted by send stamp, each
    # request was written (request_sent_ns) before the next one was stamped. Without it all 16
    # were stamped before the first was written (aiohttp writes bodies in a later task).
    fake = FakeOpenAIServer(StreamScript(itl_s=0.001))
    path = tmp_path / "requests.jsonl"
    async with fake.serve(), open_session(read_timeout_s=10) as session:
        with RecordWriter(path) as writer:
            await run_phase(
                case="c",
                phase="p",
                requests=[_planned(i) for i in range(16)],
                arrival=AllAtOnce(),
                target=Target(fake.url, "m"),
                session=session,
                writer=writer,
                clock=MonotonicClock(),
            )
    records = sorted(read_jsonl(path).rows, key=lambda r: r["sent_ns"])
    assert [r["status"] for r in records] == ["ok"] * 16
    assert all(r["new_connection"] is False for r in records)  # the warm-up opened them
    for earlier, later in itertools.pairwise(records):
        assert earlier["request_sent_ns"] <= later["sent_ns"]


async def test_the_gate_is_released_however_the_request_ends() -> None:
    # An HTTP error and a refused connection both end the request: the gate is free after.
    gate = SendGate()
    clock = MonotonicClock()
    fake = FakeOpenAIServer(StreamScript(status=503))
    async with fake.serve(), open_session(read_timeout_s=10) as session:
        for url in (fake.url, "http://127.0.0.1:9"):  # port 9: nothing listens (discard)
            record = RequestRecord("r", "c", "p", 0, None, 8, 3, 0)
            await send_request(session, Target(url, "m"), _planned(0), record, clock, gate)
            assert record.status == "error"
            release = await asyncio.wait_for(gate.enter(), 1.0)
            release()


async def test_a_request_cancelled_while_waiting_for_its_turn_stays_not_sent() -> None:
    gate = SendGate()
    held = await gate.enter()  # another request's turn
    record = RequestRecord("r", "c", "p", 0, None, 8, 3, 0)
    fake = FakeOpenAIServer(StreamScript())
    async with fake.serve(), open_session(read_timeout_s=10) as session:
        task = asyncio.create_task(
            send_request(
                session, Target(fake.url, "m"), _planned(0), record, MonotonicClock(), gate
            )
        )
        await asyncio.sleep(0.05)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    held()
    assert (record.status, record.sent_ns, fake.served) == ("not_sent", None, 0)


async def test_release_is_idempotent_and_turns_go_in_order() -> None:
    gate = SendGate()
    order: list[int] = []

    async def turn(i: int) -> None:
        release = await gate.enter()
        order.append(i)
        await asyncio.sleep(0)
        release()
        release()  # a second call must not free a turn that is someone else's

    await asyncio.gather(*(turn(i) for i in range(5)))
    assert order == [0, 1, 2, 3, 4]
