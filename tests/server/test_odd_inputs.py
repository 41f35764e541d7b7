"""Odd inputs get one line that says what is wrong, never a misleading one or a hang:

- a path that is no regular file (``/dev/zero``, a directory, a pipe) says what it is, for a
  dataset, a trace, a gateway config and a gate file alike (it once said "no such file", read
  256 MiB of zeros before calling it too large, or read ``/dev/zero`` without end);
- a server whose ``/metrics`` hangs at the start says it did not answer within N s (it once
  ended "ReadTimeout: CancelledError: "), and one whose ``/v1/models`` answers garbage says
  so (it once said "lists no model" or raised a JSON traceback).
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer
from click.testing import CliRunner

from analysis.gate_file import GateFileError, load_gate
from loadgen.cli import main
from server.manager import CapacityUnknownError, ServerStartError, attach, read_capacity
from server.net.errors import describe_exception
from server.net.headers import header_problem
from server.net.input_files import file_problem

pytestmark = [pytest.mark.timeout(60)]


def test_what_a_path_that_is_no_regular_file_is(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    (tmp_path / "ok.jsonl").write_text("{}\n")
    assert file_problem(tmp_path / "ok.jsonl") is None
    assert file_problem(tmp_path / "missing") == "no such file"
    assert file_problem(tmp_path) == "is a directory, not a file"
    assert file_problem("/dev/zero") == "is a character device, not a regular file"
    assert file_problem(fifo) == "is a pipe, not a regular file"


def test_a_gateway_config_that_is_a_device_is_refused_without_reading_it() -> None:
    result = CliRunner().invoke(main, ["gateway", "--config", "/dev/zero"])
    assert result.exit_code == 2
    assert result.output.splitlines()[-1] == (
        "Error: cannot read gateway config /dev/zero: is a character device, not a regular file"
    )


def test_a_gate_file_that_is_a_device_is_refused_without_reading_it() -> None:
    with pytest.raises(GateFileError) as caught:
        load_gate(Path("/dev/zero"))
    assert str(caught.value) == "/dev/zero: is a character device, not a regular file"


def test_a_timeout_is_described_in_its_own_words_not_its_causes() -> None:
    # httpx raises ReadTimeout from anyio's CancelledError, whose text is a cancel scope.
    try:
        try:
            raise asyncio.CancelledError("Cancelled via cancel scope 7f7a; reason: deadline")
        except asyncio.CancelledError as cause:
            raise httpx.ReadTimeout("") from cause
    except httpx.ReadTimeout as exc:
        assert describe_exception(exc) == "ReadTimeout: timed out"


async def _hang(request: web.Request) -> web.Response:
    await asyncio.sleep(3600)
    return web.Response()


async def _serve(routes: dict[str, object]) -> AsyncIterator[str]:
    app = web.Application()
    for path, handler in routes.items():
        app.router.add_get(path, handler)  # type: ignore[arg-type]
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    try:
        yield str(server.make_url("")).rstrip("/")
    finally:
        await server.close()


async def test_a_hanging_metrics_page_at_the_start_is_said_in_words() -> None:
    async for url in _serve({"/metrics": _hang}):
        async with httpx.AsyncClient(timeout=0.2) as client:
            with pytest.raises(CapacityUnknownError) as caught:
                await read_capacity(client, url, None)
    assert str(caught.value) == (
        f"the server's /metrics ({url}/metrics) did not answer within 0.2 s"
    )


async def test_a_server_that_answers_garbage_for_its_models_is_said_so() -> None:
    async def health(request: web.Request) -> web.Response:
        return web.Response(text="")

    async def models(request: web.Request) -> web.Response:
        return web.Response(body=b"{not json")

    async for url in _serve({"/health": health, "/v1/models": models}):
        with pytest.raises(ServerStartError) as caught:
            await attach(url)
    assert str(caught.value) == f"{url}/v1/models answered with no JSON (9 bytes: '{{not json')"


@pytest.mark.parametrize(
    ("name", "shown", "char"),
    [("X-Ü", "X-\\xdc", "\\xdc"), ("X\x1b[2J", "X\\x1b[2J", "\\x1b"), ("X Y", "X Y", " ")],
)
def test_a_header_name_that_is_no_token_names_the_character_escaped(
    name: str, shown: str, char: str
) -> None:
    # It showed "X-?" for X-Ü: a question mark the user never typed.
    assert header_problem(name, "1") == (
        f"header name '{shown}' is not an HTTP token: '{char}' may not be in it (letters, "
        "digits, !#$%&'*+-.^_`|~)"
    )
