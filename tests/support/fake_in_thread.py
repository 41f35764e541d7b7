"""The fake OpenAI server on its own event loop in a background thread, for tests that run the
command line in the test's own thread (``CliRunner``: the CLI starts an event loop of its own)
or as a subprocess while the test waits."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Iterator

from tests.support.fake_openai_server import FakeOpenAIServer


@contextlib.contextmanager
def fake_in_thread(fake: FakeOpenAIServer) -> Iterator[FakeOpenAIServer]:
    """Serve ``fake`` on 127.0.0.1 from a background thread for the block; ``fake.url`` is set
    when the block starts. Its counters (``served``, ``active``) are read across threads:
    plain ints, good enough for polling."""
    loop = asyncio.new_event_loop()
    ready = threading.Event()
    stop: asyncio.Event | None = None

    async def serve() -> None:
        nonlocal stop
        stop = asyncio.Event()
        async with fake.serve():
            ready.set()
            await stop.wait()

    thread = threading.Thread(target=loop.run_until_complete, args=(serve(),), daemon=True)
    thread.start()
    assert ready.wait(10), "the fake server did not start"
    try:
        yield fake
    finally:
        assert stop is not None
        loop.call_soon_threadsafe(stop.set)
        thread.join(10)
        loop.close()
