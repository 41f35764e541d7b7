"""loadgen.sse: SSE decoding of raw reads and vLLM completion-chunk interpretation (pure)."""

from __future__ import annotations

import re

import pytest

from loadgen.sse import (
    DONE,
    ChunkProtocolError,
    CompletionChunk,
    SSEDecoder,
    SSEEvent,
    parse_chunk,
    parse_event,
)

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


# -- the fast path (the client once spent most of its CPU decoding chunks) -------------

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


# Each shape with what it means, read off the payload by hand: (completion, prompt, cached,
# has_choice, has_text, finish_reason, error).
CHUNK_MEANINGS = [
    ('{"error":null,"choices":[{"text":"a"}]}', (None, None, None, True, True, None, None)),
    ('{"error":{"message":"m"},"choices":5}', (None, None, None, False, False, None, "m")),
    ('{"object":"error","message":"engine dead"}',
     (None, None, None, False, False, None, "engine dead")),
    ('{"choices":[{"index":0,"delta":{"content":"hi"},"finish_reason":null}]}',
     (None, None, None, True, True, None, None)),
    ('{"choices":[{"index":0,"delta":{"reasoning_content":"r"}}]}',
     (None, None, None, True, True, None, None)),
    ('{"choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}',
     (None, None, None, True, False, None, None)),
    ('{"choices":[{"text":""},{"text":"b","finish_reason":"length"}]}',
     (None, None, None, True, True, "length", None)),
    ('{"usage":null,"choices":null}', (None, None, None, False, False, None, None)),
    ('{"usage":{"prompt_tokens_details":null,"completion_tokens":2}}',
     (2, None, None, False, False, None, None)),
    ('{"choices":[{"text":"é"}],"usage":{"completion_tokens":1,"prompt_tokens":4,'
     '"prompt_tokens_details":{"cached_tokens":2}}}', (1, 4, 2, True, True, None, None)),
]  # fmt: skip


@pytest.mark.parametrize(("data", "meaning"), CHUNK_MEANINGS)
def test_chunk_shapes_mean_what_they_say(data: str, meaning: tuple[object, ...]) -> None:
    assert tuple(parse_chunk(data)) == meaning
    assert tuple(parse_chunk(data.encode())) == meaning


def test_a_null_error_member_is_no_error() -> None:
    # vLLM-compatible servers may send "error": null on every normal chunk (fault J).
    assert parse_chunk('{"error":null,"choices":[{"text":"x"}]}').error is None


# A field of the wrong type is a protocol error naming the field (fault E: a string count
# reached the token arithmetic as a TypeError and aborted the whole phase).
WRONG_TYPES = [
    ('{"choices":[{"text":"a"}],"usage":{"completion_tokens":"2"}}', "$.usage.completion_tokens"),
    ('{"choices":[{"text":"a"}],"usage":"x"}', "$.usage"),
    ('{"choices":5}', "$.choices"),
    ('{"choices":[1]}', "$.choices[0]"),
    ('{"choices":[{"text":7}]}', "$.choices[0].text"),
    ('{"choices":[{"delta":"odd"}]}', "$.choices[0].delta"),
    ('{"choices":[{"finish_reason":1}]}', "$.choices[0].finish_reason"),
    ('{"choices":[],"usage":{"completion_tokens":3.5}}', "$.usage.completion_tokens"),
    ('{"choices":[],"usage":{"completion_tokens":-1}}', "$.usage.completion_tokens"),
    ('{"usage":{"prompt_tokens":true}}', "$.usage.prompt_tokens"),
    ('{"usage":{"prompt_tokens_details":{"cached_tokens":"2"}}}',
     "$.usage.prompt_tokens_details.cached_tokens"),
]  # fmt: skip


@pytest.mark.parametrize(("data", "field"), WRONG_TYPES)
def test_a_field_of_the_wrong_type_is_a_protocol_error_naming_it(data: str, field: str) -> None:
    with pytest.raises(ChunkProtocolError, match=re.escape(f"`{field}`")):
        parse_chunk(data)


# -- line ends: LF, CRLF and a bare CR (WHATWG HTML §9.2.5; fault K) ------------------------

# The same three events with each line end; written out by hand.
LINE_END_EVENTS = [SSEEvent("a"), SSEEvent("b1\nb2"), SSEEvent(DONE)]


@pytest.mark.parametrize("eol", ["\n", "\r\n", "\r"])
def test_every_line_end_gives_the_same_events_for_any_split(eol: str) -> None:
    stream = eol.join(["data: a", "", ": ping", "data: b1", "data: b2", "", "data: [DONE]", ""])
    raw = (stream + eol).encode()
    assert decode_like_the_client([raw]) == LINE_END_EVENTS
    assert decode_like_the_client([raw[i : i + 1] for i in range(len(raw))]) == LINE_END_EVENTS
    for cut in range(len(raw) + 1):
        assert decode_like_the_client([raw[:cut], raw[cut:]]) == LINE_END_EVENTS, cut


def test_a_cr_ending_one_read_and_an_lf_opening_the_next_are_one_line_end() -> None:
    decoder = SSEDecoder()
    # "data: x\r" ends the line at once; the LF that follows is not a blank line, so the
    # event is dispatched only by the blank line after it (one event, not a split one).
    assert decoder.feed(b"data: x\r") == []
    assert decoder.feed(b"\ndata: y\r\n") == []
    assert decoder.feed(b"\r\n") == [SSEEvent("x\ny")]


def test_a_bare_cr_event_is_dispatched_in_the_read_that_ends_it() -> None:
    # Not held back for a possible LF: its stamp is the read it arrived in.
    decoder = SSEDecoder()
    assert decoder.feed(b"data: x\r\r") == [SSEEvent("x")]
    assert decoder.feed(b"\ndata: y\r\r") == [SSEEvent("y")]  # that LF was the CR's pair
