"""An upstream that encodes its body although the gateway asks for identity: the gateway
relays it decoded (gzip, deflate) or refuses it as an upstream failure, never mixes encodings
in one body (a black-box test saw gzip bytes relayed, then a plain-text SSE error event
appended to them, ``no_done`` counted and the breaker opened after five such requests)."""

from __future__ import annotations

import gzip
import json
import zlib

import aiohttp
import pytest

from gateway.app import running_gateway
from tests.support.fake_openai_server import FakeOpenAIServer
from tests.support.gateway_fakes import fake_upstream, gateway_config, metric_value, sse_events

pytestmark = [pytest.mark.asyncio, pytest.mark.timeout(30)]

EVENTS = [b'data: {"choices":[{"text":"a"}]}\n\n', b'data: {"choices":[{"text":"b"}]}\n\n']
DONE = b"data: [DONE]\n\n"
STREAM = {"model": "m", "prompt": [1], "max_tokens": 2, "stream": True}


def gzip_writes(parts: list[bytes]) -> tuple[bytes, ...]:
    """``parts`` as one gzip member, each flushed on its own (as a streaming server would),
    the gzip trailer in the last write."""
    z = zlib.compressobj(wbits=31)  # 31: gzip framing
    writes = [z.compress(p) + z.flush(zlib.Z_SYNC_FLUSH) for p in parts]
    writes[-1] += z.flush()
    return tuple(writes)


async def fetch(
    fake: FakeOpenAIServer, payload: dict[str, object]
) -> tuple[int, dict[str, str], bytes, str]:
    async with (
        fake.serve(),
        running_gateway(gateway_config(fake.url)) as url,
        aiohttp.ClientSession(auto_decompress=False) as client,
    ):
        headers = {"Accept-Encoding": "gzip"}
        async with client.post(url + "/v1/completions", json=payload, headers=headers) as resp:
            body = await resp.read()
            status, got = resp.status, dict(resp.headers)
        async with client.get(url + "/metrics") as m:
            exposition = await m.text()
    return status, got, body, exposition


async def test_a_gzipped_stream_is_relayed_decoded_and_judged_complete() -> None:
    fake = fake_upstream(
        raw_writes=gzip_writes([*EVENTS, DONE]),
        headers={"Content-Encoding": "gzip"},
        send_done=False,
        itl_s=0.05,
    )
    status, headers, body, exposition = await fetch(fake, STREAM)
    assert fake.seen[0].headers["accept-encoding"] == "identity"
    assert status == 200
    assert "Content-Encoding" not in headers
    # The client gets exactly the upstream's plain events, nothing appended.
    assert body == b"".join([*EVENTS, DONE])
    assert metric_value(exposition, "gateway_upstream_errors_total") == 0.0


async def test_a_gzipped_json_answer_is_relayed_decoded() -> None:
    answer = json.dumps({"choices": [{"text": "hi"}]}).encode()
    fake = fake_upstream(json_body=gzip.compress(answer), headers={"Content-Encoding": "gzip"})
    status, headers, body, _ = await fetch(fake, {"model": "m", "prompt": [1]})
    assert status == 200
    assert "Content-Encoding" not in headers
    assert body == answer


@pytest.mark.parametrize("coding", ["compress", "x-gzip", "gzip, gzip"])
async def test_a_coding_the_gateway_cannot_decode_is_refused_as_an_upstream_failure(
    coding: str,
) -> None:
    fake = fake_upstream(raw_writes=(b"\x1f\x8b\x08garbage",), headers={"Content-Encoding": coding})
    status, _, body, exposition = await fetch(fake, STREAM)
    assert status == 502
    error = json.loads(body)["error"]
    assert error["message"] == (
        f"the upstream answered with Content-Encoding {coding!r}, which the gateway cannot "
        "decode (it asks for identity)"
    )
    labels = {"upstream": fake.url, "kind": "bad_encoding"}
    assert metric_value(exposition, "gateway_upstream_errors_total", labels) == 1.0
    assert sse_events(body) == []
