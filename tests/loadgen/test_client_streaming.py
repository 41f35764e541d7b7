"""loadgen.client.send_request against the in-process fake vLLM: tokens, timing, failures."""

from __future__ import annotations

import itertools

import aiohttp
import pytest
from fake_openai_server import FakeOpenAIServer, StreamScript

from analysis.latency import itl_gaps, request_frame
from loadgen.client import Target, send_request
from loadgen.clock import MonotonicClock
from loadgen.records import RequestRecord
from scenarios.workloads import PlannedRequest
from server.process import free_loopback_port

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
        empty_text_chunks=frozenset({1}), tokenless_after=frozenset({2}), cached_tokens=0
    )
    record, _ = await send(script, planned(max_tokens=4))
    assert record.status == "ok", record.error
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
    _, tokens = itl_gaps([{"chunk_ns": record.chunk_ns, "chunk_tokens": record.chunk_tokens}])
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
    row = request_frame([{"sent_ns": record.sent_ns, **_chunks(record)}]).iloc[0]
    gaps_ms, _ = itl_gaps([_chunks(record)])
    assert row["ttft_ms"] == pytest.approx(ttft_ns / 1e6)
    assert row["e2el_ms"] - row["ttft_ms"] == pytest.approx(gaps_ms.sum())
    assert row["tpot_ms"] == pytest.approx((e2el_ns - ttft_ns) / 1e6 / 4)


def _chunks(record: RequestRecord) -> dict[str, list[int]]:
    return {"chunk_ns": record.chunk_ns, "chunk_tokens": record.chunk_tokens}


async def test_usage_trailer_adds_no_chunk_and_does_not_stretch_e2el() -> None:
    # The trailer arrives 300 ms after the last token: it sets cached_tokens, not a stamp.
    script = StreamScript(trailer_delay_s=0.3, cached_tokens=1024)
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


async def test_server_disconnect_mid_stream_is_a_failure() -> None:
    script = StreamScript(drop_after_chunks=2, itl_s=0.01)
    record, _ = await send(script, planned(max_tokens=5))
    assert record.status == "error"
    assert record.http_status == 200
    assert record.error is not None and record.error.startswith("ClientPayloadError")
    assert record.chunk_tokens == [1, 1]


async def test_fewer_tokens_than_asked_is_a_usage_mismatch_failure() -> None:
    record, _ = await send(StreamScript(short_by_tokens=2), planned(max_tokens=5))
    assert record.status == "error"
    assert record.error == "usage.completion_tokens=3, max_tokens=5 asked with ignore_eos"
    assert record.chunk_tokens == [1, 1, 1]


async def test_prompt_length_mismatch_is_a_failure() -> None:
    record, _ = await send(StreamScript(prompt_tokens_offset=1), planned(max_tokens=2))
    assert record.status == "error"
    assert record.error == "usage.prompt_tokens=9 but 8 prompt tokens were sent"


async def test_connection_refused_is_a_failure_not_an_exception() -> None:
    port = free_loopback_port()
    p = planned(max_tokens=2)
    async with aiohttp.ClientSession() as session:
        record = await send_request(
            session, Target(f"http://127.0.0.1:{port}", "m"), p, blank_record(p), MonotonicClock()
        )
    assert record.status == "error"
    assert record.http_status is None
    assert record.error is not None and record.error.startswith("ClientConnectorError")
    assert record.end_ns is not None and record.sent_ns is not None
    assert record.end_ns >= record.sent_ns


async def test_disconnect_after_tokens_aborts_and_the_server_sees_it() -> None:
    script = StreamScript(itl_s=0.05)
    fake = FakeOpenAIServer(script)
    p = planned(max_tokens=50, disconnect_after_tokens=3)
    async with fake.serve(), aiohttp.ClientSession() as session:
        record = await send_request(
            session, Target(fake.url, "m"), p, blank_record(p), MonotonicClock()
        )
        await fake.wait_for(lambda: fake.seen[0].client_gone_s is not None, timeout_s=5.0)
    assert record.status == "aborted"
    assert record.error is None
    assert record.chunk_tokens == [1, 1, 1]
    assert record.disconnect_ns is not None and record.end_ns is not None
    assert record.chunk_ns[-1] <= record.disconnect_ns <= record.end_ns
    seen = fake.seen[0]
    assert not seen.finished
    assert seen.token_chunks_sent < 50
