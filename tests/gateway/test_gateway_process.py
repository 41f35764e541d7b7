"""The gateway as the load generator starts it (its own process): events file, honest readiness.

Kept beside the gateway tests because it pins the gateway's command-line contract that
``loadgen.proxies.gateway`` relies on (``--events-file``, ``/health`` 200 only when an upstream
answers).
"""

from __future__ import annotations

from pathlib import Path

import aiohttp
import pytest

from loadgen.proxies.gateway import running_gateway_process
from tests.support.gateway_fakes import closed_port, fake_upstream

pytestmark = pytest.mark.timeout(60)


@pytest.mark.asyncio
async def test_the_process_starts_with_its_events_file_and_proxies(tmp_path: Path) -> None:
    fake = fake_upstream()
    events = tmp_path / "gateway_events.jsonl"
    async with (
        fake.serve(),
        running_gateway_process(
            [fake.url], tmp_path / "gateway.log", propagate_cancellation=True, events_path=events
        ) as gateway,
        aiohttp.ClientSession() as client,
    ):
        url = gateway.url
        assert Path(f"/proc/{gateway.pid}").exists()
        assert events.read_text() == ""  # created at start, no transition yet
        assert fake.health_checks >= 1  # ready only after the upstream answered
        async with client.post(url + "/v1/completions", json={"prompt": "x"}) as resp:
            assert resp.status == 200
            assert resp.headers["X-Gateway-Upstream"] == fake.url


@pytest.mark.asyncio
async def test_a_gateway_with_no_reachable_upstream_never_becomes_ready(tmp_path: Path) -> None:
    dead = f"http://127.0.0.1:{closed_port()}"
    with pytest.raises(RuntimeError, match="did not become ready"):
        async with running_gateway_process(
            [dead], tmp_path / "gateway.log", propagate_cancellation=True, timeout_s=1.0
        ):
            pass
