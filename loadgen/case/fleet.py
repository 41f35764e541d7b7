"""What a fleet case adds to a case's start: every replica scraped, every prefix cache emptied.

A fleet run (docs/fleet.md) sends the same requests through one routing policy after another,
one case per policy, over replicas kept running between them. Two things make the policies'
figures comparable: each case starts with empty prefix caches (vLLM's
``POST /reset_prefix_cache``, a development endpoint served only with
``VLLM_SERVER_DEV_MODE=1``), and each replica has its own scraper (replica 0's files where a
case keeps them, replica K's under ``replicas/K/``) so the fleet's counters are the sum of
every replica's.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Sequence
from pathlib import Path

import aiohttp

from loadgen.runformat.layout import FLEET_FILE, replica_dir, write_json
from metrics.scraper import ScraperProcess
from scenarios.plan import CaseSpec, Plan
from server.net.errors import describe_exception

#: Tries of one replica's reset: vLLM refuses it (``success: false``) while blocks are still
#: held, e.g. by a request of the case before that is still being freed.
RESET_TRIES = 5
RESET_RETRY_S = 1.0


class CacheResetError(RuntimeError):
    """A replica's prefix cache could not be emptied; the message says which and why."""


async def reset_prefix_caches(urls: Sequence[str], timeout_s: float = 30.0) -> None:
    """Empty the prefix cache of every server in ``urls`` (base URLs), one after another.

    Raises:
        CacheResetError: a server does not serve the endpoint (404: started without
            ``VLLM_SERVER_DEV_MODE=1``), answers otherwise than ``{"success": true}`` after
            :data:`RESET_TRIES` tries, or cannot be reached.
    """
    timeout = aiohttp.ClientTimeout(total=timeout_s)
    async with aiohttp.ClientSession(timeout=timeout) as session:
        for url in urls:
            await _reset_one(session, url)


async def _reset_one(session: aiohttp.ClientSession, url: str) -> None:
    answer = ""
    for attempt in range(RESET_TRIES):
        if attempt:
            await asyncio.sleep(RESET_RETRY_S)
        try:
            async with session.post(f"{url}/reset_prefix_cache") as resp:
                if resp.status == 404:
                    raise CacheResetError(
                        f"{url} has no /reset_prefix_cache: vLLM serves it only with "
                        "VLLM_SERVER_DEV_MODE=1 in its environment"
                    )
                answer = (await resp.content.read(300)).decode(errors="replace")
                if resp.status == 200 and '"success":true' in answer.replace(" ", ""):
                    return
        except (aiohttp.ClientError, TimeoutError) as exc:
            answer = describe_exception(exc)
    raise CacheResetError(
        f"{url} did not empty its prefix cache after {RESET_TRIES} tries: {answer}"
    )


async def start_replica_scrapers(
    stack: contextlib.AsyncExitStack, plan: Plan, urls: Sequence[str], cdir: Path
) -> list[ScraperProcess]:
    """A scraper for each of ``urls`` (replicas 1…n−1; replica 0 has the case's own), its
    files under ``replicas/K/``; each stopped by ``stack``. Returns them once each made its
    first successful scrape.

    Raises:
        RuntimeError: a replica's first scrape did not succeed (message: which and why).
    """
    scrapers = []
    for k, url in enumerate(urls, start=1):
        scraper = ScraperProcess(
            url, replica_dir(cdir, k), plan.scrape_interval_s, max_bytes=plan.metrics_max_bytes
        )
        scraper.start()
        stack.push_async_callback(asyncio.to_thread, scraper.stop)
        scrapers.append(scraper)
    for k, scraper in enumerate(scrapers, start=1):
        if not await asyncio.to_thread(scraper.wait_first_scrape):
            raise RuntimeError(f"replica {k}: {scraper.failure or 'no successful scrape'}")
    return scrapers


def routing_name(case: CaseSpec) -> str | None:
    """The routing policy in front of ``case``'s replicas as ``--routing`` names it
    (``prefix-hash``, ``vllm-router:cache_aware``), or ``None`` without a router."""
    if case.gateway is not None:
        return case.gateway.routing
    if case.proxy is not None and case.proxy.kind == "vllm-router":
        return f"vllm-router:{case.proxy.policy or 'cache_aware'}"
    return None


def write_fleet_file(cdir: Path, case: CaseSpec, urls: Sequence[str]) -> None:
    """``fleet.json``: the replicas' base URLs in order (replica 0 first: the order the
    router was given them, which vllm-router's consistent hash depends on) and the routing.

    Raises:
        RunWriteError: the file could not be written.
    """
    write_json(cdir / FLEET_FILE, {"replica_urls": list(urls), "routing": routing_name(case)})
