"""What a relayed event means: an error event (named ``error`` or with an ``error`` member) and
the ``[DONE]`` that ends a stream. The decoding itself is ``server.net.sse``'s
(tests/server/net/test_sse.py)."""

from __future__ import annotations

import pytest

from gateway.sse import is_done, is_error_event
from server.net.sse import SSEEvent

pytestmark = pytest.mark.timeout(10)


@pytest.mark.parametrize(
    ("event", "error"),
    [
        (SSEEvent('{"error":{"message":"x","code":500}}'), True),
        (SSEEvent('{"error": "plain text"}'), True),
        (SSEEvent("anything", "error"), True),
        (SSEEvent('{"choices":[{"text":"\\"error\\""}]}'), False),  # text "error"
        (SSEEvent('{"choices":[], "error": null}'), False),
        (SSEEvent('["error"]'), False),  # not an object
        (SSEEvent("[DONE]"), False),
    ],
)
def test_is_error_event(event: SSEEvent, error: bool) -> None:
    assert is_error_event(event) is error


def test_is_done() -> None:
    assert is_done(SSEEvent("[DONE]"))
    assert not is_done(SSEEvent('{"text": "[DONE]"}'))
