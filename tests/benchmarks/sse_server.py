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
- written like vLLM writes: **one SSE event per transport write**, each stream's events paced
  by one scheduler (:class:`Pacer`) the way an engine step hands each running request its
  token. ``GET /_config?ttft_ms=&itl_ms=&spin=&spread=&whole=&writes=`` sets it up:
  stream ``key`` starts ``ttft_ms`` after its request was read (plus, with ``spread=1``,
  a phase offset of ``frac(key·φ)·ITL`` so that streams sent together do not write in
  lockstep), then writes its ``k``-th event (0-based) on the **absolute** deadline
  ``start + k·ITL`` (:func:`deadlines`: a late write does not delay the next one).
  ``itl_ms`` may be a comma list (``10,20``): stream ``key`` gets ``itl[key % len]``.
  With ITL 0 every stream writes one event per scheduler step (one pass over the due
  streams, then the loop reads and writes what is pending): the most events per second a
  server that writes like vLLM can send. ``whole=1`` instead writes each whole response in
  one transport write: the *parser ceiling*, a pattern no real server produces.
- its own timing log, monotonic ns on the clock the client stamps with (CLOCK_MONOTONIC is one
  clock for every process of the machine): per request the moment it was read whole, its
  stream's start and ITL, its first and last token-chunk writes and (``writes=1``, the
  default) the write time of every token event; keyed by the prompt's first token ID (the
  benchmarks make it the request's index). ``GET /_log`` returns and clears it.
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
import heapq
import json
import os
import re
import sys
import time
from collections.abc import Callable
from pathlib import Path
from urllib.parse import parse_qs

_MAX_TOKENS = re.compile(rb'"max_tokens"\s*:\s*(\d+)')
_PROMPT = re.compile(rb'"prompt"\s*:\s*\[([^\]]*)\]')
_CONTINUOUS = re.compile(rb'"continuous_usage_stats"\s*:\s*true')

#: Event-loop timers are ms-grained: sleep to this long before a deadline, then spin.
_SPIN_NS = 2_000_000
#: The golden ratio's fractional part: frac(key·φ) spreads any run of consecutive keys
#: evenly over [0, 1) (each new key falls in the largest gap left).
_PHI = 0.6180339887498949
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


# -- the schedule (pure) -----------------------------------------------------------------------


def stream_itl_ns(key: int, itls_ns: tuple[int, ...]) -> int:
    """The ITL (ns) of stream ``key``: ``itls_ns[key % len(itls_ns)]``."""
    return itls_ns[key % len(itls_ns)]


def phase_offset_ns(key: int, itl_ns: int) -> int:
    """Stream ``key``'s phase within its ITL (ns): ``frac(key·φ)·itl_ns``, in [0, itl_ns)."""
    return int(((key * _PHI) % 1.0) * itl_ns)


def stream_start_ns(
    read_ns: int, key: int, ttft_ns: int, itls_ns: tuple[int, ...], spread: bool
) -> int:
    """When stream ``key`` (request read at ``read_ns``) writes its first token event:
    ``read_ns + ttft_ns`` plus, with ``spread``, its phase offset."""
    phase = phase_offset_ns(key, stream_itl_ns(key, itls_ns)) if spread else 0
    return read_ns + ttft_ns + phase


def deadline_ns(start_ns: int, itl_ns: int, k: int) -> int:
    """Absolute deadline of token event ``k`` (0-based): ``start_ns + k·itl_ns``; never
    relative to the previous write, so lateness does not accumulate."""
    return start_ns + k * itl_ns


def deadlines(start_ns: int, itl_ns: int, n: int) -> list[int]:
    """The deadlines of a stream's ``n`` token events (ns)."""
    return [deadline_ns(start_ns, itl_ns, k) for k in range(n)]


# -- serving -----------------------------------------------------------------------------------


def _response(status: str, body: bytes, content_type: bytes = b"text/plain") -> bytes:
    return b"HTTP/1.1 %s\r\ncontent-type: %s\r\ncontent-length: %d\r\n\r\n%s" % (
        status.encode(),
        content_type,
        len(body),
        body,
    )


class State:
    """What every connection shares: the pacing, the timing log, the metrics page."""

    def __init__(self, metrics_page: bytes) -> None:
        self.ttft_ns = 0
        self.itls_ns: tuple[int, ...] = (0,)
        self.spin = True  # spin to each deadline (precise); off when sharing a core
        self.spread = False  # spread the streams' phases over their ITL
        self.whole = False  # the parser ceiling: each response in one write
        self.log_writes = True  # keep every token event's write time
        self.log: list[dict[str, object]] = []
        self.served = 0
        self.metrics_page = metrics_page
        self.pacer = Pacer(time.monotonic_ns)


class Stream:
    """One streamed response: its schedule, where it is, and its write log."""

    __slots__ = (
        "first_ns",
        "itl_ns",
        "k",
        "key",
        "last_ns",
        "n",
        "prompt",
        "proto",
        "read_ns",
        "start_ns",
        "usage",
        "writes",
    )  # fmt: skip

    def __init__(
        self, proto: StreamProtocol, key: int, n: int, prompt: int, usage: bool,
        read_ns: int, start_ns: int, itl_ns: int, log_writes: bool = True,
    ) -> None:  # fmt: skip
        self.proto = proto
        self.key, self.n, self.prompt, self.usage = key, n, prompt, usage
        self.read_ns, self.start_ns, self.itl_ns = read_ns, start_ns, itl_ns
        self.k = 0  # next token event (0-based)
        self.writes: list[int] | None = [] if log_writes else None
        self.first_ns = self.last_ns = 0

    def due_ns(self) -> int:
        """The deadline of the next token event."""
        return deadline_ns(self.start_ns, self.itl_ns, self.k)


class Pacer:
    """The one scheduler of every stream, as an engine's step loop: a heap of (deadline,
    sequence, stream). Each step writes one token event to every stream whose deadline has
    passed (one transport write each, stamped just before it), then yields to the loop. It
    sleeps (a timer, woken early when a stream with an earlier deadline arrives) until 2 ms
    before the next deadline and spins from there (``spin``; without, the timer alone)."""

    def __init__(self, now_ns: Callable[[], int]) -> None:
        self.now_ns = now_ns
        self.heap: list[tuple[int, int, Stream]] = []
        self.seq = 0
        self.spin = True
        self._wake: asyncio.Future[None] | None = None
        self._wake_at = 0

    def add(self, stream: Stream) -> None:
        """Schedule ``stream``'s next event; wake the sleeping scheduler if it is earlier."""
        due = stream.due_ns()
        self.seq += 1
        heapq.heappush(self.heap, (due, self.seq, stream))
        wake = self._wake
        if wake is not None and not wake.done() and due < self._wake_at:
            wake.set_result(None)

    def step(self) -> int:
        """Write one event to every stream that is due now; the number written."""
        now = self.now_ns()
        heap = self.heap
        batch = []
        while heap and heap[0][0] <= now:
            batch.append(heapq.heappop(heap)[2])
        for stream in batch:
            self._write(stream)
        return len(batch)

    def _write(self, s: Stream) -> None:
        proto = s.proto
        if proto.closed:
            proto.finished(None)
            return
        if not proto.writable:
            proto.parked = s  # resume_writing adds it back
            return
        transport = proto.transport
        assert transport is not None
        s.k += 1
        at = self.now_ns()
        transport.write(_chunked(token_chunk(s.k, s.n, s.prompt, s.usage)))
        s.last_ns = at
        s.first_ns = s.first_ns or at
        if s.writes is not None:
            s.writes.append(at)
        if s.k < s.n:
            self.add(s)
        else:
            transport.write(_chunked(_TRAILER % (s.prompt, s.prompt + s.n, s.n)) + b"0\r\n\r\n")
            proto.finished(s)

    async def _sleep_until(self, due_ns: int) -> None:
        loop = asyncio.get_running_loop()
        self._wake = wake = loop.create_future()
        self._wake_at = due_ns
        handle = loop.call_later(max(due_ns - self.now_ns(), 0) / 1e9, _resolve, wake)
        try:
            await wake
        finally:
            handle.cancel()
            self._wake = None

    async def run(self) -> None:
        """Step for ever: each step, then a yield to the loop (reads, new requests)."""
        while True:
            if not self.heap:
                await self._sleep_until(self.now_ns() + 3_600_000_000_000)
                continue
            left = self.heap[0][0] - self.now_ns()
            if left > 0:
                if not self.spin:
                    await self._sleep_until(self.heap[0][0])
                elif left > _SPIN_NS:
                    await self._sleep_until(self.heap[0][0] - _SPIN_NS)
                else:
                    await asyncio.sleep(0)
                continue
            self.step()
            await asyncio.sleep(0)


def _resolve(fut: asyncio.Future[None]) -> None:
    if not fut.done():
        fut.set_result(None)


class StreamProtocol(asyncio.Protocol):
    """One keep-alive connection: requests in order, one response at a time."""

    def __init__(self, state: State) -> None:
        self.state = state
        self.buffer = bytearray()
        self.transport: asyncio.Transport | None = None
        self.busy = False  # a streamed response is being written
        self.writable = True
        self.parked: Stream | None = None  # its stream, waiting for the socket to drain
        self.closed = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # uvloop's is no subclass

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.resume_writing()

    def pause_writing(self) -> None:
        self.writable = False

    def resume_writing(self) -> None:
        self.writable = True
        parked, self.parked = self.parked, None
        if parked is not None:
            self.state.pacer.add(parked)

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        if not self.busy:
            self._next()

    def finished(self, stream: Stream | None) -> None:
        """The streamed response is written (``stream``) or abandoned (``None``); next one."""
        state = self.state
        if stream is not None:
            state.served += 1
            entry: dict[str, object] = {
                "key": stream.key, "read_ns": stream.read_ns, "start_ns": stream.start_ns,
                "itl_ns": stream.itl_ns, "first_write_ns": stream.first_ns,
                "last_write_ns": stream.last_ns, "tokens": stream.n,
            }  # fmt: skip
            if state.log_writes:
                entry["writes_ns"] = stream.writes
            state.log.append(entry)
        self.busy = False
        if self.buffer and not self.closed:
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
            self._start(body, state.pacer.now_ns())
            return
        if path == "/health":
            out = _response("200 OK", b"")
        elif path == "/metrics":
            out = _response("200 OK", state.metrics_page, b"text/plain; version=0.0.4")
        elif path == "/_config":
            args = {k: v[0] for k, v in parse_qs(query).items()}
            state.ttft_ns = int(float(args.get("ttft_ms", 0)) * 1e6)
            state.itls_ns = tuple(int(float(x) * 1e6) for x in args.get("itl_ms", "0").split(","))
            state.spin = state.pacer.spin = bool(int(args.get("spin", 1)))
            state.spread = bool(int(args.get("spread", 0)))
            state.whole = bool(int(args.get("whole", 0)))
            state.log_writes = bool(int(args.get("writes", 1)))
            out = _response("200 OK", b"{}", b"application/json")
        elif path == "/_log":
            log, state.log = state.log, []
            out = _response("200 OK", json.dumps(log).encode(), b"application/json")
        elif path == "/_stats":
            times = os.times()
            stats = {"cpu_s": times.user + times.system, "served": state.served}
            out = _response("200 OK", json.dumps(stats).encode(), b"application/json")
        else:
            out = _response("404 Not Found", b"")
        self.transport.write(out)

    def _start(self, body: bytes, read_ns: int) -> None:
        """Begin the response to a completion request: whole (the parser ceiling) or as a
        stream handed to the pacer."""
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
        if state.whole:
            chunks = [_chunked(token_chunk(i, n, prompt, usage)) for i in range(1, n + 1)]
            at = state.pacer.now_ns()
            transport.write(_SSE_HEAD + b"".join(chunks) + trailer)
            state.served += 1
            state.log.append({"key": key, "read_ns": read_ns, "start_ns": at, "itl_ns": 0,
                              "first_write_ns": at, "last_write_ns": at, "tokens": n})  # fmt: skip
            return
        self.busy = True
        transport.write(_SSE_HEAD)
        start = stream_start_ns(read_ns, key, state.ttft_ns, state.itls_ns, state.spread)
        itl = stream_itl_ns(key, state.itls_ns)
        state.pacer.add(Stream(self, key, n, prompt, usage, read_ns, start, itl, state.log_writes))


async def serve(metrics_page: bytes, port: int = 0) -> None:
    """Listen on 127.0.0.1:``port``, print the URL, serve until stdin closes."""
    state = State(metrics_page)
    loop = asyncio.get_running_loop()
    pacer = loop.create_task(state.pacer.run())
    server = await loop.create_server(
        lambda: StreamProtocol(state), "127.0.0.1", port, backlog=4096
    )
    bound = server.sockets[0].getsockname()[1]
    print(f"http://127.0.0.1:{bound}", flush=True)
    await loop.run_in_executor(None, sys.stdin.read)
    pacer.cancel()
    server.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--metrics-page", type=Path)
    parser.add_argument("--port", type=int, default=0)
    args = parser.parse_args()
    page = args.metrics_page.read_bytes() if args.metrics_page else b""
    from server.net.loop import run_event_loop

    run_event_loop(serve(page, args.port))


if __name__ == "__main__":
    main()
