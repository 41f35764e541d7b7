"""The load generator's HTTP connection pool: session, per-request tracing, warm-up.

Where a TTFT goes before the server sees the request: waiting for a connection (a TCP
connect when none is idle) and writing the request. aiohttp's request tracing
(``TraceConfig`` signals) stamps those moments into the request's record; it fires a handful
of times per request and never per response chunk. A warm-up before each phase opens the
connections the phase will hold, so no request's TTFT includes a connect (64
connections opened at once once put 37 ms of set-up into the first TTFTs).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterable
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Protocol

import aiohttp

from loadgen.clock import Clock
from loadgen.records import RequestRecord

#: Seconds an idle pooled connection is kept. Below uvicorn's keep-alive timeout (vLLM:
#: ``VLLM_HTTP_TIMEOUT_KEEP_ALIVE``, 5 s), so the client never sends on a connection the
#: server is closing at that moment; a longer idle gap costs a fresh connect instead.
KEEPALIVE_S = 4.0


class TraceSink(Protocol):
    """What a request passes as aiohttp's ``trace_request_ctx`` to receive its stamps."""

    def connection_ready(self, new: bool) -> None: ...

    def request_written(self) -> None: ...


class RecordTrace:
    """Writes a request's connection and write stamps into its :class:`RequestRecord`."""

    __slots__ = ("clock", "record")

    def __init__(self, record: RequestRecord, clock: Clock) -> None:
        self.record = record
        self.clock = clock

    def connection_ready(self, new: bool) -> None:
        self.record.connection_ready_ns = self.clock.now_ns()
        self.record.new_connection = new

    def request_written(self) -> None:
        # Fires before the headers and before each body chunk is written (aiohttp coalesces
        # headers with the first chunk); the last call is the last write of the request.
        self.record.request_sent_ns = self.clock.now_ns()


def _sink(ctx: SimpleNamespace) -> TraceSink | None:
    sink = getattr(ctx, "trace_request_ctx", None)
    return sink if hasattr(sink, "connection_ready") else None


async def _on_new_connection(_s: object, ctx: SimpleNamespace, _p: object) -> None:
    if (sink := _sink(ctx)) is not None:
        sink.connection_ready(True)


async def _on_reused_connection(_s: object, ctx: SimpleNamespace, _p: object) -> None:
    if (sink := _sink(ctx)) is not None:
        sink.connection_ready(False)


async def _on_written(_s: object, ctx: SimpleNamespace, _p: object) -> None:
    if (sink := _sink(ctx)) is not None:
        sink.request_written()


def request_trace_config() -> aiohttp.TraceConfig:
    """Tracing that fills ``connection_ready_ns``, ``new_connection`` and ``request_sent_ns``.

    Signals used (aiohttp ``TraceConfig``): ``on_connection_create_end`` (new connection),
    ``on_connection_reuseconn`` (pooled one), ``on_request_headers_sent`` and
    ``on_request_chunk_sent`` (the request written). None fires per response chunk.
    """
    config = aiohttp.TraceConfig()
    config.on_connection_create_end.append(_on_new_connection)
    config.on_connection_reuseconn.append(_on_reused_connection)
    config.on_request_headers_sent.append(_on_written)
    config.on_request_chunk_sent.append(_on_written)
    return config


def open_session(
    read_timeout_s: float,
    connect_timeout_s: float = 10.0,
    trace: bool = True,
    pool_limit: int = 0,
    total_timeout_s: float | None = None,
) -> aiohttp.ClientSession:
    """The session load is sent with: a pool of ``pool_limit`` connections, :data:`KEEPALIVE_S`,
    request tracing.

    ``pool_limit`` is the most connections open at once, 0 for no limit; callers set it from
    the requested concurrency (:func:`pool_limit`), never below it, so the pool can never
    silently cap the load (aiohttp's default is 100: 128 requested streams would run 100 at
    a time). ``read_timeout_s`` bounds the silence between two reads of a response (a stall;
    also the wait for the headers); ``total_timeout_s`` (``None``: none) bounds one request
    from send to its last byte; ``connect_timeout_s`` bounds one TCP connect.
    Use as ``async with open_session(...) as session``.
    """
    timeout = aiohttp.ClientTimeout(
        total=total_timeout_s, sock_connect=connect_timeout_s, sock_read=read_timeout_s
    )
    connector = aiohttp.TCPConnector(limit=pool_limit, keepalive_timeout=KEEPALIVE_S)
    return aiohttp.ClientSession(
        timeout=timeout,
        connector=connector,
        trace_configs=[request_trace_config()] if trace else None,
    )


def pool_limit(concurrencies: Iterable[int | None]) -> int:
    """The connection-pool limit for phases with these requested in-flight counts: the
    largest, or 0 (no limit) when one is unbounded (``None``: an uncapped open loop)."""
    values = list(concurrencies)
    if any(c is None for c in values):
        return 0
    return max((c for c in values if c is not None), default=0)


@dataclass(frozen=True)
class WarmUp:
    """What a warm-up did.

    Attributes:
        connections: connections asked to be open at once.
        opened: how many of them were newly connected (the rest were idle in the pool);
            ``None`` when the session has no request tracing.
        failed: warm-up requests that got no HTTP response (any status counts as one).
        duration_ms: wall time of the warm-up, ms.
    """

    connections: int
    opened: int | None
    failed: int
    duration_ms: float


class _WarmupTrace:
    def __init__(self) -> None:
        self.new = 0
        self.reused = 0

    def connection_ready(self, new: bool) -> None:
        if new:
            self.new += 1
        else:
            self.reused += 1

    def request_written(self) -> None:
        pass


async def warm_up(
    session: aiohttp.ClientSession,
    base_url: str,
    connections: int,
    clock: Clock,
    path: str = "/health",
    timeout_s: float = 10.0,
) -> WarmUp:
    """Hold ``connections`` keep-alive connections open at once, then return them to the pool.

    Each one sends ``GET {base_url}{path}`` and reads the answer (any status: a 404 from a
    server without ``/health`` still leaves a warm connection), then waits until every
    other one has answered, so all of them are in use together and the pool must open
    distinct connections. Failures are counted, never raised; after ``timeout_s`` the
    warm-up gives up on whatever is still pending.
    """
    if connections <= 0:
        return WarmUp(0, 0, 0, 0.0)
    trace = _WarmupTrace()
    everyone = asyncio.Event()
    answered = 0
    settled = 0

    async def one() -> None:
        nonlocal answered, settled
        try:
            async with session.get(f"{base_url}{path}", trace_request_ctx=trace) as response:
                # Read to the end (the connection stays reusable) without holding the body.
                async for _ in response.content.iter_chunked(2**16):
                    pass
                answered += 1
                settled += 1
                if settled == connections:
                    everyone.set()
                await everyone.wait()  # keep this connection busy until all are open
        except (aiohttp.ClientError, OSError, TimeoutError):
            settled += 1
            if settled == connections:
                everyone.set()

    began = clock.now_ns()
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(timeout_s):
            await asyncio.gather(*(one() for _ in range(connections)))
    traced = trace.new + trace.reused > 0 or answered == 0
    return WarmUp(
        connections=connections,
        opened=trace.new if traced else None,
        failed=connections - answered,
        duration_ms=round((clock.now_ns() - began) / 1e6, 3),
    )
