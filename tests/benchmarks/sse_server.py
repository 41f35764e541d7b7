"""The benchmarks' fake vLLM: a raw asyncio protocol server, run in its own process.

Why not the aiohttp fake (``tests.support.fake_openai_server``): a benchmark of the client
must never be limited by its server, and aiohttp's server costs tens of µs per chunk. Its
chunks are the shared renderer's (``tests.support.vllm_chunks``). This one answers
``POST /v1/completions`` with vLLM 0.32's exact SSE chunks (HTTP/1.1 chunked transfer
encoding, as uvicorn sends them), keep-alive, and nothing else it does not need:

- streaming: ``max_tokens`` token chunks (one token each, text ``"~"``), the last with
  ``finish_reason: "length"``, then the usage trailer (``choices: []``) and ``[DONE]``. A
  running usage is on every token chunk only when the request asks
  ``continuous_usage_stats`` (as vLLM does); prompt length = the prompt's token-ID count.
- delays (``GET /_config?ttft_ms=&itl_ms=&spin=``): first token ``ttft_ms`` after the request was
  read, then one chunk every ``itl_ms``, on absolute deadlines (no drift). With both 0 the
  whole response is written at once (the fastest a server can answer).
- its own timing log, monotonic ns on the clock the client stamps with (CLOCK_MONOTONIC is one
  clock for every process of the machine): per request the moment it was read whole, its first
  and last token-chunk writes; keyed by the prompt's first token ID (the benchmarks make it
  the request's index). ``GET /_log`` returns and clears it.
- ``GET /_stats``: the process's CPU seconds (user + system) and requests served, so a
  benchmark can show what share of its core the server used.
- ``GET /health`` (200, empty) and ``GET /metrics`` (the page given with ``--metrics-page``).

Request bodies must come with ``Content-Length`` (aiohttp, nginx and the gateway all send it).
Run: ``python sse_server.py [--metrics-page FILE]``; prints ``http://127.0.0.1:PORT`` and
serves until its stdin closes.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import sys
import time
from pathlib import Path
from urllib.parse import parse_qs

_MAX_TOKENS = re.compile(rb'"max_tokens"\s*:\s*(\d+)')
_PROMPT = re.compile(rb'"prompt"\s*:\s*\[([^\]]*)\]')
_CONTINUOUS = re.compile(rb'"continuous_usage_stats"\s*:\s*true')

_SPIN_NS = 2_000_000
_SSE_HEAD = (
    b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream; charset=utf-8\r\n"
    b"transfer-encoding: chunked\r\n\r\n"
)


#: The repository root, so the shared renderer imports when this runs as a script.
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
_ID = "cmpl-bench"


def _templates() -> tuple[bytes, bytes, bytes]:
    """The token chunk (``%s`` finish reason, ``%s`` usage), the running usage (``%d`` prompt,
    total, completion) and the trailer with ``[DONE]`` (the same three), as byte templates
    built once from the shared renderer (``tests.support.vllm_chunks``): rendering each chunk
    with json would cost the server more per chunk than the clients it measures."""
    from tests.support.vllm_chunks import DONE, completion_chunk, sse_event, usage_trailer

    choice = sse_event(completion_chunk("~", 0, 0, None, usage=False, completion_id=_ID))
    choice = choice.replace('"finish_reason":null', '"finish_reason":%s').replace("]}\n", "]%s}\n")
    with_usage = completion_chunk("~", 1000001, 2000002, None, completion_id=_ID)
    usage = with_usage[with_usage.index(',"usage"') : -1]
    trailer = sse_event(usage_trailer(1000001, 2000002, 0, completion_id=_ID)) + sse_event(DONE)
    numbers = {"1000001": "%d", "3000003": "%d", "2000002": "%d"}
    for value, slot in numbers.items():
        usage, trailer = usage.replace(value, slot), trailer.replace(value, slot)
    return choice.encode(), usage.encode(), trailer.encode()


_CHOICE, _USAGE, _TRAILER = _templates()


def _chunked(payload: bytes) -> bytes:
    """One HTTP/1.1 chunk holding ``payload``."""
    return b"%x\r\n%s\r\n" % (len(payload), payload)


def token_chunk(i: int, n: int, prompt: int, usage: bool) -> bytes:
    """The SSE event of token ``i`` (1-based) of ``n``, as vLLM 0.32 streams it."""
    finish = b'"length"' if i == n else b"null"
    tail = _USAGE % (prompt, prompt + i, i) if usage else b""
    return _CHOICE % (finish, tail)


def _response(status: str, body: bytes, content_type: bytes = b"text/plain") -> bytes:
    return b"HTTP/1.1 %s\r\ncontent-type: %s\r\ncontent-length: %d\r\n\r\n%s" % (
        status.encode(),
        content_type,
        len(body),
        body,
    )


class State:
    """What every connection shares: the delays, the timing log, the metrics page."""

    def __init__(self, metrics_page: bytes) -> None:
        self.ttft_ns = 0
        self.itl_ns = 0
        self.spin = True  # spin to each deadline (precise); off when sharing a core
        self.log: list[tuple[int, int, int, int, int]] = []  # key, read, first, last, tokens
        self.served = 0
        self.metrics_page = metrics_page


class StreamProtocol(asyncio.Protocol):
    """One keep-alive connection: requests in order, one response at a time."""

    def __init__(self, state: State) -> None:
        self.state = state
        self.buffer = bytearray()
        self.transport: asyncio.Transport | None = None
        self.busy = False  # a streamed response is being written
        self.writable = asyncio.Event()
        self.writable.set()
        self.closed = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # uvloop's is no subclass

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.writable.set()

    def pause_writing(self) -> None:
        self.writable.clear()

    def resume_writing(self) -> None:
        self.writable.set()

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        if not self.busy:
            self._next()

    def _next(self) -> None:
        """Handle every whole request in the buffer until one needs to stream."""
        while not self.busy and not self.closed:
            end = self.buffer.find(b"\r\n\r\n")
            if end < 0:
                return
            head = bytes(self.buffer[:end]).decode("latin-1").split("\r\n")
            length = 0
            for line in head[1:]:
                name, _, value = line.partition(":")
                if name.strip().lower() == "content-length":
                    length = int(value)
            if len(self.buffer) < end + 4 + length:
                return
            body = bytes(self.buffer[end + 4 : end + 4 + length])
            del self.buffer[: end + 4 + length]
            method, target, _ = head[0].split(" ", 2)
            self._handle(method, target, body)

    def _handle(self, method: str, target: str, body: bytes) -> None:
        assert self.transport is not None
        path, _, query = target.partition("?")
        state = self.state
        if method == "POST" and path == "/v1/completions":
            self.busy = True
            read_ns = time.monotonic_ns()
            asyncio.get_running_loop().create_task(self._stream(body, read_ns))
            return
        if path == "/health":
            out = _response("200 OK", b"")
        elif path == "/metrics":
            out = _response("200 OK", state.metrics_page, b"text/plain; version=0.0.4")
        elif path == "/_config":
            args = {k: float(v[0]) for k, v in parse_qs(query).items()}
            state.ttft_ns = int(args.get("ttft_ms", 0) * 1e6)
            state.itl_ns = int(args.get("itl_ms", 0) * 1e6)
            state.spin = bool(args.get("spin", 1))
            out = _response("200 OK", b"{}", b"application/json")
        elif path == "/_log":
            log, state.log = state.log, []
            keys = ("key", "read_ns", "first_write_ns", "last_write_ns", "tokens")
            payload = json.dumps([dict(zip(keys, row, strict=True)) for row in log])
            out = _response("200 OK", payload.encode(), b"application/json")
        elif path == "/_stats":
            times = os.times()
            stats = {"cpu_s": times.user + times.system, "served": state.served}
            out = _response("200 OK", json.dumps(stats).encode(), b"application/json")
        else:
            out = _response("404 Not Found", b"")
        self.transport.write(out)

    async def _stream(self, body: bytes, read_ns: int) -> None:
        state = self.state
        transport = self.transport
        assert transport is not None
        found = _MAX_TOKENS.search(body)
        n = int(found.group(1)) if found else 16
        prompt_ids = _PROMPT.search(body)
        ids = prompt_ids.group(1) if prompt_ids else b""
        prompt = ids.count(b",") + 1 if ids.strip() else 0
        key = int(ids.split(b",", 1)[0]) if ids.strip() else -1
        usage = _CONTINUOUS.search(body) is not None
        trailer = _chunked(_TRAILER % (prompt, prompt + n, n)) + b"0\r\n\r\n"
        first_ns = last_ns = 0
        try:
            if state.ttft_ns == 0 and state.itl_ns == 0:
                chunks = [_chunked(token_chunk(i, n, prompt, usage)) for i in range(1, n + 1)]
                first_ns = last_ns = time.monotonic_ns()
                transport.write(_SSE_HEAD + b"".join(chunks) + trailer)
            else:
                transport.write(_SSE_HEAD)
                for i in range(1, n + 1):
                    due_ns = read_ns + state.ttft_ns + (i - 1) * state.itl_ns
                    await _until(due_ns, state.spin)
                    if not self.writable.is_set():
                        await self.writable.wait()
                    if self.closed:
                        return
                    last_ns = time.monotonic_ns()
                    first_ns = first_ns or last_ns
                    transport.write(_chunked(token_chunk(i, n, prompt, usage)))
                transport.write(trailer)
            state.served += 1
            state.log.append((key, read_ns, first_ns, last_ns, n))
            if not self.writable.is_set():
                await self.writable.wait()
        finally:
            self.busy = False
        if self.buffer and not self.closed:
            self._next()


async def _until(due_ns: int, spin: bool) -> None:
    """Wait until ``due_ns`` (monotonic): a timer to 2 ms before it (event-loop timers are
    ms-grained), then yield to the loop until it has passed. The spinning costs only this
    process's own core and puts writes within tens of µs of their deadline; without
    ``spin`` the timer alone (up to ~1 ms late)."""
    left_ns = due_ns - time.monotonic_ns()
    if not spin:
        if left_ns > 0:
            await asyncio.sleep(left_ns / 1e9)
        return
    if left_ns > _SPIN_NS:
        await asyncio.sleep((left_ns - _SPIN_NS) / 1e9)
    while time.monotonic_ns() < due_ns:
        await asyncio.sleep(0)


async def serve(metrics_page: bytes, port: int = 0) -> None:
    """Listen on 127.0.0.1:``port``, print the URL, serve until stdin closes."""
    state = State(metrics_page)
    loop = asyncio.get_running_loop()
    server = await loop.create_server(
        lambda: StreamProtocol(state), "127.0.0.1", port, backlog=4096
    )
    bound = server.sockets[0].getsockname()[1]
    print(f"http://127.0.0.1:{bound}", flush=True)
    await loop.run_in_executor(None, sys.stdin.read)
    server.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--metrics-page", type=Path)
    parser.add_argument("--port", type=int, default=0)
    args = parser.parse_args()
    page = args.metrics_page.read_bytes() if args.metrics_page else b""
    try:
        import uvloop

        uvloop.run(serve(page, args.port))
    except ImportError:  # pragma: no cover - uvloop is a dependency
        asyncio.run(serve(page, args.port))


if __name__ == "__main__":
    main()
