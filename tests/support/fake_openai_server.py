"""The one in-process fake of vLLM's OpenAI server, for the client's, the phases' and the
gateway's tests (the benchmarks' raw-protocol server, ``tests/benchmarks/sse_server.py``, is
the only other, for speed).

Owns :class:`StreamScript` (what the fake answers: TTFT, ITL, tokens per chunk, empty-text and
token-less chunks, an error event inside a 200, an HTTP error status with headers, a
mid-stream server disconnect or stall, a short generation, no running usage, a whole response
buffered into one write, a last event without its blank line, no ``[DONE]``, raw writes instead
of chunks, another content type, a non-streaming body, the ``/health`` status) and
:class:`FakeOpenAIServer` (an aiohttp app on 127.0.0.1, port chosen by the OS, that records
every request it saw, how many were in flight at most, which TCP connections they came on, and
when a client disconnected). Durations are seconds.

It answers like vLLM 0.32: ``POST /v1/completions`` and ``/v1/chat/completions`` stream SSE when
the body asks ``stream`` (else one JSON answer), the chunks are the shared renderer's
(``tests.support.vllm_chunks``), token ``j``'s text is ``"tok{j} "``, a running usage is on each
token chunk only when the body asks ``stream_options.continuous_usage_stats`` and the usage
trailer comes only with ``include_usage``; ``max_tokens`` defaults to 16, as vLLM's does. Chat
streams open as vLLM's do: a role-only chunk (``delta: {role, content: ""}``, usage with 0
completion tokens), optionally an empty chunk, then the token chunks as deltas. A body's
``fake_delay_s`` replaces the TTFT of that request.

With ``max_concurrent`` N the fake serves at most N requests at a time, first come first
served, the others waiting after their response headers (as vLLM's waiting queue): a server
whose capacity is known, N ÷ (ttft_s + (tokens − 1) × itl_s) requests/s. It also answers
``GET /health``, ``/v1/models``, ``/version`` and a small ``/metrics`` page (running and
waiting requests, KV-cache facts, a success counter), enough for the orchestrator to attach to
it and scrape it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web
from multidict import CIMultiDict

from tests.support.vllm_chunks import (
    DONE,
    ERROR_EVENT,
    chat_chunk,
    completion_chunk,
    sse_event,
    usage_trailer,
)

#: vLLM's ``max_tokens`` when a completion request gives none.
DEFAULT_MAX_TOKENS = 16


@dataclass
class StreamScript:
    """What the fake does with each request.

    Attributes:
        ttft_s: delay between receiving the request and the first token chunk (or the whole
            answer); a body's ``fake_delay_s`` replaces it for that request.
        itl_s: delay between successive token chunks (or raw writes).
        chunk_plan: tokens carried by each token chunk; default: one token per chunk, as
            many as ``tokens`` (else the body's ``max_tokens``) less ``short_by_tokens``.
        tokens: generate this many tokens whatever the body asks.
        empty_text_chunks: indices of token chunks whose text is ``""`` (a token that decodes
            to nothing, e.g. half a UTF-8 character); their usage still grows.
        tokenless_after: after token chunk ``i``, send an extra chunk with empty text and an
            unchanged usage (a chunk that carries no token).
        trailer_delay_s: delay before the final usage-only chunk (``choices: []``).
        cached_tokens: ``prompt_tokens_details.cached_tokens`` reported in the trailer.
        status: HTTP status; anything but 200 answers a JSON error body after the TTFT.
        error_type: the ``type`` of that error body (vLLM's admission 503 says
            ``Service Unavailable``).
        headers: extra headers of every completion answer (e.g. ``Retry-After``).
        health_status: what ``GET /health`` answers.
        error_after_chunks: after this many token chunks, send an error event and ``[DONE]``.
        error_event_type: with ``error_after_chunks``, precede the error data with
            ``event: <type>``.
        error_payload: the data of the error event (any payload: a malformed chunk too).
        drop_after_chunks: after this many token chunks (or raw writes), abort the TCP
            connection.
        stall_after_chunks: after this many token chunks, send nothing for ``stall_s``.
        stall_s: length of that stall.
        short_by_tokens: generate this many tokens fewer than asked (negative: more).
        prompt_tokens_offset: added to the prompt length reported in the usage.
        continuous_usage: honour ``continuous_usage_stats`` (false: only the trailer has a
            usage, as a server without running usage).
        buffered: hold every event back and write the whole response in one write at the
            end (after the same sleeps), like a proxy that buffers.
        no_final_blank_line: end with the usage trailer without its blank line and without
            ``[DONE]``, then close the response.
        send_done: end the stream with ``data: [DONE]``.
        raw_writes: write exactly these bytes (``itl_s`` apart) instead of the chunks.
        content_type: the Content-Type of a streamed answer.
        json_body: the body of a non-streaming 200 instead of the generated one.
        eol: the line end of every line (``"\\n"``, ``"\\r\\n"`` or a bare ``"\\r"``).
        ttft_for: TTFT of each request chosen from its JSON body (replaces ``ttft_s``).
        chat_empty_chunk: chat only: after the role chunk, one more chunk with empty content
            and no new token, before the first token.
        chat_role_delay_s: chat only: the role chunk comes this long after the request (the
            first token still comes after the TTFT).
    """

    ttft_s: float = 0.0
    itl_s: float = 0.0
    chunk_plan: tuple[int, ...] | None = None
    tokens: int | None = None
    empty_text_chunks: frozenset[int] = frozenset()
    tokenless_after: frozenset[int] = frozenset()
    trailer_delay_s: float = 0.0
    cached_tokens: int = 0
    status: int = 200
    error_type: str = "X"
    headers: dict[str, str] = field(default_factory=dict)
    health_status: int = 200
    error_after_chunks: int | None = None
    error_event_type: str | None = None
    error_payload: str = ""
    drop_after_chunks: int | None = None
    stall_after_chunks: int | None = None
    stall_s: float = 0.0
    short_by_tokens: int = 0
    prompt_tokens_offset: int = 0
    continuous_usage: bool = True
    buffered: bool = False
    no_final_blank_line: bool = False
    send_done: bool = True
    raw_writes: tuple[bytes, ...] | None = None
    content_type: str = "text/event-stream"
    json_body: bytes | None = None
    eol: str = "\n"
    ttft_for: Callable[[dict[str, Any]], float] | None = None
    chat_empty_chunk: bool = False
    chat_role_delay_s: float = 0.0


@dataclass
class Seen:
    """One request as the fake saw it (times are ``time.monotonic()`` seconds).

    ``headers`` is case-insensitive; ``body`` is ``None`` for a ``GET``.
    """

    body: dict[str, Any] | None
    arrived_s: float
    path: str = "/v1/completions"
    headers: CIMultiDict[str] = field(default_factory=CIMultiDict)
    chunks_sent: int = 0
    completed: bool = False
    disconnected_at_s: float | None = None


def fake_prompt_tokens(body: dict[str, Any]) -> int:
    """The prompt length the fake reports: token IDs counted, text in characters (chat: the
    characters of every message's content)."""
    if "messages" in body:
        return sum(len(m["content"]) for m in body["messages"])
    return len(body.get("prompt", ""))


def token_text(first: int, tokens: int) -> str:
    """The text of ``tokens`` tokens from token ``first`` on: ``"tok{j} "`` each."""
    return "".join(f"tok{j} " for j in range(first, first + tokens))


class FakeOpenAIServer:
    """A scriptable fake vLLM (module docstring).

    ``served`` counts completion requests; ``seen`` holds every completion and ``/v1/models``
    request (none with ``keep_seen=False``: a long benchmark would otherwise hold every prompt
    it received); ``connections`` the client address (host, port) of every TCP connection a
    completion came on, so its size is the number of distinct connections used;
    ``health_checks`` counts ``/health`` requests; ``active`` and ``max_active`` the requests
    in flight now and at most. ``grace_s`` is how long stopping lets the requests still
    answering go on before cancelling them (aiohttp's shutdown timeout; its default, 60 s).
    """

    def __init__(
        self,
        script: StreamScript | None = None,
        keep_seen: bool = True,
        max_concurrent: int | None = None,
        grace_s: float = 60.0,
    ) -> None:
        self.script = script or StreamScript()
        self.grace_s = grace_s
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

    def _record(self, request: web.Request, body: dict[str, Any] | None) -> Seen:
        seen = Seen(body, time.monotonic(), request.path, CIMultiDict(request.headers))
        if self.keep_seen:
            self.seen.append(seen)
        self._notify()
        return seen

    async def _health(self, request: web.Request) -> web.Response:
        self.health_checks += 1
        return web.Response(status=self.script.health_status, text="")

    async def _completions(self, request: web.Request) -> web.StreamResponse:
        assert request.transport is not None
        peer = request.transport.get_extra_info("peername")
        self.connections.add((str(peer[0]), int(peer[1])))
        raw = await request.read()
        body = json.loads(raw) if raw else {}
        seen = self._record(request, body)
        self.served += 1
        answer = _Answer(self, request, body, seen)
        self.active += 1
        self.max_active = max(self.max_active, self.active)
        try:
            return await answer.give()
        except ConnectionResetError:  # the client went away during a write: the answer ends
            seen.disconnected_at_s = time.monotonic()
            return answer.resp or web.Response(status=499)
        except asyncio.CancelledError:  # the client disconnected (or the fake stopped)
            seen.disconnected_at_s = time.monotonic()
            raise
        finally:
            answer.leave()
            self._notify()

    async def _models(self, request: web.Request) -> web.Response:
        self._record(request, None)
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
        """Stop listening and close every idle connection (a server that died); a request
        still answering is cancelled after ``grace_s`` seconds."""
        if self._runner is not None:
            runner, self._runner = self._runner, None
            await runner.cleanup()

    @contextlib.asynccontextmanager
    async def serve(self) -> AsyncIterator[FakeOpenAIServer]:
        """Listen on 127.0.0.1 (OS-chosen port) for the duration of the block; a client that
        disconnects cancels its request's handler (which notes when, in ``seen``)."""
        runner = web.AppRunner(self.app(), handler_cancellation=True, shutdown_timeout=self.grace_s)
        self._runner = runner
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        host, port = runner.addresses[0][:2]
        self.url = f"http://{host}:{port}"
        try:
            yield self
        finally:
            await self.stop()


class _Answer:
    """The answer to one completion request: the fake's script applied to the request's body
    (an error status, one JSON answer, or a stream)."""

    def __init__(
        self, fake: FakeOpenAIServer, request: web.Request, body: dict[str, Any], seen: Seen
    ) -> None:
        self.fake, self.request, self.body, self.seen = fake, request, body, seen
        self.script = script = fake.script
        self.chat = request.path == "/v1/chat/completions"
        options = body.get("stream_options") or {}
        self.running_usage = script.continuous_usage and bool(options.get("continuous_usage_stats"))
        self.trailer = bool(options.get("include_usage"))
        self.prompt = fake_prompt_tokens(body) + script.prompt_tokens_offset
        self.resp: web.StreamResponse | None = None
        self.held: list[bytes] = []  # events held back by a buffering response
        self.in_flight = True
        self.slot_held = False
        self.done = 0  # tokens sent

    def ttft(self) -> float:
        """This request's TTFT (s): the script's, its ``ttft_for``, or the body's."""
        if self.script.ttft_for is not None:
            return self.script.ttft_for(self.body)
        return float(self.body.get("fake_delay_s", self.script.ttft_s))

    def plan(self) -> list[int]:
        """Tokens per token chunk."""
        script, body = self.script, self.body
        if script.chunk_plan is not None:
            return list(script.chunk_plan)
        asked = script.tokens or body.get("max_completion_tokens") or body.get("max_tokens")
        return [1] * (int(asked or DEFAULT_MAX_TOKENS) - script.short_by_tokens)

    def land(self) -> None:
        """No longer in flight (counted once)."""
        if self.in_flight:
            self.in_flight = False
            self.fake.active -= 1

    def leave(self) -> None:
        """No longer in flight, and its slot given back."""
        self.land()
        if self.slot_held and self.fake._slots is not None:
            self.slot_held = False
            self.fake._slots.release()

    async def give(self) -> web.StreamResponse:
        """The whole answer (the caller notes disconnects)."""
        script = self.script
        if script.status != 200:
            await asyncio.sleep(self.ttft())
            self.seen.completed = True
            error = {
                "message": "fake overload", "type": script.error_type, "param": None,
                "code": script.status,
            }  # fmt: skip
            return web.json_response({"error": error}, status=script.status, headers=script.headers)
        if not self.body.get("stream"):
            return await self._whole()
        resp = self.resp = web.StreamResponse(
            headers={"Content-Type": script.content_type, "Cache-Control": "no-cache"}
        )
        resp.headers.update(script.headers)
        await resp.prepare(self.request)  # headers go out at once, like vLLM
        await self._take_slot()
        ttft = self.ttft()
        if self.chat and script.raw_writes is None:
            ttft = await self._chat_opening(ttft)
        await asyncio.sleep(ttft)
        ended = await (self._raw() if script.raw_writes is not None else self._tokens())
        if ended:
            await self._ending()
        return resp

    async def _whole(self) -> web.Response:
        """One JSON answer, after the time the stream would have taken."""
        script, plan = self.script, self.plan()
        await asyncio.sleep(self.ttft() + script.itl_s * max(len(plan) - 1, 0))
        self.seen.chunks_sent, self.seen.completed = len(plan), True
        self.fake.completed += 1
        if script.json_body is not None:
            return web.Response(
                body=script.json_body, content_type="application/json", headers=script.headers
            )
        text = token_text(0, sum(plan))
        choice = (
            {"message": {"role": "assistant", "content": text}} if self.chat else {"text": text}
        )
        return web.json_response({"choices": [choice]}, headers=script.headers)

    async def _take_slot(self) -> None:
        slots = self.fake._slots
        if slots is None:
            return
        self.fake.waiting += 1
        try:
            await slots.acquire()
        finally:
            self.fake.waiting -= 1
        self.slot_held = True

    async def _send(self, data: str, event: str | None = None, lines_ended: int = 2) -> None:
        line = sse_event(data, event, self.script.eol, lines_ended).encode()
        if self.script.buffered:
            self.held.append(line)
        else:
            assert self.resp is not None
            await self.resp.write(line)

    def _chunk(self, text: str, done: int, finish: str | None) -> str:
        if self.chat:
            return chat_chunk({"content": text}, self.prompt, done, finish, self.running_usage)
        return completion_chunk(text, self.prompt, done, finish, self.running_usage)

    async def _chat_opening(self, ttft: float) -> float:
        """vLLM's opening chat chunks: the role, then (scripted) an empty one; the TTFT left."""
        first = min(self.script.chat_role_delay_s, ttft)
        await asyncio.sleep(first)
        opening = [{"role": "assistant", "content": ""}]
        opening += [{"content": ""}] if self.script.chat_empty_chunk else []
        for delta in opening:
            await self._send(chat_chunk(delta, self.prompt, 0, None, self.running_usage))
        return ttft - first

    def _drop(self) -> None:
        assert self.request.transport is not None
        self.request.transport.abort()

    async def _tokens(self) -> bool:
        """The token chunks; false when the answer ended among them (an error event, a drop)."""
        script, seen, plan = self.script, self.seen, self.plan()
        done = 0
        for i, tokens in enumerate(plan):
            if i:
                await asyncio.sleep(script.itl_s)
            if script.error_after_chunks == i:
                await self._send(script.error_payload or ERROR_EVENT, script.error_event_type)
                await self._send(DONE)
                assert self.resp is not None
                await self.resp.write(b"".join(self.held))
                return False
            if script.stall_after_chunks == i:
                await asyncio.sleep(script.stall_s)
            if script.drop_after_chunks == i:
                self._drop()
                return False
            text = "" if i in script.empty_text_chunks else token_text(done, tokens)
            done += tokens
            await self._send(self._chunk(text, done, "length" if i == len(plan) - 1 else None))
            seen.chunks_sent += 1
            self.fake._notify()
            if i in script.tokenless_after:
                await self._send(self._chunk("", done, None))
        if script.drop_after_chunks == len(plan):
            self._drop()
            return False
        self.done = done
        return True

    async def _raw(self) -> bool:
        """The script's raw writes instead of chunks; false when dropped after them."""
        assert self.resp is not None
        writes = self.script.raw_writes or ()
        for i, data in enumerate(writes):
            if i:
                await asyncio.sleep(self.script.itl_s)
            if self.script.drop_after_chunks == i:
                self._drop()
                return False
            await self.resp.write(data)
            self.seen.chunks_sent += 1
            self.fake._notify()
        if self.script.drop_after_chunks == len(writes):
            self._drop()
            return False
        return True

    async def _ending(self) -> None:
        """The usage trailer (when asked), ``[DONE]`` and the end of the response."""
        script, resp = self.script, self.resp
        assert resp is not None
        if script.raw_writes is None:
            await asyncio.sleep(script.trailer_delay_s)
            if self.trailer:
                trailer = usage_trailer(self.prompt, self.done, script.cached_tokens)
                # Without its blank line, one newline ends the line, not the event.
                await self._send(trailer, lines_ended=1 if script.no_final_blank_line else 2)
            # No longer in flight from here: the client can only start its next request after
            # reading [DONE], so ``max_active`` never counts a finished request.
            self.land()
            if script.send_done and not script.no_final_blank_line:
                await self._send(DONE)
            if self.held:
                await resp.write(b"".join(self.held))
        await resp.write_eof()
        self.seen.completed = True
        self.fake.completed += 1
