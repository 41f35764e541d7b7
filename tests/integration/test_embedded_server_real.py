"""The embedded model on a real vLLM: both variants' capacity, exact-length streaming, CLI,
clean failures."""

from __future__ import annotations

import asyncio
import json
import random
from collections.abc import Iterator
from pathlib import Path

import aiohttp
import pytest

from loadgen.client import Target, send_request
from loadgen.clock import MonotonicClock
from loadgen.records import RequestRecord
from scenarios.requests import PlannedRequest
from server.config import ServerConfig
from server.embedded_model import model_dir
from server.manager import ServerStartError, start_server
from server.model_variant import VARIANTS, decide
from server.process import group_alive, port_is_free
from tests.support.vllm_fixtures import SharedServer, loadgen, start_shared, stop_shared

pytestmark = pytest.mark.vllm


def _other_variant() -> str:
    """The variant ``auto`` does not pick on this machine (the shared server runs the other)."""
    return "fp32" if decide("auto").variant == "bf16" else "bf16"


@pytest.fixture(scope="module")
def server_1gib_other_variant() -> Iterator[SharedServer]:
    """1 GiB with the variant ``auto`` does not pick here, so the tier starts both variants
    (one extra start, only for this module)."""
    server = start_shared("--cache", "1GiB", "--model-variant", _other_variant())
    yield server
    stop_shared(server)


def test_both_variants_hold_18688_tokens_in_1gib_and_say_which_they_are(
    server_1gib: SharedServer, server_1gib_other_variant: SharedServer
) -> None:
    """1 GiB / (128 tokens × 57,344 B) = 146.3 → 146 blocks × 128 = 18,688 tokens, with either
    variant: bf16 (4 KV heads × 2 B) and fp32 (2 KV heads × 4 B) store the same bytes/token."""
    auto, other = server_1gib.state, server_1gib_other_variant.state
    assert auto["model_variant"] == decide("auto").as_dict()
    assert other["model_variant"] == {
        "variant": _other_variant(),
        "reason": f"{_other_variant()} chosen explicitly (--model-variant {_other_variant()})",
    }
    for server in (server_1gib, server_1gib_other_variant):
        assert (server.kv_capacity_tokens, server.block_size) == (18_688, 128)


def test_each_variant_is_built_with_its_geometry_and_the_same_tokenizer(
    server_1gib: SharedServer, server_1gib_other_variant: SharedServer
) -> None:
    """Both variants are built by now (the two servers above); 57,344 B of KV per token each."""
    tokenizers = set()
    for name, variant in VARIANTS.items():
        facts = json.loads((model_dir(name) / "testbed_model.json").read_text())
        config = json.loads((model_dir(name) / "config.json").read_text())
        assert facts["kv_bytes_per_token"] == 57_344
        assert (config["num_hidden_layers"], config["head_dim"], config["dtype"]) == (
            28,
            128,
            variant.dtype,
        )
        assert config["num_key_value_heads"] == variant.num_key_value_heads
        tokenizers.add((model_dir(name) / "tokenizer.json").read_bytes())
    assert len(tokenizers) == 1


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
