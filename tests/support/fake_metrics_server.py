"""A fake vLLM ``/metrics`` endpoint on 127.0.0.1 for scraper tests, answering by a script.

Owns :class:`Answer` (what one request gets: a small vLLM-shaped page, an HTML 200 page or an
error status; after a delay; with a NaN KV-usage sample; under the old metric names; with a
given generation-token count) and :class:`FakeMetricsServer` (an aiohttp app, port chosen by
the OS, answering request *r* with ``script[r]`` and every later one with ``default``, and
recording when each request arrived). A page is rendered when its request arrives, so a slow
answer carries the values of its arrival time, as a snapshot would. Durations are seconds.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Literal

from aiohttp import web


@dataclass(frozen=True)
class Answer:
    """What the fake answers to one request.

    Attributes:
        kind: ``page`` (exposition text), ``html`` (a 200 HTML body), ``status`` (an error).
        delay_s: wait before answering.
        nan: engine 0's ``kv_cache_usage_perc`` is ``NaN``.
        old_names: ``vllm:gpu_cache_usage_perc`` instead of ``vllm:kv_cache_usage_perc``.
        tokens: ``generation_tokens_total`` of engine 0 (default: the server's ``tokens``).
        status: HTTP status for ``kind="status"``.
        size: the page padded with comment lines to exactly this many bytes (``page`` only;
            at least the page's own size); sent chunked (no ``Content-Length``) in 1 MiB
            writes, so a reader learns the size only by reading.
    """

    kind: Literal["page", "html", "status"] = "page"
    delay_s: float = 0.0
    nan: bool = False
    old_names: bool = False
    tokens: float | None = None
    status: int = 503
    size: int | None = None


HTML = "<!doctype html><html><head><title>Login</title></head><body>Sign in</body></html>\n"


class FakeMetricsServer:
    """``/metrics`` on 127.0.0.1 answering request *r* with ``script[r]``, later ``default``.

    Pages carry two engines: KV usage 0.6 (engine 0) and 0.7 (engine 1),
    ``num_requests_running`` = the request's index (so each scrape's page is known), and
    ``generation_tokens_total`` (engine 0 as set, engine 1 always 0).
    """

    def __init__(self, script: list[Answer], default: Answer | None = None) -> None:
        self.script = script
        self.default = default or Answer()
        self.tokens = 0.0
        self.arrivals_ns: list[int] = []
        self._runner: web.AppRunner | None = None
        self.url = ""

    def page(self, index: int, answer: Answer) -> str:
        kv = "vllm:gpu_cache_usage_perc" if answer.old_names else "vllm:kv_cache_usage_perc"
        tokens = self.tokens if answer.tokens is None else answer.tokens
        return (
            f"# TYPE {kv} gauge\n"
            f'{kv}{{engine="0",model_name="m"}} {"NaN" if answer.nan else "0.6"}\n'
            f'{kv}{{engine="1",model_name="m"}} 0.7\n'
            "# TYPE vllm:num_requests_running gauge\n"
            f'vllm:num_requests_running{{engine="0",model_name="m"}} {index}.0\n'
            "# TYPE vllm:generation_tokens counter\n"
            f'vllm:generation_tokens_total{{engine="0",model_name="m"}} {tokens}\n'
            'vllm:generation_tokens_total{engine="1",model_name="m"} 0.0\n'
        )

    async def _metrics(self, request: web.Request) -> web.Response:
        index = len(self.arrivals_ns)
        self.arrivals_ns.append(time.monotonic_ns())
        answer = self.script[index] if index < len(self.script) else self.default
        text = self.page(index, answer)
        if answer.delay_s:
            await asyncio.sleep(answer.delay_s)
        if answer.kind == "html":
            return web.Response(text=HTML, content_type="text/html")
        if answer.kind == "status":
            return web.Response(status=answer.status, text="unavailable")
        if answer.size is not None:
            return await self._padded(request, text.encode(), answer.size)
        return web.Response(text=text, content_type="text/plain")

    async def _padded(self, request: web.Request, page: bytes, size: int) -> web.StreamResponse:
        """``page`` then ``# pad…`` comment lines up to ``size`` bytes, streamed chunked."""
        if size < len(page) + 2:
            raise ValueError(f"size {size} is below the page's {len(page) + 2} bytes")
        response = web.StreamResponse(headers={"Content-Type": "text/plain"})
        response.enable_chunked_encoding()
        await response.prepare(request)
        await response.write(page)
        left = size - len(page)
        line = b"# " + b"x" * (2**20 - 3) + b"\n"  # one 1 MiB comment line
        try:
            while left > len(line):
                await response.write(line)
                left -= len(line)
            await response.write(b"#" + b"x" * (left - 2) + b"\n")
            await response.write_eof()
        except (ConnectionError, RuntimeError):  # the reader stopped at its limit and left
            pass
        return response

    @property
    def requests(self) -> int:
        return len(self.arrivals_ns)

    async def wait_requests(self, n: int, timeout_s: float = 20.0) -> None:
        """Wait until ``n`` requests have arrived.

        Raises:
            TimeoutError: they did not within ``timeout_s``.
        """
        async with asyncio.timeout(timeout_s):
            while self.requests < n:
                await asyncio.sleep(0.005)

    async def start(self) -> str:
        app = web.Application()
        app.router.add_get("/metrics", self._metrics)
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        host, port = self._runner.addresses[0][:2]
        self.url = f"http://{host}:{port}"
        return self.url

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
