"""The gateway routes with the policy it is configured with: prefix-hash keeps a prompt's
group on one upstream, an open breaker moves the group to the next upstream on the ring and
it comes back once the breaker closes, and every decision is counted and written to the
decisions file with the client's request id."""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from pathlib import Path

import aiohttp
import pytest

from gateway.app import running_gateway
from gateway.routing import HashRing, PrefixKeys
from tests.support.gateway_fakes import (
    fake_upstream,
    gateway_config,
    metric_value,
    upstream_script,
)

pytestmark = pytest.mark.timeout(30)

BLOCK = 128


def group_prompt(group: int, suffix: int) -> list[int]:
    """Four full blocks shared by the group (the key covers them), then a unique tail."""
    return [group * 1000 + i % 500 for i in range(4 * BLOCK)] + [suffix + 1, suffix + 2]


def home_of(prompt: list[int], replicas: int) -> int:
    """The group's own replica, computed by hand from the ring (not through the gateway)."""
    return HashRing(replicas).successors(PrefixKeys().of_tokens(prompt))[0]


async def post(client: aiohttp.ClientSession, url: str, prompt: list[int], rid: str) -> str:
    """The upstream that answered, or ``status N`` for an answer other than 200."""
    body = {"model": "m", "prompt": prompt, "max_tokens": 2, "stream": True}
    headers = {"X-Request-Id": rid}
    async with client.post(f"{url}/v1/completions", json=body, headers=headers) as resp:
        await resp.read()
        return resp.headers["X-Gateway-Upstream"] if resp.status == 200 else f"status {resp.status}"


@pytest.mark.asyncio
async def test_prefix_hash_sends_each_group_to_its_home_and_records_every_decision(
    tmp_path: Path,
) -> None:
    fakes = [fake_upstream(), fake_upstream()]
    decisions = tmp_path / "routing_decisions.jsonl"
    async with fakes[0].serve(), fakes[1].serve():
        urls = [f.url for f in fakes]
        config = gateway_config(*urls, routing="prefix-hash", decisions_file=decisions)
        async with running_gateway(config) as url, aiohttp.ClientSession() as client:
            sent = [(g, s) for s in range(3) for g in range(4)]  # one at a time: no load bound
            got = [await post(client, url, group_prompt(g, s), f"r{g}-{s}") for g, s in sent]
            exposition = await (await client.get(f"{url}/metrics")).text()
    homes = {g: urls[home_of(group_prompt(g, 0), 2)] for g in range(4)}
    assert got == [homes[g] for g, _ in sent]
    rows = [json.loads(line) for line in decisions.read_text().splitlines()]
    assert [r["request_id"] for r in rows] == [f"r{g}-{s}" for g, s in sent]
    assert {r["why"] for r in rows} == {"matched"}
    assert all(r["policy"] == "prefix-hash" and r["home"] == r["replica"] for r in rows)
    assert all(r["key"] == f"{PrefixKeys().of_tokens(group_prompt(0, 0)):016x}"
               for r in rows if r["request_id"].startswith("r0-"))  # fmt: skip
    per_upstream = Counter(r["upstream"] for r in rows)
    for upstream, n in per_upstream.items():
        labels = {"upstream": upstream, "policy": "prefix-hash", "why": "matched"}
        assert metric_value(exposition, "gateway_routing_decisions_total", labels) == n


@pytest.mark.asyncio
async def test_an_open_breaker_moves_the_group_to_the_next_replica_and_it_comes_back(
    tmp_path: Path,
) -> None:
    prompt = group_prompt(7, 0)
    home = home_of(prompt, 2)
    fakes = [fake_upstream(), fake_upstream()]
    fakes[home].script = upstream_script(status=500)
    decisions = tmp_path / "routing_decisions.jsonl"
    async with fakes[0].serve(), fakes[1].serve():
        urls = [f.url for f in fakes]
        config = gateway_config(
            *urls, routing="prefix-hash", decisions_file=decisions,
            breaker={"consecutive_failures": 2, "cooldown_s": 0.5},
        )  # fmt: skip
        async with running_gateway(config) as url, aiohttp.ClientSession() as client:
            failing = [await post(client, url, prompt, f"a{i}") for i in range(2)]
            moved = [await post(client, url, prompt, f"b{i}") for i in range(3)]
            fakes[home].script = upstream_script()  # the home recovers
            await asyncio.sleep(0.6)  # past the cool-down: the next request probes it
            back = [await post(client, url, prompt, f"c{i}") for i in range(3)]
    other = urls[1 - home]
    assert failing == ["status 500", "status 500"]
    assert moved == [other] * 3
    assert back == [urls[home]] * 3
    whys = [json.loads(line)["why"] for line in decisions.read_text().splitlines()]
    assert whys == ["matched"] * 2 + ["passed-on-breaker"] * 3 + ["matched"] * 3


@pytest.mark.asyncio
async def test_round_robin_alternates_whatever_the_load() -> None:
    fakes = [fake_upstream(), fake_upstream()]
    async with fakes[0].serve(), fakes[1].serve():
        urls = [f.url for f in fakes]
        config = gateway_config(*urls, routing="round-robin")
        async with running_gateway(config) as url, aiohttp.ClientSession() as client:
            got = [await post(client, url, group_prompt(1, i), f"r{i}") for i in range(4)]
    assert got == [urls[0], urls[1], urls[0], urls[1]]


@pytest.mark.asyncio
async def test_a_home_at_the_load_bound_passes_the_key_on(tmp_path: Path) -> None:
    # 2 replicas, ε = 0.25: the bound is ⌈1.25 × (L + 1) / 2⌉ with L in flight. The 1st
    # request (L=0, bound 1) and the 2nd (L=1, bound 2) fit the home; the 3rd (L=2, bound 2)
    # would make 3 there: passed on; the 4th (L=3, bound 3) fits the home again.
    prompt = group_prompt(3, 0)
    home = home_of(prompt, 2)
    fakes = [fake_upstream(), fake_upstream()]
    decisions = tmp_path / "routing_decisions.jsonl"
    async with fakes[0].serve(), fakes[1].serve():
        urls = [f.url for f in fakes]
        config = gateway_config(*urls, routing="prefix-hash", decisions_file=decisions)
        async with running_gateway(config) as url, aiohttp.ClientSession() as client:

            async def slow(i: int) -> str:
                body = {"model": "m", "prompt": prompt, "max_tokens": 2, "fake_delay_s": 1.0}
                headers = {"X-Request-Id": f"s{i}"}
                async with client.post(f"{url}/v1/completions", json=body, headers=headers) as r:
                    await r.read()
                    return r.headers["X-Gateway-Upstream"]

            tasks = []
            for i in range(4):
                tasks.append(asyncio.ensure_future(slow(i)))
                await asyncio.sleep(0.1)  # each decision sees the previous ones in flight
            got = await asyncio.gather(*tasks)
    other = urls[1 - home]
    assert got == [urls[home], urls[home], other, urls[home]]
    whys = [json.loads(line)["why"] for line in decisions.read_text().splitlines()]
    assert whys == ["matched", "matched", "passed-on-load", "matched"]
