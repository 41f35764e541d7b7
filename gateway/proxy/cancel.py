"""Ending upstream work: cancel an upstream call at once, or drain an orphaned one.

With ``propagate_cancellation`` the gateway closes the upstream connection when the client goes
away (vLLM sees the disconnect and aborts the request); without it the response is drained in
the background by :func:`drain`, as in a proxy that forgot to cancel.
"""

from __future__ import annotations

import asyncio
import logging
import time

import aiohttp

logger = logging.getLogger(__name__)


def close_call(call: asyncio.Task[aiohttp.ClientResponse] | None) -> None:
    """Cancel an upstream request task, closing its response if it already produced one."""
    if call is None:
        return

    def close_result(task: asyncio.Task[aiohttp.ClientResponse]) -> None:
        if not task.cancelled() and task.exception() is None:
            task.result().close()

    if call.done():
        close_result(call)
    else:
        call.cancel()
        call.add_done_callback(close_result)


async def drain(
    call: asyncio.Task[aiohttp.ClientResponse], deadline_s: float, upstream: str
) -> None:
    """Read an upstream response to its end and discard it, until ``deadline_s`` at most
    (monotonic s); ``upstream`` names it in the log."""
    resp: aiohttp.ClientResponse | None = None
    drained_bytes = 0
    try:
        async with asyncio.timeout(max(deadline_s - time.monotonic(), 0.0)):
            resp = await asyncio.shield(call)
            while chunk := await resp.content.readany():
                drained_bytes += len(chunk)
    except (aiohttp.ClientError, TimeoutError) as exc:
        logger.info("orphaned request to %s ended: %r", upstream, exc)
    finally:
        close_call(call)
    logger.info("orphaned request to %s drained (%d bytes discarded)", upstream, drained_bytes)
