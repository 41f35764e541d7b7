"""loadgen.client.send_request against the in-process fake vLLM: tokens, timing, failures.

Token chunks are spaced by a small ITL wherever a test counts them one by one: chunks that
arrive in one network read share a stamp and are merged (loadgen.token_timing).
"""

from __future__ import annotations

import itertools

import aiohttp
import pytest

from analysis.latency import chunk_gaps, request_frame
from loadgen.client import CUT_EVENT, Target, send_request
from loadgen.clock import MonotonicClock
from loadgen.connections import open_session
from loadgen.records import RequestRecord
from loadgen.server_watch import lost_connection
from scenarios.requests import PlannedRequest
from server.process import free_loopback_port
from tests.support.fake_openai_server import FakeOpenAIServer, StreamScript

pytestmark = [pytest.mark.asyncio, pytest.mark.timeout(30)]

MS = 1_000_000


def planned(
    max_tokens: int, prompt_len: int = 8, disconnect_after_tokens: int | None = None
) -> PlannedRequest:
    return PlannedRequest(
        request_id="r-0",
        prompt_token_ids=tuple(range(10, 10 + prompt_len)),
        max_tokens=max_tokens,
        group="anchors-0",
        disconnect_after_tokens=disconnect_after_tokens,
    )


def blank_record(p: PlannedRequest) -> RequestRecord:
    return RequestRecord(
        request_id=p.request_id,
        case="c",
        phase="ph",
        index=0,
        group=p.group,
        prompt_tokens_sent=len(p.prompt_token_ids),
        max_tokens=p.max_tokens,
        scheduled_ns=0,
    )


async def send(script: StreamScript, p: PlannedRequest) -> tuple[RequestRecord, FakeOpenAIServer]:
    fake = FakeOpenAIServer(script)
    async with fake.serve(), aiohttp.ClientSession() as session:
        record = await send_request(
            session, Target(fake.url, "m"), p, blank_record(p), MonotonicClock()
        )
    return record, fake


def ttft_ns(record: RequestRecord) -> int:
    assert record.sent_ns is not None
    return record.chunk_ns[0] - record.sent_ns


async def test_request_body_asks_exact_lengths_and_continuous_usage() -> None:
    p = planned(max_tokens=3, prompt_len=5)
    _, fake = await send(StreamScript(), p)
    assert fake.seen[0].body == {
        "model": "m",
        "prompt": [10, 11, 12, 13, 14],
        "max_tokens": 3,
        "ignore_eos": True,
        "stream": True,
        "stream_options": {"include_usage": True, "continuous_usage_stats": True},
        "temperature": 0.0,
    }


async def test_tokens_are_counted_from_usage_not_text() -> None:
    # Four token chunks; chunk 1 decodes to empty text but still carries a token; after chunk 2
    # an extra chunk carries no token (usage unchanged) and must not get a stamp.
    script = StreamScript(
        empty_text_chunks=frozenset({1}),
        tokenless_after=frozenset({2}),
        cached_tokens=0,
        itl_s=0.01,
    )
    record, _ = await send(script, planned(max_tokens=4))
    assert record.status == "ok", record.error
    assert record.token_timing == "usage"
    assert record.chunk_tokens == [1, 1, 1, 1]
    assert len(record.chunk_ns) == 4
    assert record.usage_completion_tokens == 4
    assert record.usage_prompt_tokens == 8
    assert record.finish_reason == "length"
    assert record.cached_tokens == 0
    assert record.http_status == 200


async def test_speculative_multi_token_chunks_keep_their_token_counts() -> None:
    # Spec decoding: prefill gives 1 token, then the usage jumps by 3 per step: 1, 4, 7, 8.
    script = StreamScript(chunk_plan=(1, 3, 3, 1), itl_s=0.01)
    record, _ = await send(script, planned(max_tokens=8))
    assert record.status == "ok", record.error
    assert record.chunk_tokens == [1, 3, 3, 1]
    assert record.output_tokens == 8
    _, tokens = chunk_gaps([record])
    assert tokens.tolist() == [3, 3, 1]


async def test_ttft_covers_the_server_delay_and_e2el_minus_ttft_is_the_sum_of_gaps() -> None:
    script = StreamScript(ttft_s=0.2, itl_s=0.03)
    record, _ = await send(script, planned(max_tokens=5))
    assert record.status == "ok", record.error
    assert record.sent_ns is not None
    # sent_ns is stamped before the request leaves; the fake sleeps 200 ms after receiving it.
    assert record.chunk_ns[0] - record.sent_ns >= 200 * MS
    assert all(b > a for a, b in itertools.pairwise(record.chunk_ns))
    # vLLM's timing invariant, exactly in integer ns: E2EL − TTFT = Σ ITL gaps.
    ttft_ns = record.chunk_ns[0] - record.sent_ns
    e2el_ns = record.chunk_ns[-1] - record.sent_ns
    gaps_ns = [b - a for a, b in itertools.pairwise(record.chunk_ns)]
    assert e2el_ns - ttft_ns == sum(gaps_ns)
    # And the analysis functions agree with the record (ms).
    row = request_frame([record]).iloc[0]
    gaps_ms, _ = chunk_gaps([record])
    assert row["ttft_ms"] == pytest.approx(ttft_ns / 1e6)
    assert row["e2el_ms"] - row["ttft_ms"] == pytest.approx(gaps_ms.sum())
    assert row["tpot_ms"] == pytest.approx((e2el_ns - ttft_ns) / 1e6 / 4)


async def test_usage_trailer_adds_no_chunk_and_does_not_stretch_e2el() -> None:
    # The trailer arrives 600 ms after the last token: it sets cached_tokens, not a stamp, so
    # the end is ≥ 300 ms after the last stamp even if a loaded client reads the last token up
    # to 300 ms late (a stamped trailer would make the gap about 0).
    script = StreamScript(trailer_delay_s=0.6, cached_tokens=1024, itl_s=0.01)
    record, _ = await send(script, planned(max_tokens=3, prompt_len=1056))
    assert record.status == "ok", record.error
    assert record.chunk_tokens == [1, 1, 1]
    assert record.cached_tokens == 1024
    assert record.usage_prompt_tokens == 1056
    assert record.end_ns is not None
    assert record.end_ns - record.chunk_ns[-1] >= 300 * MS


async def test_error_event_inside_a_200_stream_is_a_failure() -> None:
    script = StreamScript(error_after_chunks=2, itl_s=0.01)
    record, _ = await send(script, planned(max_tokens=5))
    assert record.http_status == 200
    assert record.status == "error"
    assert record.error == "error event in stream: fake engine failure"
    assert record.chunk_tokens == [1, 1]
    assert record.end_ns is not None


async def test_http_500_is_a_failure_with_its_status() -> None:
    record, _ = await send(StreamScript(status=500), planned(max_tokens=5))
    assert record.status == "error"
    assert record.http_status == 500
    assert record.error is not None and record.error.startswith("HTTP 500: ")
    assert "fake overload" in record.error
    assert record.chunk_ns == []
    assert record.end_ns is not None


@pytest.mark.parametrize(
    ("headers", "kept"),
    [({}, None), ({"Retry-After": "soon"}, "soon"), ({"Retry-After": "2"}, "2")],
)
async def test_a_503_keeps_its_retry_after_as_sent(headers: dict, kept: str | None) -> None:
    """vLLM's admission 503 carries no Retry-After; a bad one is kept as sent (the analysis
    judges it), a good one too."""
    script = StreamScript(status=503, error_type="Service Unavailable", headers=headers)
    record, _ = await send(script, planned(max_tokens=5))
    assert (record.status, record.http_status, record.retry_after) == ("error", 503, kept)


async def test_server_disconnect_mid_stream_is_a_failure() -> None:
    script = StreamScript(drop_after_chunks=2, itl_s=0.01)
    record, _ = await send(script, planned(max_tokens=5))
    assert record.status == "error"
    assert record.http_status == 200
    assert record.error is not None and record.error.startswith("ClientPayloadError")
    assert record.chunk_tokens == [1, 1]


async def test_fewer_tokens_than_asked_is_a_usage_mismatch_failure() -> None:
    record, _ = await send(StreamScript(short_by_tokens=2, itl_s=0.01), planned(max_tokens=5))
    assert record.status == "error"
    assert record.error == "usage.completion_tokens=3, max_tokens=5 asked with ignore_eos"
    assert record.chunk_tokens == [1, 1, 1]


async def test_prompt_length_mismatch_is_a_failure() -> None:
    record, _ = await send(StreamScript(prompt_tokens_offset=1), planned(max_tokens=2))
    assert record.status == "error"
    assert record.error == "usage.prompt_tokens=9 but 8 prompt tokens were sent"


async def test_a_refused_connection_is_not_sent_with_the_cause_not_an_exception() -> None:
    """Nothing listens on the port: no connection, so no byte of the request left the
    client. The record is ``not_sent`` (not "sent and failed"), says why, and has no send
    stamp; its end stamp is when the refusal came."""
    port = free_loopback_port()
    p = planned(max_tokens=2)
    async with aiohttp.ClientSession() as session:
        record = await send_request(
            session, Target(f"http://127.0.0.1:{port}", "m"), p, blank_record(p), MonotonicClock()
        )
    assert record.status == "not_sent"
    assert record.http_status is None and record.sent_ns is None
    assert record.error is not None
    assert record.error.startswith("not sent: could not connect: ClientConnectorError")
    assert "ECONNREFUSED" in record.error
    assert record.end_ns is not None
    assert lost_connection(record)  # a refusal still makes the phase probe its server


async def test_disconnect_after_tokens_aborts_and_the_server_sees_it() -> None:
    script = StreamScript(itl_s=0.05)
    fake = FakeOpenAIServer(script)
    p = planned(max_tokens=50, disconnect_after_tokens=3)
    async with fake.serve(), aiohttp.ClientSession() as session:
        record = await send_request(
            session, Target(fake.url, "m"), p, blank_record(p), MonotonicClock()
        )
        await fake.wait_for(lambda: fake.seen[0].disconnected_at_s is not None, timeout_s=5.0)
    assert record.status == "aborted"
    assert record.error is None
    assert record.chunk_tokens == [1, 1, 1]
    assert record.disconnect_ns is not None and record.end_ns is not None
    assert record.chunk_ns[-1] <= record.disconnect_ns <= record.end_ns
    seen = fake.seen[0]
    assert not seen.completed
    assert seen.chunks_sent < 50


async def test_without_running_usage_ttft_is_the_first_text_chunk_not_the_trailer() -> None:
    # A server that ignores continuous_usage_stats: usage only in the final chunk. The fake
    # waits 100 ms (TTFT), then sends 5 one-token chunks 20 ms apart and the trailer 400 ms
    # later. By hand: TTFT ≥ 100 ms, last chunk ≥ 4 × 20 = 80 ms after the first, and the
    # trailer adds no stamp, so the end comes ≥ 200 ms after the last stamp even if a loaded
    # client reads the last chunk up to 200 ms late (stamping the trailer would make the gap
    # about 0). Before, all 5 tokens fell on the trailer (TTFT ≥ 580 ms = E2EL).
    script = StreamScript(ttft_s=0.1, itl_s=0.02, trailer_delay_s=0.4, continuous_usage=False)
    record, _ = await send(script, planned(max_tokens=5))
    assert record.status == "ok", record.error
    assert record.token_timing == "text"
    assert record.chunk_tokens == [1, 1, 1, 1, 1]
    assert record.usage_completion_tokens == 5
    assert ttft_ns(record) >= 100 * MS
    assert record.chunk_ns[-1] - record.chunk_ns[0] >= 80 * MS
    assert record.end_ns is not None and record.end_ns - record.chunk_ns[-1] >= 200 * MS


async def test_without_running_usage_an_empty_text_token_keeps_its_stamp() -> None:
    # Chunk 0 decodes to empty text; the trailer's 4 = the 4 choice chunks, so chunk 0 was a
    # token and TTFT is its arrival: 4 stamps, not 3.
    script = StreamScript(empty_text_chunks=frozenset({0}), itl_s=0.01, continuous_usage=False)
    record, _ = await send(script, planned(max_tokens=4))
    assert record.status == "ok", record.error
    assert (record.token_timing, record.chunk_tokens) == ("text", [1, 1, 1, 1])


async def test_a_buffered_response_is_final_only() -> None:
    # Everything written at once at the end: 4 tokens in one read, TTFT = E2EL, flagged.
    for continuous in (True, False):
        script = StreamScript(ttft_s=0.05, itl_s=0.01, buffered=True, continuous_usage=continuous)
        record, _ = await send(script, planned(max_tokens=4))
        assert record.status == "ok", record.error
        assert record.token_timing == "final_only"
        assert record.chunk_tokens == [4]
        assert ttft_ns(record) >= (50 + 3 * 10) * MS  # the whole generation, by hand


async def test_a_chunk_of_four_tokens_keeps_its_count_at_its_stamp() -> None:
    # Speculative step: 1 token, then 4 in one chunk 60 ms later.
    script = StreamScript(chunk_plan=(1, 4), itl_s=0.06)
    record, _ = await send(script, planned(max_tokens=5))
    assert record.status == "ok", record.error
    assert record.chunk_tokens == [1, 4]
    assert record.chunk_ns[1] - record.chunk_ns[0] >= 60 * MS


async def test_a_last_event_without_its_blank_line_is_discarded() -> None:
    # The trailer (usage, cached tokens) ends the stream without "\n\n" and without [DONE]:
    # the SSE rules discard an event the stream ends inside. The running usage of the token
    # chunks still says 3 of 3, so the record is ok, without the trailer's cached tokens.
    script = StreamScript(no_final_blank_line=True, cached_tokens=7, itl_s=0.01)
    record, _ = await send(script, planned(max_tokens=3))
    assert record.status == "ok", record.error
    assert record.usage_completion_tokens == 3
    assert record.cached_tokens is None


async def test_a_stream_ending_inside_an_event_and_short_is_a_failure_that_says_so() -> None:
    script = StreamScript(no_final_blank_line=True, short_by_tokens=1, itl_s=0.01)
    record, _ = await send(script, planned(max_tokens=3))
    assert record.status == "error"
    short = "usage.completion_tokens=2, max_tokens=3 asked with ignore_eos"
    assert record.error == f"{short}; {CUT_EVENT}"


async def test_a_discarded_usage_trailer_without_a_running_usage_is_no_usage() -> None:
    script = StreamScript(no_final_blank_line=True, continuous_usage=False, itl_s=0.01)
    record, _ = await send(script, planned(max_tokens=3))
    assert record.status == "error"
    assert record.error == f"no usage reported; {CUT_EVENT}"


async def test_an_event_named_error_is_a_failure() -> None:
    script = StreamScript(
        error_after_chunks=1,
        error_event_type="error",
        error_payload="upstream timed out",
        itl_s=0.01,
    )
    record, _ = await send(script, planned(max_tokens=5))
    assert record.status == "error"
    assert record.error == "error event in stream: upstream timed out"
    assert record.chunk_tokens == [1]


async def test_traced_stamps_follow_the_request_and_the_pool() -> None:
    # Two requests one after the other on a traced session: the first opens a connection,
    # the second reuses it; each stamp follows the one before.
    fake = FakeOpenAIServer(StreamScript(ttft_s=0.02, itl_s=0.01))
    p = planned(max_tokens=2)
    records = []
    async with fake.serve(), open_session(read_timeout_s=10) as session:
        for _ in range(2):
            records.append(
                await send_request(
                    session, Target(fake.url, "m"), p, blank_record(p), MonotonicClock()
                )
            )
    assert [r.new_connection for r in records] == [True, False]
    assert len(fake.connections) == 1
    for r in records:
        assert r.status == "ok", r.error
        stamps = [r.sent_ns, r.connection_ready_ns, r.request_sent_ns, r.headers_ns]
        assert all(s is not None for s in stamps)
        assert stamps == sorted(stamps)
        assert r.headers_ns is not None and r.headers_ns <= r.chunk_ns[0]


# -- faults of a black-box test: malformed chunks, line ends, stalls, surprises ------------

# vLLM's second token chunk with its running count sent as a string (fault E).
COUNT_AS_STRING = (
    '{"id":"c","object":"text_completion","choices":[{"index":0,"text":"~",'
    '"finish_reason":null}],"usage":{"prompt_tokens":8,"completion_tokens":"2"}}'
)


async def test_a_chunk_field_of_the_wrong_type_is_a_protocol_error_on_the_record() -> None:
    script = StreamScript(error_after_chunks=1, error_payload=COUNT_AS_STRING, itl_s=0.01)
    record, _ = await send(script, planned(max_tokens=4))
    assert record.status == "error"
    assert record.error is not None
    assert record.error.startswith("ChunkProtocolError: ")
    assert "`$.usage.completion_tokens`" in record.error
    assert record.chunk_tokens == [1]  # the one good chunk before it keeps its stamp
    assert record.end_ns is not None


@pytest.mark.parametrize("eol", ["\r\n", "\r"])
async def test_crlf_and_bare_cr_streams_are_read_like_lf_ones(eol: str) -> None:
    record, _ = await send(StreamScript(itl_s=0.01, eol=eol), planned(max_tokens=3))
    assert record.status == "ok", record.error
    assert record.chunk_tokens == [1, 1, 1]  # three chunks 10 ms apart: three reads
    assert record.usage_completion_tokens == 3


async def test_a_stream_silent_past_the_stall_timeout_fails_as_stalled() -> None:
    fake = FakeOpenAIServer(StreamScript(stall_after_chunks=1, stall_s=1.0, itl_s=0.01))
    p = planned(max_tokens=4)
    async with fake.serve(), open_session(read_timeout_s=0.2) as session:
        record = await send_request(
            session, Target(fake.url, "m"), p, blank_record(p), MonotonicClock()
        )
    assert record.status == "error"
    assert record.error == "stalled: no byte from the server for 0.2 s"
    assert record.chunk_tokens == [1]


async def test_a_response_longer_than_the_request_timeout_fails_as_timed_out() -> None:
    # 10 chunks 50 ms apart take ≥ 450 ms; the total limit is 200 ms, no gap reaches 5 s.
    fake = FakeOpenAIServer(StreamScript(itl_s=0.05))
    p = planned(max_tokens=10)
    async with fake.serve(), open_session(read_timeout_s=5, total_timeout_s=0.2) as session:
        record = await send_request(
            session, Target(fake.url, "m"), p, blank_record(p), MonotonicClock()
        )
    assert record.status == "error"
    assert record.error == "timed out: not complete within the request timeout of 0.2 s"
    assert 1 <= sum(record.chunk_tokens) < 10


class _ExplodingSession:
    """A session whose request raises what no client code expects (a bug, a library change)."""

    def post(self, *args: object, **kwargs: object) -> object:
        raise RuntimeError("unexpected failure inside the HTTP library")


async def test_an_unexpected_exception_is_recorded_on_the_request_not_raised() -> None:
    p = planned(max_tokens=2)
    record = await send_request(
        _ExplodingSession(),  # type: ignore[arg-type]
        Target("http://127.0.0.1:9", "m"),
        p,
        blank_record(p),
        MonotonicClock(),
    )
    assert record.status == "error"
    assert record.error == "RuntimeError: unexpected failure inside the HTTP library"
    assert record.end_ns is not None
