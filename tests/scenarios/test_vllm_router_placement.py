"""vllm-router's placement as the fleet model ports it, checked against the installed router
itself (``make proxies``): requests sent through a real ``vllm-router`` to two recording fake
upstreams land where :mod:`scenarios.fleet.vllm_router_hash`,
:func:`scenarios.fleet.rules.vllm_round_robin_rule` and :mod:`scenarios.fleet.cache_aware`
say. Skipped, saying so, when the router is not installed.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import random
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest

from loadgen.proxies.vllm_router import ROUTER_ENV, find_vllm_router
from scenarios.fleet.vllm_router_hash import ConsistentHashRing, ring_key, routing_text
from server.process import free_loopback_port
from tests.support.fake_openai_server import FakeOpenAIServer
from tests.support.gateway_fakes import fake_upstream


@contextlib.asynccontextmanager
async def router(policy: str, urls: list[str], log: Path) -> AsyncIterator[str]:
    binary = find_vllm_router()
    if binary is None:
        pytest.skip("vllm-router is not installed (make proxies)")
    port, metrics = free_loopback_port(), free_loopback_port()
    argv = [
        binary, "--host", "127.0.0.1", "--port", str(port), "--worker-urls", *urls,
        "--policy", policy, "--prometheus-host", "127.0.0.1", "--prometheus-port", str(metrics),
        "--worker-startup-check-interval", "1", "--disable-retries", "--log-level", "warning",
    ]  # fmt: skip
    with log.open("wb") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT,
                                env={**os.environ, **ROUTER_ENV})  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        async with aiohttp.ClientSession() as session:
            for _ in range(150):
                with contextlib.suppress(aiohttp.ClientError):
                    async with session.get(url + "/health") as r:
                        if r.status == 200:
                            break
                await asyncio.sleep(0.2)
            else:
                pytest.fail(f"vllm-router did not come up: {log.read_text()[-2000:]}")
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=10)


async def landed(
    url: str, fakes: list[FakeOpenAIServer], body: dict[str, object], headers: dict[str, str]
) -> int:
    """Send one completion through the router; the index of the fake that received it."""
    before = [f.served for f in fakes]
    async with (
        aiohttp.ClientSession() as session,
        session.post(url + "/v1/completions", json=body, headers=headers) as r,
    ):
        assert r.status == 200, await r.text()
        await r.read()
    got = [i for i, f in enumerate(fakes) if f.served > before[i]]
    assert len(got) == 1, f"the completion reached fakes {got}"
    return got[0]


async def test_consistent_hash_lands_where_the_port_says(tmp_path: Path) -> None:
    """40 prompts (token IDs of 5 lengths, and text prompts short and long; every other one
    with the ``X-Request-Id`` the load generator sends) through ``--policy consistent_hash``:
    each lands on the worker the ported ring names: with the header, keyed by it; without,
    a token-ID prompt by its length alone (``token_ids:{count}``)."""
    rng = random.Random(7)
    async with fake_upstream().serve() as a, fake_upstream().serve() as b:
        ring = ConsistentHashRing([a.url, b.url])
        async with router("consistent_hash", [a.url, b.url], tmp_path / "router.log") as url:
            for i in range(40):
                n = rng.choice([3, 10, 30, 200, 600])
                ids = [rng.randrange(32000) for _ in range(n)]
                prompt: object = f"prompt {i} " * (n // 10 + 1) if i % 3 == 0 else ids
                text = routing_text(text=prompt) if isinstance(prompt, str) else routing_text(ids)
                body = {"model": "m", "prompt": prompt, "max_tokens": 1, "stream": False}
                headers = {"X-Request-Id": f"speedup-1x-L{i:05d}"} if i % 2 else {}
                got = await landed(url, [a, b], body, headers)
                want = ring.worker_of(ring_key(text, tuple(headers.items())))
                assert got == want, (i, n, text[:40], headers)


async def test_round_robin_alternates(tmp_path: Path) -> None:
    """``--policy round_robin``, one request at a time: the workers alternate. Which one
    comes first varies from start to start (the router lists workers in the order their
    first health checks succeed), which changes no hit rate: the replicas are alike, so the
    model's k mod N names the same partition of the requests."""
    body = {"model": "m", "prompt": [1, 2, 3], "max_tokens": 1, "stream": False}
    async with (
        fake_upstream().serve() as a,
        fake_upstream().serve() as b,
        router("round_robin", [a.url, b.url], tmp_path / "router.log") as url,
    ):
        got = [await landed(url, [a, b], body, {}) for _ in range(6)]
    assert got in ([0, 1, 0, 1, 0, 1], [1, 0, 1, 0, 1, 0])


async def test_cache_aware_matches_whole_tokens_of_token_prompts(tmp_path: Path) -> None:
    """``--policy cache_aware`` on token-ID prompts, as :mod:`scenarios.fleet.cache_aware`
    models it. Each probe first puts a fresh 100-token prompt x on the router's second
    worker: a filler request held 0.5 s on the first (idle workers tie, and the tie goes to
    the first), then x, which matches nothing, goes to the least loaded. Then, idle, a probe
    sharing a prefix with x goes to x's worker exactly when the shared whole tokens are more
    than 0.3 of the probe's: 31 of 100 yes, 30 no, whether the tokens have 1 or 5 digits (so
    tokens, not characters, are counted), and a 32nd token that extends x's by a digit adds
    nothing. An identical text prompt never follows its twin: text is placed by load."""
    rng = random.Random(11)
    marks = itertools.count()

    def big(n: int) -> list[int]:  # 5-digit token IDs
        return [rng.randrange(10_000, 30_000) for _ in range(n)]

    def small(n: int) -> list[int]:  # 1-digit token IDs
        return [rng.randrange(0, 10) for _ in range(n)]

    async with fake_upstream().serve() as a, fake_upstream().serve() as b:
        fakes = [a, b]

        async def send(url: str, prompt: object, hold_s: float = 0.0) -> int:
            mark = next(marks)
            body = {"model": "m", "prompt": prompt, "max_tokens": 1, "stream": False,
                    "fake_delay_s": hold_s, "probe_mark": mark}  # fmt: skip
            async with (
                aiohttp.ClientSession() as session,
                session.post(url + "/v1/completions", json=body) as r,
            ):
                assert r.status == 200, await r.text()
                await r.read()
            got = [i for i, f in enumerate(fakes)
                   if any((s.body or {}).get("probe_mark") == mark for s in f.seen)]  # fmt: skip
            assert len(got) == 1, got
            return got[0]

        async def follows(url: str, x: object, probe: object) -> bool:
            filler = asyncio.create_task(send(url, big(20), hold_s=0.5))
            await asyncio.sleep(0.2)
            second = await send(url, x)
            assert second != await filler
            return await send(url, probe) == second

        async with router("cache_aware", [a.url, b.url], tmp_path / "router.log") as url:
            for tokens in (small, big):
                x = tokens(31) + big(69)
                assert await follows(url, x, x[:31] + tokens(69))
                x = tokens(30) + big(70)
                assert not await follows(url, x, x[:30] + tokens(70))
            x = big(100)
            assert not await follows(url, x, [*x[:30], x[30] * 10 + 7, *big(69)])
            text = "".join(rng.choice("abcdefgh") for _ in range(200))
            assert not await follows(url, text, text)
