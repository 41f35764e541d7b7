"""KV-cache events from a real embedded vLLM: a server started with the publisher
(``server.kv_events``) sends events the recorder decodes, and the prefix-cache model predicts
the very blocks it stores and evicts.

A 128 MiB cache: 18 blocks of 128 tokens (128 MiB ÷ (128 × 57,344 B)), 17 usable. Requests
one after another, 700-token prompts and 4 output tokens (each holds ceil(703 / 128) = 6
blocks and caches its 5 full prompt blocks): ``a`` and ``b`` share a 600-token prefix, then
differ; ``c``, ``d``, ``e`` share nothing; ``a`` comes back last.

- ``a`` stores its 5 blocks. ``b`` shares only its first 4 (block 4, tokens 512–639, holds 88
  shared tokens and 40 of its own), hits them, and stores 1 block whose parent is block 3.
- ``c``, ``d``, ``e`` need 6 fresh blocks each: the pool runs out and vLLM evicts, least
  recently freed first; the model says which blocks, and the engine's events must agree
  block by block, as for ``a``'s return.
"""

from __future__ import annotations

import asyncio
import os
import shutil
from pathlib import Path

import aiohttp
import pytest

from analysis.kv_compare import compare_blocks
from analysis.kv_events import read_kv_events
from loadgen.kvevents.recorder import recording_kv_events
from loadgen.runformat.layout import KV_EVENTS_FILE
from scenarios.prefix_cache_model import content_block_keys, usable_blocks
from server.config import ServerConfig
from server.manager import start_server
from tests.support.kv_events_case import BLOCKS, CACHE, ORDER, OUTPUT, PROMPTS, requests

pytestmark = pytest.mark.vllm

#: Set to a directory to keep the recorded events (how tests/fixtures/kv_events/ got its).
KEEP_ENV = "SERVING_TESTBED_KEEP_KV_EVENTS"


async def complete(url: str, prompt: list[int]) -> None:
    body = {"model": "testbed", "prompt": prompt, "max_tokens": OUTPUT, "ignore_eos": True,
            "temperature": 0.0}  # fmt: skip
    async with (
        aiohttp.ClientSession() as session,
        session.post(url + "/v1/completions", json=body) as r,
    ):
        assert r.status == 200, await r.text()
        await r.read()


async def test_a_real_vllm_publishes_events_the_model_matches(tmp_path: Path) -> None:
    path = tmp_path / KV_EVENTS_FILE
    async with recording_kv_events(path) as recorder:
        config = ServerConfig(kv_cache_bytes=CACHE, kv_events_port=recorder.port)
        server = await start_server(config, tmp_path / "server", start_timeout_s=600)
        try:
            assert server.capacity is not None and server.capacity.num_blocks == BLOCKS
            for name in ORDER:
                await complete(server.url, PROMPTS[name])
                await asyncio.sleep(0.3)  # the step's events leave the engine
        finally:
            server.stop()
    if keep := os.environ.get(KEEP_ENV):
        shutil.copy(path, Path(keep) / "recorded_events.jsonl")
    recorded = read_kv_events(path)
    assert recorded.gaps == () and recorded.undecodable == 0
    stored = [b for b in recorded.blocks if b.kind == "stored"]
    keys = {name: content_block_keys(PROMPTS[name], 128) for name in "ab"}
    assert [b.key for b in stored[:6]] == [*keys["a"], keys["b"][4]]
    assert stored[5].parent == keys["b"][3]
    comparison = compare_blocks(recorded, requests(), usable_blocks(BLOCKS), 128)
    assert comparison.matches, comparison
    assert comparison.removed_recorded > 0  # the small cache did evict
