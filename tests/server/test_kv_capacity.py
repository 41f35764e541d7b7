"""server.capacity: the real KV capacity from vllm:cache_config_info or the engine log."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from server.capacity import KVCapacity, capacity_from_log, capacity_from_metrics
from server.manager import CapacityUnknownError, read_capacity

FIXTURE = Path(__file__).resolve().parent.parent / "fixtures" / "vllm_0.32.0_cpu_1GiB_metrics.txt"


def test_capacity_from_the_recorded_vllm_page() -> None:
    # vLLM 0.32.0 CPU, --kv-cache-memory-bytes 1GiB: 146 blocks × 128 tokens = 18,688 tokens.
    assert capacity_from_metrics(FIXTURE.read_text()) == KVCapacity(
        tokens=18_688,
        block_size=128,
        num_blocks=146,
        memory_bytes=1_073_741_824,
        source="metrics",
    )


def test_page_without_the_family_gives_none() -> None:
    text = "\n".join(
        line for line in FIXTURE.read_text().splitlines() if "cache_config_info" not in line
    )
    assert capacity_from_metrics(text) is None


def test_blocks_not_yet_profiled_gives_none() -> None:
    text = (
        "# TYPE vllm:cache_config_info gauge\n"
        'vllm:cache_config_info{block_size="16",num_gpu_blocks="None"} 1.0\n'
    )
    assert capacity_from_metrics(text) is None


def test_gpu_page_without_memory_label() -> None:
    text = (
        "# TYPE vllm:cache_config_info gauge\n"
        'vllm:cache_config_info{block_size="16",num_gpu_blocks="4680",engine="0"} 1.0\n'
    )
    # 4,680 blocks × 16 tokens = 74,880 tokens.
    assert capacity_from_metrics(text) == KVCapacity(74_880, 16, 4_680, None, "metrics")


def test_capacity_from_the_cpu_log_line() -> None:
    log = (
        "(EngineCore pid=5443) INFO 11-30 14:05:40 [core.py:98] Initializing a V1 LLM engine\n"
        "(EngineCore pid=5443) INFO 11-30 14:05:47 [kv_cache_utils.py:2327] CPU KV cache size: "
        "18,688 tokens, Maximum concurrency for 2,048 tokens per request: 9.12x\n"
    )
    assert capacity_from_log(log) == KVCapacity(18_688, None, None, None, "log")


def test_capacity_from_the_gpu_log_line_last_one_wins() -> None:
    log = (
        "INFO 11-30 10:00:00 [kv_cache_utils.py:1087] GPU KV cache size: 1,000 tokens\n"
        "(EngineCore_DP0 pid=77) INFO 11-30 10:01:00 [kv_cache_utils.py:1087] GPU KV cache size: "
        "74,880 tokens\n"
    )
    assert capacity_from_log(log) == KVCapacity(74_880, None, None, None, "log")


def test_log_without_the_line_gives_none() -> None:
    assert capacity_from_log("INFO starting\nINFO ready\n") is None


def _client(handler: Callable[[httpx.Request], httpx.Response]) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.MockTransport(handler))


async def _why(handler: Callable[[httpx.Request], httpx.Response], log: Path | None = None) -> str:
    async with _client(handler) as client:
        with pytest.raises(CapacityUnknownError) as info:
            await read_capacity(client, URL, log)
    return str(info.value)


URL = "http://127.0.0.1:9"
RUNNING = 'vllm:num_requests_running{engine="0",model_name="m"} 0\n'


@pytest.mark.asyncio
async def test_an_unreadable_capacity_says_why(tmp_path: Path) -> None:
    # The m_redirect quirk: /metrics answers 302 to another host.
    def redirect(_: httpx.Request) -> httpx.Response:
        return httpx.Response(302, headers={"location": "http://127.0.0.2:9/metrics"})

    assert await _why(redirect) == (
        "GET http://127.0.0.1:9/metrics answered HTTP 302 redirecting to "
        "http://127.0.0.2:9/metrics (not followed: metrics are read where the server is)"
    )

    # The m_nocache quirk: a metrics page without vllm:cache_config_info (44 bytes).
    def no_family(_: httpx.Request) -> httpx.Response:
        return httpx.Response(200, text=RUNNING, headers={"content-type": "text/plain"})

    assert await _why(no_family) == (
        f"GET {URL}/metrics (text/plain, {len(RUNNING)} bytes): the page has no "
        "vllm:cache_config_info family"
    )

    def unprofiled(_: httpx.Request) -> httpx.Response:
        text = 'vllm:cache_config_info{block_size="16",num_gpu_blocks="None"} 1.0\n'
        return httpx.Response(200, text=text, headers={"content-type": "text/plain"})

    assert "has no num_gpu_blocks or block_size value" in await _why(unprofiled)

    def server_error(_: httpx.Request) -> httpx.Response:
        return httpx.Response(500, text="oops")

    # A log without the capacity line is the second source tried, and said so.
    log = tmp_path / "vllm.log"
    log.write_text("INFO starting\n")
    assert await _why(server_error, log) == (
        f"GET {URL}/metrics answered HTTP 500; and {log} has no 'KV cache size: N tokens' line"
    )

    def refused(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("connection refused", request=request)

    assert await _why(refused) == f"GET {URL}/metrics failed: ConnectError: connection refused"


@pytest.mark.asyncio
async def test_the_log_line_still_gives_the_capacity_when_metrics_fail(tmp_path: Path) -> None:
    log = tmp_path / "vllm.log"
    log.write_text("INFO [kv_cache_utils.py:2327] CPU KV cache size: 18,688 tokens\n")
    async with _client(lambda _: httpx.Response(404)) as client:
        found = await read_capacity(client, URL, log)
    assert found == KVCapacity(18_688, None, None, None, "log")
