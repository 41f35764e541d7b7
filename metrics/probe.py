"""One-off reads of a server's gauges outside the scraper (between phases, never during load)."""

from __future__ import annotations

import asyncio
import time

import httpx

from metrics.parse import parse_samples
from metrics.samples import series
from server.net.http import get_bounded
from server.net.limits import METRICS_MAX_BYTES


async def read_gauge(client: httpx.AsyncClient, url: str, name: str) -> float | None:
    """Current value of canonical gauge ``name`` summed over label sets, or ``None`` (also
    for a page over the scraper's default size limit, which is not read past it)."""
    try:
        response = await get_bounded(client, f"{url}/metrics", METRICS_MAX_BYTES)
        response.raise_for_status()
    except httpx.HTTPError:
        return None
    points = series(parse_samples(response.text, 0), name)
    return points[-1][1] if points else None


async def wait_for_gauge_at_most(
    url: str, name: str, limit: float, timeout_s: float, poll_s: float = 0.25
) -> bool:
    """Poll until gauge ``name`` ≤ ``limit``; False if it did not within ``timeout_s`` seconds."""
    deadline = time.monotonic() + timeout_s
    async with httpx.AsyncClient(timeout=5.0) as client:
        while time.monotonic() < deadline:
            value = await read_gauge(client, url, name)
            if value is not None and value <= limit:
                return True
            await asyncio.sleep(poll_s)
    return False
