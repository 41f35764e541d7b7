"""server.net.errors.describe_exception: every exception named in one line, never empty."""

from __future__ import annotations

import errno
import socket

import httpx
import pytest

from server.manager import ServerStartError, attach
from server.net.errors import describe_exception
from server.process import free_loopback_port


def _chained(outer: BaseException, cause: BaseException) -> BaseException:
    try:
        try:
            raise cause
        except BaseException as inner:
            raise outer from inner
    except BaseException as exc:
        return exc


def test_a_timeout_with_no_message_says_timed_out() -> None:
    # str(TimeoutError()) == "": the old "cannot reach …/health: " ended in nothing.
    assert str(TimeoutError()) == ""
    assert describe_exception(TimeoutError()) == "TimeoutError: timed out"
    assert describe_exception(httpx.ConnectTimeout("")) == "ConnectTimeout: timed out"


def test_refused_unreachable_and_dns_carry_their_symbolic_code() -> None:
    refused = _chained(
        httpx.ConnectError("All connection attempts failed"),
        ConnectionRefusedError(errno.ECONNREFUSED, "Connection refused"),
    )
    assert describe_exception(refused) == (
        "ConnectError: All connection attempts failed (ECONNREFUSED)"
    )
    unreachable = OSError(errno.ENETUNREACH, "Network is unreachable")
    assert describe_exception(unreachable) == (
        "OSError: [Errno 101] Network is unreachable (ENETUNREACH)"
    )
    dns = _chained(httpx.ConnectError(""), socket.gaierror(socket.EAI_NONAME, "Name unknown"))
    assert describe_exception(dns) == "ConnectError: gaierror: [Errno -2] Name unknown (EAI_NONAME)"


def test_a_full_disk_is_named() -> None:
    exc = OSError(errno.ENOSPC, "No space left on device")
    assert describe_exception(exc) == "OSError: [Errno 28] No space left on device (ENOSPC)"


def test_an_empty_exception_of_another_kind_is_its_type() -> None:
    assert describe_exception(RuntimeError()) == "RuntimeError"


def test_a_password_in_a_quoted_url_is_masked() -> None:
    exc = httpx.HTTPError("Server error for url 'http://u:secret@127.0.0.1:9/metrics'")
    assert describe_exception(exc) == (
        "HTTPError: Server error for url 'http://u:***@127.0.0.1:9/metrics'"
    )


@pytest.mark.asyncio
async def test_attaching_to_nothing_names_the_cause() -> None:
    url = f"http://127.0.0.1:{free_loopback_port()}"
    with pytest.raises(ServerStartError) as caught:
        await attach(url)
    message = str(caught.value)
    assert message.startswith(f"cannot reach {url}/health: ConnectError: ")
    assert message.endswith("(ECONNREFUSED)")
