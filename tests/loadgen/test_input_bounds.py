"""Bounded reading of what the server sends: one SSE line, an error body, excess tokens.

The decoder's limit is checked with a small one (64 bytes) over every split of the stream;
the client's default (1 MiB) against the fake vLLM (``tests.support.fake_openai_server``).
"""

from __future__ import annotations

import aiohttp
import pytest

from loadgen.client import Target, send_request
from loadgen.clock import MonotonicClock
from loadgen.runformat.rows import excess_tokens
from server.net.limits import SSE_MAX_LINE_BYTES
from server.net.sse import SSEDecoder, SSEEvent, SSELineTooLong
from tests.loadgen.test_client_streaming import blank_record, planned, send
from tests.support.fake_openai_server import StreamScript

LIMIT = 64


def _events(stream: bytes, split: int) -> list[SSEEvent]:
    decoder = SSEDecoder(max_line_bytes=LIMIT)
    events: list[SSEEvent] = []
    for i in range(0, len(stream), split):
        events += decoder.feed(stream[i : i + split])
    decoder.end()
    return events


@pytest.mark.parametrize("split", [1, 7, 64, 65, 1000])
@pytest.mark.parametrize("eol", ["\n", "\r\n", "\r"])
def test_a_line_of_exactly_the_limit_passes_one_byte_more_fails(split: int, eol: str) -> None:
    # "data: " (6 bytes) + 58 = 64 bytes: at the limit; + 59 = 65: one byte over.
    ok = f"data: {'a' * 58}{eol}{eol}".encode()
    assert _events(ok, split) == [SSEEvent("a" * 58)]
    over = f"data: {'a' * 59}{eol}{eol}".encode()
    with pytest.raises(SSELineTooLong, match=r"^SSE line larger than 64 bytes$"):
        _events(over, split)


@pytest.mark.parametrize("split", [1, 50, 1000])
def test_a_line_that_never_ends_fails_once_past_the_limit(split: int) -> None:
    decoder = SSEDecoder(max_line_bytes=LIMIT)
    with pytest.raises(SSELineTooLong):
        for _ in range(1000):  # 1000 × split bytes, no line end ever
            decoder.feed(b"x" * split)
    # It stopped within one read of the limit: never more than 64 + split bytes held.
    assert len(decoder._partial) <= LIMIT + split


def test_many_data_lines_without_a_blank_line_are_bounded_too() -> None:
    # Ten "data: 123456789" lines: 10 × (9 + 1) = 100 characters of event data > 64.
    with pytest.raises(SSELineTooLong):
        _events(b"data: 123456789\n" * 10, 16)


def test_the_default_line_limit_is_one_mebibyte() -> None:
    assert SSE_MAX_LINE_BYTES == 1_048_576 == SSEDecoder().max_line_bytes


@pytest.mark.asyncio
async def test_a_stream_line_longer_than_a_mebibyte_fails_the_request_with_the_reason() -> None:
    # One token chunk, then a "data: " line of 6 + 2**20 + 1 bytes.
    script = StreamScript(error_after_chunks=1, error_payload="x" * (2**20 + 1), itl_s=0.01)
    record, _ = await send(script, planned(max_tokens=4))
    assert record.status == "error"
    assert record.error == "SSE line larger than 1048576 bytes"
    assert record.chunk_tokens == [1]


@pytest.mark.asyncio
async def test_twenty_token_chunks_for_max_tokens_sixteen_are_flagged_with_four_excess() -> None:
    # short_by_tokens=-4: the fake sends 16 + 4 = 20 one-token chunks and a usage of 20.
    record, _ = await send(StreamScript(short_by_tokens=-4, itl_s=0.002), planned(max_tokens=16))
    assert record.output_tokens == 20 and record.usage_completion_tokens == 20
    assert record.excess_tokens == 4  # 20 received − 16 asked
    assert record.status == "error"  # the usage mismatch the client already reported


@pytest.mark.asyncio
async def test_an_exact_response_has_no_excess() -> None:
    record, _ = await send(StreamScript(itl_s=0.002), planned(max_tokens=16))
    assert record.status == "ok" and record.excess_tokens is None


def test_excess_counts_tokens_past_the_usage_too() -> None:
    record = blank_record(planned(max_tokens=16))
    record.chunk_tokens = [1] * 20
    record.usage_completion_tokens = 16  # the server's count says 16, 20 streamed: 4 over
    assert excess_tokens(record) == 4
    record.usage_completion_tokens = 25  # usage 25 vs 16 asked: 9 over, more than 20 − 16
    assert excess_tokens(record) == 9
    record.chunk_tokens, record.usage_completion_tokens = [1] * 12, 12  # short: no excess
    assert excess_tokens(record) is None


@pytest.mark.asyncio
async def test_an_error_body_is_read_only_as_far_as_the_record_keeps_it() -> None:
    body = b"E" * 5_000_000  # a 5 MB error page; the record keeps 300 characters

    async def handler(request: aiohttp.web.Request) -> aiohttp.web.Response:
        return aiohttp.web.Response(status=500, body=body)

    app = aiohttp.web.Application()
    app.router.add_post("/v1/completions", handler)
    runner = aiohttp.web.AppRunner(app)
    await runner.setup()
    site = aiohttp.web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    p = planned(max_tokens=2)
    try:
        async with aiohttp.ClientSession() as session:
            record = await send_request(
                session, Target(f"http://127.0.0.1:{port}", "m"), p, blank_record(p),
                MonotonicClock(),
            )  # fmt: skip
    finally:
        await runner.cleanup()
    assert record.error == "HTTP 500: " + "E" * 300
