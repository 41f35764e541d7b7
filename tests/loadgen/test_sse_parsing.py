"""loadgen.sse: SSE decoding of raw reads and vLLM completion-chunk interpretation (pure)."""

from __future__ import annotations

import pytest

from loadgen.sse import DONE, CompletionChunk, SSEDecoder, SSEEvent, parse_chunk, parse_event

TOKEN_CHUNK = (
    '{"id":"cmpl-x","object":"text_completion","created":1,"model":"m","choices":[{"index":0,'
    '"text":"~","logprobs":null,"finish_reason":null,"stop_reason":null,"prompt_token_ids":null,'
    '"token_ids":null}],"usage":{"prompt_tokens":1056,"total_tokens":1057,"completion_tokens":1}}'
)
SPEC_CHUNK = (
    '{"id":"cmpl-x","object":"text_completion","created":1,"model":"m","choices":[{"index":0,'
    '"text":"abc","logprobs":null,"finish_reason":null,"stop_reason":null,'
    '"prompt_token_ids":null,"token_ids":null}],'
    '"usage":{"prompt_tokens":1056,"total_tokens":1060,"completion_tokens":4}}'
)
LAST_TOKEN_CHUNK = (
    '{"id":"cmpl-x","object":"text_completion","created":1,"model":"m","choices":[{"index":0,'
    '"text":"","logprobs":null,"finish_reason":"length","stop_reason":null,'
    '"prompt_token_ids":null,"token_ids":null}],'
    '"usage":{"prompt_tokens":1056,"total_tokens":1061,"completion_tokens":5}}'
)
USAGE_TRAILER = (
    '{"id":"cmpl-x","object":"text_completion","created":1,"model":"m","choices":[],'
    '"usage":{"prompt_tokens":1056,"total_tokens":1060,"completion_tokens":4,'
    '"prompt_tokens_details":{"cached_tokens":1024}}}'
)
ERROR_EVENT = (
    '{"error":{"message":"The model does not exist.","type":"NotFoundError","param":null,'
    '"code":404}}'
)


def decode(lines: list[str | bytes]) -> list[str]:
    decoder = SSEDecoder()
    out = [event.data for line in lines if (event := decoder.feed_line(line)) is not None]
    if (last := decoder.flush()) is not None:
        out.append(last.data)
    return out


def decode_reads(reads: list[bytes]) -> list[SSEEvent]:
    decoder = SSEDecoder()
    out = [event for raw in reads for event in decoder.feed(raw)]
    if (last := decoder.flush()) is not None:
        out.append(last)
    return out


def test_events_end_at_blank_lines() -> None:
    lines = [
        f"data: {TOKEN_CHUNK}\n",
        "\n",
        f"data: {USAGE_TRAILER}\n",
        "\n",
        "data: [DONE]\n",
        "\n",
    ]
    assert decode(lines) == [TOKEN_CHUNK, USAGE_TRAILER, DONE]


def test_multi_line_data_is_joined_with_newlines() -> None:
    assert decode(["data: first\n", "data:second\n", "data:  third\n", "\n"]) == [
        "first\nsecond\n third"
    ]


def test_comments_and_other_fields_are_ignored() -> None:
    lines = [": keep-alive\n", "event: message\n", "id: 7\n", "retry: 10\n", "data: x\n", "\n"]
    assert decode(lines) == ["x"]


def test_crlf_line_endings_and_bytes_are_accepted() -> None:
    assert decode([b"data: a\r\n", b"\r\n", b"data: b\r\n", b"\r\n"]) == ["a", "b"]


def test_blank_lines_without_data_make_no_event() -> None:
    assert decode(["\n", "\r\n", ": ping\n", "\n"]) == []


def test_missing_final_blank_line_is_recovered_by_flush() -> None:
    decoder = SSEDecoder()
    assert decoder.feed_line("data: [DONE]") is None
    assert decoder.flush() == SSEEvent(DONE)
    assert decoder.flush() is None


def test_reads_split_anywhere_give_the_same_events() -> None:
    stream = f"data: {TOKEN_CHUNK}\n\ndata: {USAGE_TRAILER}\r\n\r\ndata: [DONE]\n\n".encode()
    whole = decode_reads([stream])
    assert [e.data for e in whole] == [TOKEN_CHUNK, USAGE_TRAILER, DONE]
    # Byte by byte, and cut inside "data:", inside the JSON and between \r and \n.
    assert decode_reads([stream[i : i + 1] for i in range(len(stream))]) == whole
    cuts = [3, 40, len(TOKEN_CHUNK) + 7, len(TOKEN_CHUNK) + 8 + len(USAGE_TRAILER) + 7]
    pieces = [stream[a:b] for a, b in zip([0, *cuts], [*cuts, len(stream)], strict=True)]
    assert decode_reads(pieces) == whole


def test_a_character_split_across_reads_is_decoded_whole() -> None:
    encoded = 'data: {"text":"é"}\n\n'.encode()  # é is two bytes: c3 a9
    cut = encoded.index(b"\xc3") + 1
    assert decode_reads([encoded[:cut], encoded[cut:]]) == [SSEEvent('{"text":"é"}')]


def test_last_event_without_blank_line_or_newline_is_flushed() -> None:
    # The stream ends right after the trailer's data line, or even inside it.
    assert decode_reads([f"data: {USAGE_TRAILER}\n".encode()]) == [SSEEvent(USAGE_TRAILER)]
    assert decode_reads([f"data: {USAGE_TRAILER}".encode()]) == [SSEEvent(USAGE_TRAILER)]
    assert decode_reads([b"data: x\n\n"]) == [SSEEvent("x")]  # nothing pending: no repeat


def test_event_type_is_kept_and_reset_after_each_event() -> None:
    reads = [b"event: error\ndata: upstream timed out\n\ndata: [DONE]\n\n"]
    assert decode_reads(reads) == [SSEEvent("upstream timed out", "error"), SSEEvent(DONE)]


def test_an_event_type_without_data_is_not_dispatched() -> None:
    assert decode_reads([b"event: ping\n\ndata: x\n\n"]) == [SSEEvent("x")]


def test_token_chunk() -> None:
    assert parse_chunk(TOKEN_CHUNK) == CompletionChunk(
        completion_tokens=1,
        prompt_tokens=1056,
        cached_tokens=None,
        has_choice=True,
        has_text=True,
        finish_reason=None,
        error=None,
    )


def test_speculative_chunk_reports_the_running_count() -> None:
    # The running usage jumps from 1 to 4: this chunk carries 3 tokens.
    before = parse_chunk(TOKEN_CHUNK).completion_tokens
    after = parse_chunk(SPEC_CHUNK).completion_tokens
    assert (before, after) == (1, 4)
    assert after - before == 3


def test_last_token_chunk_carries_the_finish_reason_even_with_empty_text() -> None:
    chunk = parse_chunk(LAST_TOKEN_CHUNK)
    assert chunk.finish_reason == "length"
    assert chunk.completion_tokens == 5
    assert chunk.has_choice is True
    assert chunk.has_text is False  # the last token decoded to nothing


def test_usage_trailer_has_no_choice_and_gives_cached_tokens() -> None:
    assert parse_chunk(USAGE_TRAILER) == CompletionChunk(
        completion_tokens=4,
        prompt_tokens=1056,
        cached_tokens=1024,
        has_choice=False,
        has_text=False,
        finish_reason=None,
        error=None,
    )


def test_error_event_gives_its_message() -> None:
    chunk = parse_chunk(ERROR_EVENT)
    assert chunk.error == "The model does not exist."
    assert chunk.completion_tokens is None
    assert chunk.has_choice is False


def test_error_event_without_an_object_is_kept_as_text() -> None:
    assert parse_chunk('{"error":"boom"}').error == "boom"


def test_vllm_legacy_error_object_is_an_error() -> None:
    legacy = '{"object":"error","message":"engine dead","type":"InternalServerError","code":500}'
    assert parse_chunk(legacy).error == "engine dead"


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ("upstream timed out", "upstream timed out"),
        (ERROR_EVENT, "The model does not exist."),
        ('{"message":"gateway_timeout"}', "gateway_timeout"),
        ("", "error event without a message"),
    ],
)
def test_an_event_named_error_is_an_error_whatever_its_data(data: str, message: str) -> None:
    assert parse_event(SSEEvent(data, "error")).error == message


def test_chat_delta_content_counts_as_text() -> None:
    chat = '{"choices":[{"index":0,"delta":{"content":"hi"},"finish_reason":null}]}'
    role = '{"choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}'
    assert parse_chunk(chat).has_text is True
    assert parse_chunk(role).has_text is False
    assert parse_chunk(role).has_choice is True


def test_chunk_without_usage_reports_no_count() -> None:
    chunk = parse_chunk('{"choices":[{"index":0,"text":"hi","finish_reason":null}]}')
    assert chunk.completion_tokens is None
    assert chunk.has_choice is True


@pytest.mark.parametrize("payload", ["[1, 2]", '"text"', "3", "null"])
def test_non_object_json_raises_value_error(payload: str) -> None:
    with pytest.raises(ValueError, match="not a JSON object"):
        parse_chunk(payload)


def test_invalid_json_raises_value_error() -> None:
    with pytest.raises(ValueError):
        parse_chunk("{not json")


# -- the fast path (issue 13: the client spent most of its CPU decoding chunks) -------------

# Plain events, then one of every kind the fast path declines: CRLF, an event type, a
# comment, multi-line data, "data:" without a space; then plain events again.
MIXED = (
    f"data: {TOKEN_CHUNK}\n\ndata: {SPEC_CHUNK}\n\n"
    "data: a\r\n\r\n"
    "event: error\ndata: boom\n\n"
    ": ping\n\ndata: b\n\n"
    "data: c1\ndata: c2\n\n"
    "data:d\n\n"
    f"data: {USAGE_TRAILER}\n\ndata: [DONE]\n\n"
).encode()
# Written out by hand from MIXED, event by event.
MIXED_EVENTS = [
    SSEEvent(TOKEN_CHUNK),
    SSEEvent(SPEC_CHUNK),
    SSEEvent("a"),
    SSEEvent("boom", "error"),
    SSEEvent("b"),
    SSEEvent("c1\nc2"),
    SSEEvent("d"),
    SSEEvent(USAGE_TRAILER),
    SSEEvent(DONE),
]


def decode_like_the_client(reads: list[bytes]) -> list[SSEEvent]:
    """What loadgen.client does per read: the fast path, else the general one."""
    decoder = SSEDecoder()
    out: list[SSEEvent] = []
    for raw in reads:
        plain = decoder.feed_plain(raw)
        out += decoder.feed(raw) if plain is None else [SSEEvent(d) for d in plain]
    if (last := decoder.flush()) is not None:
        out.append(last)
    return out


def test_fast_path_gives_the_same_events_for_any_split() -> None:
    assert decode_like_the_client([MIXED]) == MIXED_EVENTS
    assert decode_like_the_client([MIXED[i : i + 1] for i in range(len(MIXED))]) == MIXED_EVENTS
    for cut in range(0, len(MIXED), 7):  # every 7th byte as a cut, also inside "\r\n"
        assert decode_like_the_client([MIXED[:cut], MIXED[cut:]]) == MIXED_EVENTS, cut


def test_fast_path_takes_plain_events_and_keeps_an_unfinished_one() -> None:
    decoder = SSEDecoder()
    assert decoder.feed_plain(b"data: x\n\ndata: y\n\ndata: z") == ["x", "y"]
    assert decoder.feed_plain(b"z\n\n") == ["zz"]


def test_fast_path_declines_without_consuming_and_the_general_path_takes_over() -> None:
    decoder = SSEDecoder()
    read = b"data: x\n\nevent: error\ndata: boom\n\n"
    assert decoder.feed_plain(read) is None
    assert decoder.feed(read) == [SSEEvent("x"), SSEEvent("boom", "error")]


CHUNK_SHAPES = [
    TOKEN_CHUNK,
    SPEC_CHUNK,
    LAST_TOKEN_CHUNK,
    USAGE_TRAILER,
    ERROR_EVENT,
    '{"error":null}',
    '{"object":"error","message":"engine dead"}',
    '{"choices":[{"index":0,"delta":{"content":"hi"},"finish_reason":null}]}',
    '{"choices":[{"index":0,"delta":{"reasoning_content":"r"}}]}',
    '{"choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}',
    '{"choices":[1,{"text":"a","finish_reason":"stop"}]}',  # a non-object choice is skipped
    '{"choices":[{"text":""},{"text":"b","finish_reason":"length"}]}',
    '{"choices":[{"text":7}]}',  # text of another type: the generic path decides
    '{"choices":[{"delta":"odd"}]}',
    '{"choices":[],"usage":{"completion_tokens":3.0}}',
    '{"usage":null,"choices":null}',
    '{"usage":{"prompt_tokens_details":null,"completion_tokens":2}}',
    '{"choices":[{"text":"é"}],"usage":{"completion_tokens":1,"prompt_tokens":4,'
    '"prompt_tokens_details":{"cached_tokens":2}}}',
]


@pytest.mark.parametrize("data", CHUNK_SHAPES)
def test_typed_decoding_means_what_generic_json_decoding_means(data: str) -> None:
    from loadgen.sse import _parse_generic

    assert parse_chunk(data) == _parse_generic(data)
    assert parse_chunk(data.encode()) == _parse_generic(data)
