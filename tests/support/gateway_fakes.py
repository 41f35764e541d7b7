"""In-process fakes for gateway tests: a scriptable OpenAI-style upstream on 127.0.0.1.

Owns :class:`FakeUpstream` (an aiohttp app whose delays, chunk count, gaps, status, extra
headers, raw stream bytes, body and ``/health`` status are set per test, and which records
every request it saw, including when its client disconnected) and
:func:`unaccepting_listener` (a socket whose full backlog makes connects hang, for connect
timeouts). Durations are seconds.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web
from prometheus_client.parser import text_string_to_metric_families

from gateway.config import GatewayConfig
from tests.support.vllm_chunks import DONE, completion_chunk, sse_event


@dataclass
class Behaviour:
    """What the fake answers; a request body's ``fake_delay_s`` overrides the first delay.

    A stream is ``chunks`` token events (vLLM's chunks, ``tests.support.vllm_chunks``, text
    ``"tok{i} "``) then ``data: [DONE]`` (left out when ``send_done`` is false), or, when
    ``stream_writes`` is set, exactly those raw writes; ``chunk_gap_s`` (s) separates writes,
    so a positive gap puts each write in its own read on the gateway side.
    ``stream_content_type`` is the Content-Type of a 200 answer to a streaming request,
    ``body`` replaces the JSON of a non-streaming 200, ``health_status`` is what ``/health``
    answers. ``break_stream`` drops the connection after the writes, before the chunked body's
    end (the gateway sees a broken stream).
    """

    first_chunk_delay_s: float = 0.0
    chunk_gap_s: float = 0.0
    chunks: int = 3
    status: int = 200
    extra_headers: dict[str, str] = field(default_factory=dict)
    send_done: bool = True
    stream_writes: tuple[bytes, ...] | None = None
    stream_content_type: str = "text/event-stream"
    body: bytes | None = None
    health_status: int = 200
    break_stream: bool = False


@dataclass
class Seen:
    """One request as the fake saw it."""

    path: str
    headers: dict[str, str]
    raw_headers: list[tuple[str, str]]
    body: dict[str, Any] | None
    started_s: float
    chunks_sent: int = 0
    completed: bool = False
    disconnected_at_s: float | None = None


class FakeUpstream:
    """A fake vLLM: ``/v1/completions``, ``/v1/chat/completions`` (SSE or JSON), ``/v1/models``."""

    def __init__(self, behaviour: Behaviour | None = None) -> None:
        self.behaviour = behaviour or Behaviour()
        self.seen: list[Seen] = []
        self.url = ""
        self.active = 0
        self.health_checks = 0
        self.changed = asyncio.Event()

    @property
    def count(self) -> int:
        """Requests received so far."""
        return len(self.seen)

    async def wait_for(self, predicate: Any, timeout_s: float = 5.0) -> None:
        """Wait until ``predicate()`` is true (re-checked on every state change)."""
        async with asyncio.timeout(timeout_s):
            while not predicate():
                self.changed.clear()
                await self.changed.wait()

    def _notify(self) -> None:
        self.changed.set()

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_post("/v1/completions", self._generate)
        app.router.add_post("/v1/chat/completions", self._generate)
        app.router.add_get("/v1/models", self._models)
        app.router.add_get("/health", self._health)
        return app

    async def _health(self, request: web.Request) -> web.Response:
        self.health_checks += 1
        return web.Response(status=self.behaviour.health_status)

    async def _models(self, request: web.Request) -> web.Response:
        self._record(request, None)
        return web.json_response({"object": "list", "data": [{"id": "fake-model"}]})

    def _record(self, request: web.Request, body: dict[str, Any] | None) -> Seen:
        seen = Seen(
            path=request.path,
            headers={k.lower(): v for k, v in request.headers.items()},
            raw_headers=list(request.headers.items()),
            body=body,
            started_s=time.monotonic(),
        )
        self.seen.append(seen)
        self._notify()
        return seen

    async def _generate(self, request: web.Request) -> web.StreamResponse:
        raw = await request.read()
        body = json.loads(raw) if raw else {}
        seen = self._record(request, body)
        b = self.behaviour
        delay_s = float(body.get("fake_delay_s", b.first_chunk_delay_s))
        self.active += 1
        try:
            if b.status != 200:
                await asyncio.sleep(delay_s)
                seen.completed = True
                return web.json_response(
                    {"error": {"message": "fake failure", "code": b.status}},
                    status=b.status,
                    headers=b.extra_headers,
                )
            if body.get("stream"):
                return await self._stream(request, seen, delay_s)
            await asyncio.sleep(delay_s + b.chunk_gap_s * max(b.chunks - 1, 0))
            seen.chunks_sent = b.chunks
            seen.completed = True
            if b.body is not None:
                return web.Response(
                    body=b.body, content_type="application/json", headers=b.extra_headers
                )
            text = "".join(f"tok{i} " for i in range(b.chunks))
            return web.json_response({"choices": [{"text": text}]}, headers=b.extra_headers)
        except (asyncio.CancelledError, ConnectionError):
            seen.disconnected_at_s = time.monotonic()
            raise
        finally:
            self.active -= 1
            self._notify()

    async def _stream(self, request: web.Request, seen: Seen, delay_s: float) -> web.StreamResponse:
        b = self.behaviour
        resp = web.StreamResponse(
            headers={"Content-Type": b.stream_content_type, "Cache-Control": "no-cache"}
        )
        resp.headers.update(b.extra_headers)
        await resp.prepare(request)  # headers go out at once, like vLLM
        await asyncio.sleep(delay_s)
        if b.stream_writes is not None:
            writes, tail = list(b.stream_writes), b""
        else:
            last = b.chunks - 1
            writes = [
                sse_event(completion_chunk(f"tok{i} ", 1, i + 1, "length" if i == last else None,
                                           usage=False)).encode()
                for i in range(b.chunks)
            ]  # fmt: skip
            tail = sse_event(DONE).encode() if b.send_done else b""
        for i, data in enumerate(writes):
            if i:
                await asyncio.sleep(b.chunk_gap_s)
            await resp.write(data)
            seen.chunks_sent += 1
            self._notify()
        if b.break_stream and request.transport is not None:
            request.transport.close()
            return resp
        if tail:
            await resp.write(tail)
        await resp.write_eof()
        seen.completed = True
        return resp


@contextlib.asynccontextmanager
async def serve_upstream(fake: FakeUpstream) -> AsyncIterator[FakeUpstream]:
    """Run ``fake`` on a free 127.0.0.1 port with handler cancellation (sees disconnects)."""
    runner = web.AppRunner(fake.app(), handler_cancellation=True, shutdown_timeout=0.5)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    fake.url = f"http://127.0.0.1:{port}"
    try:
        yield fake
    finally:
        await runner.cleanup()


def closed_port() -> int:
    """A 127.0.0.1 port with nothing listening (bound then released)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextlib.contextmanager
def unaccepting_listener() -> Iterator[int]:
    """A 127.0.0.1 port whose accept queue is full: new connects hang (SYNs are dropped)."""
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    fillers: list[socket.socket] = []
    try:
        listener.bind(("127.0.0.1", 0))
        listener.listen(0)
        port = int(listener.getsockname()[1])
        for _ in range(4):  # backlog 0 still queues one or two connections; fill them
            filler = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            filler.setblocking(False)
            fillers.append(filler)
            with contextlib.suppress(BlockingIOError):
                filler.connect(("127.0.0.1", port))
        time.sleep(0.05)
        yield port
    finally:
        for filler in fillers:
            filler.close()
        listener.close()


def sse_events(body: bytes) -> list[str]:
    """The ``data:`` payloads of an SSE body, in order."""
    return [
        line[len("data: ") :] for line in body.decode().split("\n") if line.startswith("data: ")
    ]


def metric_value(exposition: str, name: str, labels: dict[str, str] | None = None) -> float:
    """Value of the sample ``name`` whose labels include ``labels`` (0.0 when absent)."""
    wanted = labels or {}
    for family in text_string_to_metric_families(exposition):
        for sample in family.samples:
            if sample.name == name and all(sample.labels.get(k) == v for k, v in wanted.items()):
                return float(sample.value)
    return 0.0


def gateway_config(*upstreams: str, **overrides: Any) -> GatewayConfig:
    """A test gateway config on 127.0.0.1:0 with short, test-friendly limits (seconds)."""
    base: dict[str, Any] = {
        "upstreams": list(upstreams),
        "host": "127.0.0.1",
        "port": 0,
        "shutdown_timeout_s": 0.5,
        "timeouts": {"connect_s": 2.0, "first_token_s": 5.0, "idle_s": 5.0, "total_s": 10.0},
    }
    return GatewayConfig.model_validate(base).with_overrides(overrides)
