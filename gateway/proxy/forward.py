"""Forwarding one exchange: send, refuse what cannot be relayed, relay, and notice the client
going away.

Answers the gateway cannot relay are refused with a 502: an undecodable ``Content-Encoding``,
a streaming request answered without an event stream. An event stream goes to
:mod:`gateway.proxy.stream`, anything else to :mod:`gateway.proxy.buffered`. A client that went
away is seen through aiohttp's ``handler_cancellation`` (the handler task is cancelled;
:func:`gateway.app.running_app` switches it on) and, as a fallback, through failed writes to a
closed client transport (:class:`gateway.proxy.client.ClientGone`).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import msgspec
from aiohttp import web

from gateway.headers import undecodable_encoding
from gateway.proxy import buffered, stream
from gateway.proxy.client import ClientGone
from gateway.proxy.exchange import Exchange

logger = logging.getLogger(__name__)

SSE_CONTENT_TYPE = "text/event-stream"


class _StreamFlag(msgspec.Struct):
    stream: Any = None


# Reads only the "stream" member (the prompt, often thousands of token IDs, is skipped
# without building it): a fraction of json.loads's cost per request.
_decode_stream_flag = msgspec.json.Decoder(_StreamFlag).decode


def wants_stream(body: bytes) -> bool:
    """Whether a JSON request body asks for ``"stream": true`` (non-JSON bodies: no)."""
    if not body:
        return False
    try:
        return _decode_stream_flag(body).stream is True
    except msgspec.DecodeError:  # not JSON, or not an object (ValidationError)
        return False


async def forward(ex: Exchange) -> web.StreamResponse:
    """Forward the request of ``ex``; on client disconnect abort or orphan the upstream work."""
    try:
        return await _relay(ex)
    except asyncio.CancelledError:
        ex.on_client_gone()
        raise
    except ClientGone:
        ex.on_client_gone()
        ex.outcome.client_gone = True
        ex.outcome.status = 499
        assert ex.client.response is not None
        return ex.client.response


async def _relay(ex: Exchange) -> web.StreamResponse:
    streaming = wants_stream(ex.body)
    failed = await ex.send(streaming)
    if failed is not None:
        return failed
    resp = ex.upstream_response()
    encoding = undecodable_encoding(resp.headers)
    if encoding is not None:
        logger.warning("%s answered with Content-Encoding %r", ex.url, encoding)
        msg = (
            f"the upstream answered with Content-Encoding {encoding!r}, which the gateway "
            "cannot decode (it asks for identity)"
        )
        return ex.fail_before_response("bad_encoding", 502, msg, None, abort=False)
    if resp.status == 200 and resp.content_type == SSE_CONTENT_TYPE:
        return await stream.relay(ex)
    if streaming and resp.status == 200:
        logger.warning("%s answered a streaming request with %s", ex.url, resp.content_type)
        msg = "the upstream answered a streaming request without an event stream"
        return ex.fail_before_response("not_event_stream", 502, msg, None, abort=False)
    return await buffered.relay(ex)
