"""The event loop every process of the testbed runs on: uvloop.

The load generator, the gateway, the scraper and the benchmarks' clients all run their
coroutines with :func:`run_event_loop`: uvloop's wake-ups cost several times less than
asyncio's (every relayed or read chunk costs one or two), and one loop everywhere means what a
benchmark measures is what a run gets. Plain asyncio stands in only if uvloop is missing.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


def run_event_loop(coro: Coroutine[Any, Any, T]) -> T:
    """Run ``coro`` to its end on a new uvloop event loop and return its result (what it
    raises passes through)."""
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is a dependency
        return asyncio.run(coro)
    return uvloop.run(coro)
