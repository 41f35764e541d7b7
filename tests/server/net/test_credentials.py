"""Which header names, body keys and values are credentials, and redaction at any depth."""

from __future__ import annotations

import pytest

from server.net.credentials import (
    REDACTED,
    credential_keys,
    is_credential_header,
    is_credential_key,
    looks_like_credential,
    name_words,
    redact_fields,
    redact_header_value,
)


def test_names_split_into_words_at_separators_and_case_changes() -> None:
    assert name_words("X-ApiKey_v2") == ["x", "api", "key", "v2"]
    assert name_words("X-API-KEY") == ["x", "api", "key"]
    assert name_words("accessToken") == ["access", "token"]
    assert name_words("--") == []


@pytest.mark.parametrize(
    "name",
    [
        # The names the old substring list did not know.
        "X-JWT", "X-Bearer", "X-Signature", "X-Hub-Signature-256", "X-Sig",
        # And the ones it did: they stay secrets.
        "Authorization", "Proxy-Authorization", "X-Api-Key", "api-key", "X-Auth-Token",
        "Cookie", "Set-Cookie", "X-Session-Id", "X-Client-Secret", "X-Password",
        "X-Amz-Security-Token", "X-Token-Value", "XApiKey", "X-Credentials",
    ],
)  # fmt: skip
def test_credential_header_names(name: str) -> None:
    assert is_credential_header(name)


@pytest.mark.parametrize("name", ["X-Trace", "X-Priority", "Accept", "User-Agent", "X-Request-Id"])
def test_plain_header_names(name: str) -> None:
    assert not is_credential_header(name)


@pytest.mark.parametrize(
    "key",
    ["api_key", "apiKey", "apikey", "access_token", "token", "client_secret", "password",
     "jwt", "bearer", "signature", "hmac_sig", "auth", "cookie", "credentials", "api_keys"],
)  # fmt: skip
def test_credential_body_keys(key: str) -> None:
    assert is_credential_key(key)


@pytest.mark.parametrize(
    "key",
    # vLLM sampling fields that speak of text tokens: their values say what was sent.
    ["stop_token_ids", "max_tokens", "min_tokens", "skip_special_tokens", "allowed_token_ids",
     "truncate_prompt_tokens", "top_k", "priority", "chat_template_kwargs", "logit_bias"],
)  # fmt: skip
def test_body_keys_about_text_tokens_are_not_credentials(key: str) -> None:
    assert not is_credential_key(key)


def test_values_that_read_as_credentials_whatever_their_name() -> None:
    assert looks_like_credential("Bearer abc.def")
    assert looks_like_credential("basic dXNlcjpwdw==")
    assert looks_like_credential("eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.c2ln")
    assert not looks_like_credential("Bearer")  # a scheme without parameters says nothing
    assert not looks_like_credential("abc")
    assert redact_header_value("X-Trace", "Bearer abc") == REDACTED
    assert redact_header_value("X-Trace", "abc") == "abc"
    assert redact_header_value("X-JWT", "abc") == REDACTED


def test_body_fields_are_redacted_at_any_depth_and_the_rest_kept() -> None:
    body = {
        "priority": 1,
        "api_key": "k1",
        "vllm_xargs": {"nested": [{"access_token": "t1", "n": 2}], "note": "Bearer t2"},
        "stop_token_ids": [1, 2],
    }
    assert redact_fields(body) == {
        "priority": 1,
        "api_key": REDACTED,
        "vllm_xargs": {"nested": [{"access_token": REDACTED, "n": 2}], "note": REDACTED},
        "stop_token_ids": [1, 2],
    }
    assert body["api_key"] == "k1"  # a copy: what is sent keeps its values
    assert sorted(credential_keys(body)) == ["access_token", "api_key"]


def test_a_deeply_nested_body_is_redacted_without_exhausting_the_stack() -> None:
    deep: object = {"api_key": "k"}
    for _ in range(10_000):
        deep = [deep]
    out = redact_fields(deep)
    for _ in range(10_000):
        assert isinstance(out, list)
        out = out[0]
    assert out == {"api_key": REDACTED}
