"""An in-process fake of vLLM's streaming ``/v1/completions`` and ``/v1/chat/completions``
for client and phase tests.

Owns :class:`StreamScript` (what the fake answers: TTFT, ITL, tokens per chunk, empty-text and
token-less chunks, a usage trailer, an error event inside a 200, an HTTP error status, a
mid-stream server disconnect, a short generation, no running usage, a whole response buffered
into one write, a last event without its blank line) and :class:`FakeOpenAIServer` (an aiohttp
app on 127.0.0.1, port chosen by the OS, that records every request it saw, how many were in
flight at most, which TCP connections they came on, and when a client disconnected; it also
answers ``GET /health``). Chunks have the exact shape vLLM 0.32 sends with
``stream_options: {include_usage: true, continuous_usage_stats: true}``. Durations are seconds.
Chat streams open as vLLM's do: a role-only chunk (``delta: {role, content: ""}``, usage with
0 completion tokens), optionally followed by an empty chunk, then the token chunks as deltas.

With ``max_concurrent`` N the fake serves at most N requests at a time, first come first
served, the others waiting after their response headers (as vLLM's waiting queue): a server
whose capacity is known, N ÷ (ttft_s + (tokens − 1) × itl_s) requests/s. It also answers
``/v1/models``, ``/version`` and a small ``/metrics`` page (running and waiting requests,
KV-cache facts, a success counter), enough for the orchestrator to attach to it and scrape it.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from tests.support.vllm_chunks import (
    DONE,
    ERROR_EVENT,
    chat_chunk,
    completion_chunk,
    sse_event,
    usage_trailer,
)


@dataclass
class StreamScript:
    """What the fake does with each request.

    Attributes:
        ttft_s: delay between receiving the request and the first token chunk.
        itl_s: delay between successive token chunks.
        chunk_plan: tokens carried by each token chunk; default: one token per chunk up to
            ``max_tokens - short_by_tokens``.
        empty_text_chunks: indices of token chunks whose text is ``""`` (a token that decodes
            to nothing, e.g. half a UTF-8 character); their usage still grows.
        tokenless_after: after token chunk ``i``, send an extra chunk with empty text and an
            unchanged usage (a chunk that carries no token).
        trailer_delay_s: delay before the final usage-only chunk (``choices: []``).
        cached_tokens: ``prompt_tokens_details.cached_tokens`` reported in the trailer.
        status: HTTP status; anything but 200 answers a JSON error body at once.
        error_after_chunks: after this many token chunks, send an error event and ``[DONE]``.
        drop_after_chunks: after this many token chunks, abort the TCP connection.
        short_by_tokens: generate this many tokens fewer than ``max_tokens`` asks.
        prompt_tokens_offset: added to the prompt length reported in the usage.
        continuous_usage: token chunks carry the running usage (vLLM with
            ``continuous_usage_stats``); if false only the final trailer has a usage.
        buffered: hold every event back and write the whole response in one write at the
            end (after the same sleeps), like a proxy that buffers.
        no_final_blank_line: end with the usage trailer without its blank line and without
            ``[DONE]``, then close the response.
        error_event_type: with ``error_after_chunks``, precede the error data with
            ``event: <type>``.
        error_payload: the data of the error event (any payload: a malformed chunk too).
        stall_after_chunks: after this many token chunks, send nothing for ``stall_s``.
        stall_s: length of that stall.
        eol: the line end of every line (``"\n"``, ``"\r\n"`` or a bare ``"\r"``).
        ttft_for: TTFT of each request chosen from its JSON body (replaces ``ttft_s``).
        chat_empty_chunk: chat only: after the role chunk, one more chunk with empty content
            and no new token, before the first token.
        chat_role_delay_s: chat only: the role chunk comes this long after the request (the
            first token still comes after the TTFT).
    """

    ttft_s: float = 0.0
    itl_s: float = 0.0
    chunk_plan: tuple[int, ...] | None = None
    empty_text_chunks: frozenset[int] = frozenset()
    tokenless_after: frozenset[int] = frozenset()
    trailer_delay_s: float = 0.0
    cached_tokens: int = 0
    status: int = 200
    error_after_chunks: int | None = None
    drop_after_chunks: int | None = None
    short_by_tokens: int = 0
    prompt_tokens_offset: int = 0
    continuous_usage: bool = True
    buffered: bool = False
    no_final_blank_line: bool = False
    error_event_type: str | None = None
    error_payload: str = ""
    ttft_for: Callable[[dict[str, Any]], float] | None = None
    stall_after_chunks: int | None = None
    stall_s: float = 0.0
    eol: str = "\n"
    chat_empty_chunk: bool = False
    chat_role_delay_s: float = 0.0


@dataclass
class Seen:
    """One request as the fake saw it (times are ``time.monotonic()`` seconds)."""

    body: dict[str, Any]
    arrived_s: float
    path: str = "/v1/completions"
    headers: dict[str, str] | None = None
    token_chunks_sent: int = 0
    finished: bool = False
    client_gone_s: float | None = None


def fake_prompt_tokens(body: dict[str, Any]) -> int:
    """The prompt length the fake reports: token IDs counted, text in characters (chat: the
    characters of every message's content)."""
    if "messages" in body:
        return sum(len(m["content"]) for m in body["messages"])
    return len(body["prompt"])


class FakeOpenAIServer:
    """A scriptable fake vLLM answering ``POST /v1/completions`` with SSE and ``GET /health``.

    ``connections`` holds the client address (host, port) of every TCP connection a request
    came on, so its size is the number of distinct connections used; ``health_checks``
    counts ``/health`` requests. ``keep_seen=False`` keeps no :class:`Seen` (a long
    benchmark would otherwise hold every prompt it received).
    """

    def __init__(
        self,
        script: StreamScript | None = None,
        keep_seen: bool = True,
        max_concurrent: int | None = None,
    ) -> None:
        self.script = script or StreamScript()
        self.keep_seen = keep_seen
        self.max_concurrent = max_concurrent
        self._slots = asyncio.Semaphore(max_concurrent) if max_concurrent else None
        self.waiting = 0  # requests queued for a slot
        self.completed = 0
        self.served = 0
        self.seen: list[Seen] = []
        self.url = ""
        self.active = 0
        self.max_active = 0
        self.connections: set[tuple[str, int]] = set()
        self.health_checks = 0
        self._changed = asyncio.Event()
        self._runner: web.AppRunner | None = None

    def _notify(self) -> None:
        self._changed.set()

    async def wait_for(self, predicate: Callable[[], bool], timeout_s: float = 5.0) -> None:
        """Wait until ``predicate()`` is true (re-checked whenever a request changes state)."""
        async with asyncio.timeout(timeout_s):
            while not predicate():
                self._changed.clear()
                await self._changed.wait()

    def _plan(self, max_tokens: int) -> list[int]:
        if self.script.chunk_plan is not None:
            return list(self.script.chunk_plan)
        return [1] * (max_tokens - self.script.short_by_tokens)

    def _note_connection(self, request: web.Request) -> None:
        assert request.transport is not None
        peer = request.transport.get_extra_info("peername")
        self.connections.add((str(peer[0]), int(peer[1])))

    async def _health(self, request: web.Request) -> web.Response:
        self._note_connection(request)
        self.health_checks += 1
        return web.Response(text="")

    async def _completions(self, request: web.Request) -> web.StreamResponse:
        self._note_connection(request)
        body = await request.json()
        chat = request.path == "/v1/chat/completions"
        seen = Seen(
            body=body, arrived_s=time.monotonic(), path=request.path, headers=dict(request.headers)
        )
        self.served += 1
        if self.keep_seen:
            self.seen.append(seen)
        self._notify()
        script = self.script
        if script.status != 200:
            return web.json_response(
                {"error": {"message": "fake overload", "type": "X", "param": None, "code": 0}},
                status=script.status,
            )
        self.active += 1
        self.max_active = max(self.max_active, self.active)
        in_flight = True
        prompt = fake_prompt_tokens(body) + script.prompt_tokens_offset
        plan = self._plan(int(body["max_completion_tokens" if chat else "max_tokens"]))
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        held: list[bytes] = []  # events held back by a buffering response

        async def send(data: str, event: str | None = None, lines_ended: int = 2) -> None:
            line = sse_event(data, event, script.eol, lines_ended)
            if script.buffered:
                held.append(line.encode())
            else:
                await resp.write(line.encode())

        slot_held = False
        try:
            await resp.prepare(request)
            if self._slots is not None:
                self.waiting += 1
                try:
                    await self._slots.acquire()
                finally:
                    self.waiting -= 1
                slot_held = True
            ttft = script.ttft_for(body) if script.ttft_for else script.ttft_s
            usage = script.continuous_usage
            if chat:  # vLLM's opening chunks: the role, then (scripted) an empty one
                await asyncio.sleep(min(script.chat_role_delay_s, ttft))
                await send(chat_chunk({"role": "assistant", "content": ""}, prompt, 0, None, usage))
                if script.chat_empty_chunk:
                    await send(chat_chunk({"content": ""}, prompt, 0, None, usage))
                ttft -= min(script.chat_role_delay_s, ttft)
            await asyncio.sleep(ttft)
            done = 0
            for i, tokens in enumerate(plan):
                if i:
                    await asyncio.sleep(script.itl_s)
                if script.error_after_chunks == i:
                    await send(script.error_payload or ERROR_EVENT, script.error_event_type)
                    await send(DONE)
                    await resp.write(b"".join(held))
                    return resp
                if script.stall_after_chunks == i:
                    await asyncio.sleep(script.stall_s)
                if script.drop_after_chunks == i:
                    assert request.transport is not None
                    request.transport.abort()
                    return resp
                done += tokens
                text = "" if i in script.empty_text_chunks else "~" * tokens
                finish = "length" if i == len(plan) - 1 else None
                if chat:
                    await send(chat_chunk({"content": text}, prompt, done, finish, usage))
                else:
                    await send(completion_chunk(text, prompt, done, finish, usage))
                seen.token_chunks_sent += 1
                self._notify()
                if i in script.tokenless_after:
                    await send(completion_chunk("", prompt, done, None, usage))
            await asyncio.sleep(script.trailer_delay_s)
            trailer = usage_trailer(prompt, done, script.cached_tokens)
            if script.no_final_blank_line:
                await send(trailer, lines_ended=1)  # one newline ends the line, not the event
            else:
                await send(trailer)
            # No longer in flight from here: the client can only start its next request after
            # reading [DONE], so ``max_active`` never counts a finished request.
            self.active -= 1
            in_flight = False
            if not script.no_final_blank_line:
                await send(DONE)
            if held:
                await resp.write(b"".join(held))
            await resp.write_eof()
            seen.finished = True
            self.completed += 1
        except ConnectionResetError:
            seen.client_gone_s = time.monotonic()
        finally:
            if in_flight:
                self.active -= 1
            if slot_held and self._slots is not None:
                self._slots.release()
            self._notify()
        return resp

    async def _models(self, request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{"id": "m", "object": "model"}]})

    async def _version(self, request: web.Request) -> web.Response:
        return web.json_response({"version": "fake"})

    async def _metrics(self, request: web.Request) -> web.Response:
        labels = 'engine="0",model_name="m"'
        running = self.active - self.waiting
        page = (
            "# TYPE vllm:num_requests_running gauge\n"
            f"vllm:num_requests_running{{{labels}}} {float(running)}\n"
            "# TYPE vllm:num_requests_waiting gauge\n"
            f"vllm:num_requests_waiting{{{labels}}} {float(self.waiting)}\n"
            "# TYPE vllm:kv_cache_usage_perc gauge\n"
            f"vllm:kv_cache_usage_perc{{{labels}}} 0.0\n"
            "# TYPE vllm:num_preemptions counter\n"
            f"vllm:num_preemptions_total{{{labels}}} 0.0\n"
            "# TYPE vllm:request_success counter\n"
            f'vllm:request_success_total{{{labels},finished_reason="length"}} '
            f"{float(self.completed)}\n"
            "# TYPE vllm:cache_config_info gauge\n"
            'vllm:cache_config_info{block_size="16",engine="0",num_gpu_blocks="4096",'
            'kv_cache_memory_bytes="1073741824"} 1.0\n'
        )
        return web.Response(text=page, content_type="text/plain")

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_post("/v1/completions", self._completions)
        app.router.add_post("/v1/chat/completions", self._completions)
        app.router.add_get("/health", self._health)
        app.router.add_get("/v1/models", self._models)
        app.router.add_get("/version", self._version)
        app.router.add_get("/metrics", self._metrics)
        return app

    async def stop(self) -> None:
        """Stop listening and drop every connection at once (a server that died)."""
        if self._runner is not None:
            runner, self._runner = self._runner, None
            await runner.cleanup()

    @contextlib.asynccontextmanager
    async def serve(self) -> AsyncIterator[FakeOpenAIServer]:
        """Listen on 127.0.0.1 (OS-chosen port) for the duration of the block."""
        runner = self._runner = web.AppRunner(self.app())
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        host, port = runner.addresses[0][:2]
        self.url = f"http://{host}:{port}"
        try:
            yield self
        finally:
            await self.stop()
