"""loadgen.phase.run_phase with a trace arrival: timed requests on the open loop's absolute
schedule (offset ÷ speedup), a session's next turn exactly its delay after the previous turn
ends, and the schedule kept on a virtual clock (``test_phase_dispatch.VirtualClock``)."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_phase_dispatch import MS, VirtualClock, _records, requests, run

from scenarios.arrivals import TraceArrival
from tests.support.fake_openai_server import FakeOpenAIServer, StreamScript

pytestmark = [pytest.mark.timeout(30)]


async def test_timed_trace_requests_leave_at_offset_over_speedup(tmp_path: Path) -> None:
    # Trace times 0, 400, 400, 1000 ms at speedup 2 → 0, 200, 200, 500 ms after the start.
    arrival = TraceArrival(
        speedup=2.0,
        offsets_ms=(0.0, 400.0, 400.0, 1000.0),
        follows=(None,) * 4,
        delays_ms=(0.0,) * 4,
    )
    start = 7_000_000_000
    clock = VirtualClock(start)
    fake = FakeOpenAIServer()
    async with fake.serve(), clock.running():
        timing = await run(fake, arrival, requests(4), tmp_path / "r.jsonl", clock)
    records = sorted(_records(tmp_path / "r.jsonl"), key=lambda r: r.index)
    assert [r.scheduled_ns - start for r in records] == [0, 200 * MS, 200 * MS, 500 * MS]
    assert [r.sent_ns for r in records] == [r.scheduled_ns for r in records]
    assert timing.late_sends == 0


async def test_a_session_turn_is_sent_exactly_its_delay_after_the_previous_turn_ends(
    tmp_path: Path,
) -> None:
    # Request 0 (session a, turn 0) at 0; request 1 (another session) at 100 ms of trace
    # time; request 2 = session a's turn 1, 300 ms of trace delay after request 0 ENDS;
    # request 3 = its turn 2, 50 ms after request 2 ends. Speedup 2: delays 150 and 25 ms.
    arrival = TraceArrival(
        speedup=2.0,
        offsets_ms=(0.0, 100.0, None, None),
        follows=(None, None, 0, 2),
        delays_ms=(0.0, 0.0, 300.0, 50.0),
    )
    start = 9_000_000_000
    clock = VirtualClock(start)
    # Each request takes real time on the fake server, during which the lag monitor's sleeps
    # move the virtual clock: ends are later than sends by a virtual amount.
    fake = FakeOpenAIServer(StreamScript(ttft_s=0.01, itl_s=0.005))
    async with fake.serve(), clock.running():
        timing = await run(fake, arrival, requests(4), tmp_path / "r.jsonl", clock)
    records = {r.index: r for r in _records(tmp_path / "r.jsonl")}
    assert all(r.status == "ok" for r in records.values())
    assert records[0].scheduled_ns == start
    assert records[1].scheduled_ns == start + 50 * MS
    assert records[0].end_ns > records[0].sent_ns
    assert records[2].scheduled_ns == records[0].end_ns + 150 * MS
    assert records[3].scheduled_ns == records[2].end_ns + 25 * MS
    for i in (2, 3):  # sent exactly then: the virtual clock wakes on time
        assert records[i].sent_ns == records[i].scheduled_ns
    assert timing.late_sends == 0
    assert timing.dispatched == 4
