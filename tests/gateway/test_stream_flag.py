"""wants_stream: only a JSON object whose "stream" member is true asks for a stream."""

from __future__ import annotations

import pytest

from gateway.proxy.forward import wants_stream


@pytest.mark.parametrize(
    ("body", "streams"),
    [
        (b'{"model":"m","prompt":[1,2,3],"stream":true}', True),
        (b'{"stream": true, "x": [1, {"q": null}]}', True),
        (b'{"stream":false}', False),
        (b'{"stream":1}', False),  # truthy is not true
        (b'{"stream":"true"}', False),
        (b'{"nested":{"stream":true}}', False),
        (b"[1,2]", False),  # not an object
        (b"not json", False),
        (b"\xff\xfe", False),  # not UTF-8
        (b"", False),
    ],
)
def test_only_a_true_stream_member_streams(body: bytes, streams: bool) -> None:
    assert wants_stream(body) is streams
