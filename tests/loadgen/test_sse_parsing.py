"""loadgen.sse: SSE line decoding and vLLM completion-chunk interpretation (pure)."""

from __future__ import annotations

import pytest

from loadgen.sse import DONE, CompletionChunk, SSEDecoder, parse_chunk

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
    out = [data for line in lines if (data := decoder.feed_line(line)) is not None]
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
    assert decoder.flush() == DONE
    assert decoder.flush() is None


def test_token_chunk() -> None:
    assert parse_chunk(TOKEN_CHUNK) == CompletionChunk(
        completion_tokens=1,
        prompt_tokens=1056,
        cached_tokens=None,
        has_choice=True,
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


def test_usage_trailer_has_no_choice_and_gives_cached_tokens() -> None:
    assert parse_chunk(USAGE_TRAILER) == CompletionChunk(
        completion_tokens=4,
        prompt_tokens=1056,
        cached_tokens=1024,
        has_choice=False,
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
