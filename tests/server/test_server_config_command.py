"""server.config.ServerConfig: validation and the exact vLLM command line it produces."""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

from server.config import VLLM_MODULE, ServerConfig


def test_default_command_line() -> None:
    # The variant pinned: "auto" depends on the CPU (tests/server/test_model_variant.py).
    argv = ServerConfig(model_variant="bf16").command("/venv/bin/python", "/models/tiny", 8123)
    assert argv == [
        "/venv/bin/python", "-m", VLLM_MODULE,
        "--model", "/models/tiny",
        "--served-model-name", "testbed",
        "--dtype", "bfloat16",
        "--max-model-len", "2048",
        "--kv-cache-memory-bytes", "1073741824",
        "--host", "127.0.0.1",
        "--port", "8123",
        "--enable-prompt-tokens-details",
        "--enable-prefix-caching",
        "--enforce-eager",
    ]  # fmt: skip


def test_kv_cache_accepts_a_size_string() -> None:
    config = ServerConfig(kv_cache_bytes="4GiB")
    assert config.kv_cache_bytes == 4 * 2**30
    argv = config.command("python", "m", 1)
    assert argv[argv.index("--kv-cache-memory-bytes") + 1] == "4294967296"


def test_optional_flags() -> None:
    config = ServerConfig(
        enable_prefix_caching=False,
        enforce_eager=False,
        max_num_seqs=16,
        speculative_config={"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 4},
        extra_args=("--seed", "7"),
    )
    argv = config.command("python", "m", 1)
    assert "--enforce-eager" not in argv
    assert "--enable-prefix-caching" not in argv
    assert "--no-enable-prefix-caching" in argv
    assert argv[argv.index("--max-num-seqs") + 1] == "16"
    spec = argv[argv.index("--speculative-config") + 1]
    assert json.loads(spec) == {
        "method": "ngram",
        "num_speculative_tokens": 3,
        "prompt_lookup_max": 4,
    }
    assert argv[-2:] == ["--seed", "7"]


def test_unknown_fields_are_rejected() -> None:
    with pytest.raises(ValidationError, match="Extra inputs are not permitted"):
        ServerConfig(kv_cache="1GiB")  # type: ignore[call-arg]


def test_bad_size_string_is_a_validation_error_with_the_reason() -> None:
    with pytest.raises(ValidationError, match="unknown unit 'gb'"):
        ServerConfig(kv_cache_bytes="1gb")


def test_non_positive_sizes_are_rejected() -> None:
    with pytest.raises(ValidationError):
        ServerConfig(kv_cache_bytes=0)
    with pytest.raises(ValidationError):
        ServerConfig(max_model_len=0)


def test_config_is_frozen() -> None:
    config = ServerConfig()
    with pytest.raises(ValidationError):
        config.kv_cache_bytes = 5  # type: ignore[misc]
