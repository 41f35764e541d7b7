"""The embedded model on a real vLLM: capacity, exact-length streaming, CLI, clean failures."""

from __future__ import annotations

import asyncio
import json
import random
from pathlib import Path

import aiohttp
import pytest
from vllm_fixtures import SharedServer, loadgen

from loadgen.client import Target, send_request
from loadgen.clock import MonotonicClock
from loadgen.records import RequestRecord
from scenarios.workloads import PlannedRequest
from server.config import ServerConfig
from server.embedded_model import KV_BYTES_PER_TOKEN, model_dir
from server.manager import ServerStartError, start_server
from server.process import group_alive, port_is_free

pytestmark = pytest.mark.vllm


def test_embedded_model_has_7b_class_kv_geometry() -> None:
    """57,344 B of KV per token: 28 layers × 4 KV heads × head_dim 128 × K,V × 2 B."""
    assert KV_BYTES_PER_TOKEN == 57_344
    facts = json.loads((model_dir() / "testbed_model.json").read_text())
    config = json.loads((model_dir() / "config.json").read_text())
    assert facts["kv_bytes_per_token"] == 57_344
    assert (config["num_hidden_layers"], config["num_key_value_heads"], config["head_dim"]) == (
        28,
        4,
        128,
    )


def test_1gib_cache_holds_about_18_7k_tokens(server_1gib: SharedServer) -> None:
    """1 GiB / 57,344 B ≈ 18,724 tokens, rounded down to whole 128-token blocks."""
    assert 18_000 <= server_1gib.kv_capacity_tokens <= 19_000
    assert server_1gib.block_size == 128
    assert server_1gib.kv_capacity_tokens % server_1gib.block_size == 0


def test_status_lists_the_started_server_as_healthy(server_1gib: SharedServer) -> None:
    proc = loadgen("server", "status", "--json", timeout=60)
    assert proc.returncode == 0, proc.stderr
    rows = {row["port"]: row for row in json.loads(proc.stdout)}
    assert rows[server_1gib.port]["healthy"] is True
    assert rows[server_1gib.port]["pid"] == server_1gib.pid


async def test_token_id_prompt_of_1024_tokens_streams_exactly_16_tokens(
    server_1gib: SharedServer,
) -> None:
    rng = random.Random(7)
    planned = PlannedRequest("exact-0", tuple(rng.randrange(10, 4000) for _ in range(1024)), 16)
    record = RequestRecord("exact-0", "t", "p", 0, None, 1024, 16, 0)
    async with aiohttp.ClientSession() as session:
        await asyncio.wait_for(
            send_request(
                session,
                Target(server_1gib.url, server_1gib.model_name),
                planned,
                record,
                MonotonicClock(),
            ),
            timeout=120,
        )
    assert record.status == "ok", record.error
    assert record.usage_prompt_tokens == 1024
    assert record.usage_completion_tokens == 16
    assert sum(record.chunk_tokens) == 16
    assert record.finish_reason == "length"
    assert record.sent_ns < record.chunk_ns[0] <= record.chunk_ns[-1] <= record.end_ns


async def test_impossible_cache_fails_with_the_cause_and_leaves_nothing_running(
    tmp_path: Path,
) -> None:
    """16 MiB holds 2 blocks (256 tokens) but max_model_len is 2048: vLLM refuses to start."""
    config = ServerConfig(kv_cache_bytes="16MiB", max_model_len=2048)
    with pytest.raises(ServerStartError) as info:
        await start_server(config, tmp_path, start_timeout_s=300)
    message = str(info.value)
    assert "exited with code" in message
    # The root cause, not vLLM's generic "Engine core initialization failed" wrapper:
    assert "Likely cause: ValueError: To serve at least one request" in message
    assert "larger than the available KV cache memory" in message
    argv = json.loads((tmp_path / "command.json").read_text())["argv"]
    port = int(argv[argv.index("--port") + 1])
    assert port_is_free(port)
    assert info.value.pid is not None and not group_alive(info.value.pid)
    log = (tmp_path / "vllm.log").read_text()
    assert log, "the server log must be kept"
