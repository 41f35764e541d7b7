"""The benchmarks' fake vLLM writes like vLLM: one SSE event per transport write, each stream
on absolute deadlines ``start + k·ITL`` (lateness does not accumulate), streams' phases spread,
and a write log of every event. Driven with a fake clock and a fake transport: the schedule it
computes and the writes it makes are checked, never wall time."""

from __future__ import annotations

import sse_server


class FakeTransport:
    """Collects every write (one list entry per ``write`` call)."""

    def __init__(self) -> None:
        self.writes: list[bytes] = []

    def write(self, data: bytes) -> None:
        self.writes.append(data)


class Clock:
    def __init__(self) -> None:
        self.now = 0

    def __call__(self) -> int:
        return self.now


def _server(ttft_ms: float, itls_ms: tuple[float, ...], spread: bool = False) -> tuple[
    sse_server.State, Clock
]:  # fmt: skip
    state = sse_server.State(b"")
    clock = Clock()
    state.pacer.now_ns = clock
    state.ttft_ns = int(ttft_ms * 1e6)
    state.itls_ns = tuple(int(x * 1e6) for x in itls_ms)
    state.spread = spread
    return state, clock


def _request(state: sse_server.State, key: int, tokens: int) -> FakeTransport:
    """A connection that sent one streamed completion request (prompt [key, 100])."""
    proto = sse_server.StreamProtocol(state)
    transport = FakeTransport()
    proto.connection_made(transport)  # type: ignore[arg-type]
    body = b'{"prompt":[%d,100],"max_tokens":%d,"stream":true}' % (key, tokens)
    head = b"POST /v1/completions HTTP/1.1\r\ncontent-length: %d\r\n\r\n" % len(body)
    proto.data_received(head + body)
    return transport


def test_kth_deadline_is_start_plus_k_itl() -> None:
    # start 1 ms, ITL 20 ms: events 0..3 due at 1, 21, 41, 61 ms.
    assert sse_server.deadlines(1_000_000, 20_000_000, 4) == [
        1_000_000, 21_000_000, 41_000_000, 61_000_000,
    ]  # fmt: skip


def test_phases_spread_by_the_golden_ratio() -> None:
    # frac(k·φ) for k = 0..4 (φ = 0.6180339887): 0, 0.618034, 0.236068, 0.854102, 0.472136;
    # × 20 ms = 0, 12.36068, 4.72136, 17.08204, 9.44272 ms (truncated to ns).
    offsets = [sse_server.phase_offset_ns(k, 20_000_000) for k in range(5)]
    assert offsets == [0, 12_360_679, 4_721_359, 17_082_039, 9_442_719]
    # Without spread a stream starts TTFT after its read; with it, plus its offset.
    itls = (10_000_000, 20_000_000)
    assert sse_server.stream_start_ns(5, 3, 50, itls, spread=False) == 55
    # key 3 → ITL itls[3 % 2] = 20 ms, offset 17 082 039 ns.
    assert sse_server.stream_start_ns(5, 3, 50, itls, spread=True) == 55 + 17_082_039


def test_one_event_per_write_on_absolute_deadlines_and_the_write_log() -> None:
    # TTFT 50 ms, ITL 10 ms, read at t = 0: events due at 50, 60, 70 ms. The pacer runs late
    # once: at 65 ms it writes event 1 (due 60); event 2 is still due at 70 (absolute), not
    # at 65 + 10 = 75 as a relative schedule would make it.
    state, clock = _server(50, (10,))
    transport = _request(state, key=7, tokens=3)
    assert transport.writes == [sse_server._SSE_HEAD]  # headers only, until the first deadline
    clock.now = 49_999_999
    assert state.pacer.step() == 0
    clock.now = 50_000_000
    assert state.pacer.step() == 1
    clock.now = 65_000_000
    assert state.pacer.step() == 1
    clock.now = 69_999_999
    assert state.pacer.step() == 0
    clock.now = 70_000_000
    assert state.pacer.step() == 1
    # 3 token events, one write each, then the trailer (usage + [DONE] + the last chunk).
    events = transport.writes[1:4]
    assert events == [
        sse_server._chunked(sse_server.token_chunk(i, 3, 2, usage=False)) for i in (1, 2, 3)
    ]
    assert all(e.count(b"data: ") == 1 for e in events)
    assert transport.writes[4].endswith(b"0\r\n\r\n") and b"[DONE]" in transport.writes[4]
    [entry] = state.log
    assert entry["writes_ns"] == [50_000_000, 65_000_000, 70_000_000]
    assert entry["start_ns"] == 50_000_000 and entry["itl_ns"] == 10_000_000
    assert entry["first_write_ns"] == 50_000_000 and entry["last_write_ns"] == 70_000_000


def test_zero_itl_writes_one_event_per_stream_per_step() -> None:
    # Two 2-token streams with ITL 0: every step writes one event to each (as an engine step
    # gives each running request its token), so two steps finish both.
    state, _clock = _server(0, (0,))
    a, b = _request(state, key=1, tokens=2), _request(state, key=2, tokens=2)
    assert state.pacer.step() == 2
    assert len(a.writes) == len(b.writes) == 2  # headers + event 1
    assert state.pacer.step() == 2
    assert len(a.writes) == len(b.writes) == 4  # + event 2 + trailer
    assert state.pacer.step() == 0
    assert sorted(e["key"] for e in state.log) == [1, 2]


def test_per_stream_itl_alternates_by_key() -> None:
    # itl_ms "10,20": key 4 → 10 ms, key 5 → 20 ms.
    state, _clock = _server(0, (10, 20))
    _request(state, key=4, tokens=1)
    _request(state, key=5, tokens=1)
    state.pacer.step()
    assert {e["key"]: e["itl_ns"] for e in state.log} == {4: 10_000_000, 5: 20_000_000}


def test_parser_ceiling_writes_the_whole_response_at_once() -> None:
    state, _clock = _server(0, (0,))
    state.whole = True
    transport = _request(state, key=1, tokens=3)
    [whole] = transport.writes
    assert whole.startswith(sse_server._SSE_HEAD) and whole.count(b"data: ") == 3 + 2
    assert state.pacer.step() == 0
