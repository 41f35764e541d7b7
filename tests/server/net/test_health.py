"""server.net.health: the one ``/health`` check and wait (vLLM, the proxies, the gateway, its
upstreams, the run's server watch).

Healthy is a 2xx answer; a redirect is neither followed nor healthy. The copies this replaced
disagreed there (200 only, 2xx, redirects followed by one of them).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import AsyncIterator

import pytest
from aiohttp import web

from server.net.health import Health, NotHealthy, check_health, health_client, wait_healthy
from server.net.limits import CONTROL_MAX_BYTES
from tests.support.gateway_fakes import closed_port, unaccepting_listener

pytestmark = [pytest.mark.asyncio, pytest.mark.timeout(30)]


class Scripted:
    """A server whose ``/health`` answers each status of ``statuses`` in turn (the last one
    for ever); ``/big`` answers a body one byte over the control limit."""

    def __init__(self, *statuses: int) -> None:
        self.statuses = list(statuses)
        self.checks = 0

    async def health(self, request: web.Request) -> web.Response:
        status = self.statuses[min(self.checks, len(self.statuses) - 1)]
        self.checks += 1
        if status in (301, 302):
            raise web.HTTPFound("/elsewhere")
        return web.Response(status=status)

    async def big(self, request: web.Request) -> web.Response:
        return web.Response(body=b"x" * (CONTROL_MAX_BYTES + 1))

    @contextlib.asynccontextmanager
    async def serve(self) -> AsyncIterator[str]:
        app = web.Application()
        app.router.add_get("/health", self.health)
        app.router.add_get("/elsewhere", self.health)
        app.router.add_get("/big/health", self.big)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        try:
            yield f"http://127.0.0.1:{runner.addresses[0][1]}"
        finally:
            await runner.cleanup()


async def check(url: str, timeout_s: float = 2.0) -> Health:
    async with health_client(timeout_s) as client:
        return await check_health(client, url, timeout_s)


@pytest.mark.parametrize(
    ("status", "found"),
    [(200, Health(200)), (204, Health(204)), (503, Health(503, "HTTP 503"))],
)
async def test_a_2xx_answer_is_healthy_any_other_is_not(status: int, found: Health) -> None:
    async with Scripted(status).serve() as url:
        assert await check(url) == found


async def test_a_redirect_is_not_followed_and_not_healthy() -> None:
    server = Scripted(302, 200)
    async with server.serve() as url:
        assert await check(url) == Health(302, "HTTP 302")
    assert server.checks == 1  # /elsewhere was never asked


async def test_a_refused_connection_names_its_cause() -> None:
    found = await check(f"http://127.0.0.1:{closed_port()}")
    assert found.status is None
    assert found.cause == "ConnectError: All connection attempts failed (ECONNREFUSED)"
    assert found.problem == f"cannot connect: {found.cause}"


async def test_no_answer_within_the_timeout_is_said_so() -> None:
    with unaccepting_listener() as port:
        began = time.monotonic()
        found = await check(f"http://127.0.0.1:{port}", timeout_s=0.3)
    assert found.problem == "no answer within 0.3 s" and found.status is None
    assert time.monotonic() - began < 2.0  # the check's bound, not a library default


async def test_an_oversized_answer_is_not_read_whole() -> None:
    async with Scripted(200).serve() as url:
        found = await check(f"{url}/big")
    assert found.problem == "check failed (AnswerTooLarge: answer larger than 1048576 bytes)"


async def test_the_wait_ends_at_the_first_healthy_answer_reporting_each_miss() -> None:
    server = Scripted(503, 503, 200)
    waited: list[float] = []
    async with server.serve() as url:
        await wait_healthy(url, timeout_s=10, every_s=0.01, on_wait=waited.append)
    assert server.checks == 3
    assert len(waited) == 2  # after each of the two misses


async def test_the_wait_gives_up_after_its_attempts_with_the_last_problem() -> None:
    server = Scripted(503)
    async with server.serve() as url:
        with pytest.raises(NotHealthy) as caught:
            await wait_healthy(url, attempts=3, every_s=0.01)
    assert server.checks == 3
    assert caught.value.exit_code is None
    assert caught.value.last == Health(503, "HTTP 503")
    assert str(caught.value) == f"{url}/health was not healthy (HTTP 503) after 0 s"


async def test_the_wait_gives_up_at_its_deadline() -> None:
    url = f"http://127.0.0.1:{closed_port()}"
    began = time.monotonic()
    with pytest.raises(NotHealthy) as caught:
        await wait_healthy(url, timeout_s=0.3, every_s=0.05)
    assert 0.3 <= time.monotonic() - began < 2.0
    assert caught.value.last is not None and caught.value.last.status is None


async def test_the_wait_stops_when_the_process_exits() -> None:
    codes = iter([None, None, 3])
    url = f"http://127.0.0.1:{closed_port()}"
    with pytest.raises(NotHealthy) as caught:
        await wait_healthy(url, timeout_s=10, every_s=0.01, exited=lambda: next(codes))
    assert caught.value.exit_code == 3
    assert str(caught.value) == "the process exited with code 3 after 0 s"
