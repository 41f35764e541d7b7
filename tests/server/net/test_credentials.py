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


@pytest.mark.parametrize(
    "value",
    [
        "sk-SECRETSK16", "sk-proj-Ab12Cd34Ef56", "hf_AbCdEfGhIjKlMnOp", "ghp_" + "a1" * 18,
        "gho_" + "B2" * 10, "github_pat_11AAAA" + "x" * 12, "xoxb-1234-5678-abcDEF",
        "xoxp-99887766-aaBB", "AKIAIOSFODNN7EXAMPLE", "AIza" + "Sy" * 15 + "0",
        "glpat-" + "zZ9" * 7,
        # Anywhere in a value: a run of key characters, set off by anything else.
        "key=sk-SECRETSK16;", "Token: hf_AbCdEfGhIjKl",
    ],
)  # fmt: skip
def test_well_known_api_key_shapes_are_credentials(value: str) -> None:
    assert looks_like_credential(value)
    assert redact_header_value("X-Trace", value) == REDACTED
    assert redact_fields({"note": [value]}) == {"note": [REDACTED]}


@pytest.mark.parametrize(
    "value",
    [
        "sk-learn-models",  # lower case only: a word, not a random key
        "sk-Ab12",  # 4 characters after the prefix, fewer than 8
        "task-ABCD1234",  # "sk-" inside a run, not its start
        "hf_overrides", "AKIA1234",  # too short for their shapes
        "Qwen/Qwen2.5-0.5B-Instruct", "gpt-4o-mini", "hello world",
    ],
)  # fmt: skip
def test_values_that_only_resemble_key_shapes_are_kept(value: str) -> None:
    assert not looks_like_credential(value)


@pytest.mark.parametrize(
    "name", ["X-Pass", "X-Access", "X-Pw", "X-Passcode", "X-HF", "X-Sk", "X-Cookie-Jar"]
)
def test_credential_words_and_key_prefixes_name_header_credentials(name: str) -> None:
    assert is_credential_header(name)


@pytest.mark.parametrize("key", ["pass", "access", "sk", "hf", "user_pass", "accessCode", "ghp"])
def test_credential_words_and_key_prefixes_name_body_credentials(key: str) -> None:
    assert is_credential_key(key)


@pytest.mark.parametrize(
    "name", ["passthrough", "X-Passthrough", "accessible", "X-Compass", "skip", "X-Desk"]
)
def test_credential_words_count_only_as_whole_words(name: str) -> None:
    assert not is_credential_key(name)
    assert not is_credential_header(name)


def test_a_key_prefix_names_a_body_credential_only_as_the_whole_key() -> None:
    assert is_credential_key("hf")
    assert not is_credential_key("hf_overrides")  # a vLLM option, not a token


def test_no_field_the_plan_or_its_refusals_name_is_a_credential() -> None:
    """The body fields the plan sets and those ``--extra-body`` is refused are never
    hidden: their values say what was sent."""
    from scenarios.request_extras import EARLY_STOP_FIELDS, PLAN_BODY_FIELDS, SHAPE_FIELDS

    fields = PLAN_BODY_FIELDS | SHAPE_FIELDS | EARLY_STOP_FIELDS
    assert [f for f in sorted(fields) if is_credential_key(f)] == []


def test_key_shapes_are_found_in_linear_time() -> None:
    """A long value of near-misses (a prefix with a short tail, over and over) is scanned in
    one pass: 200,000 runs of ``sk-Ab1 `` (7 characters each) read in well under a second."""
    import time

    value = "sk-Ab1 " * 200_000
    start = time.perf_counter()
    assert not looks_like_credential(value)
    assert time.perf_counter() - start < 2.0
