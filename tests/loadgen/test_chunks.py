"""loadgen.chunks: what a vLLM completion chunk (or any streamed event) means (pure)."""

from __future__ import annotations

import re

import pytest

from loadgen.chunks import ChunkProtocolError, CompletionChunk, parse_chunk, parse_event
from server.net.sse import SSEEvent

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
