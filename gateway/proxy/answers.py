"""The gateway's own error answers: OpenAI-style JSON bodies and SSE error events.

They never name an upstream address (the details go to the gateway's log): a client learns
what failed, not where.
"""

from __future__ import annotations

import json
from typing import Any

from aiohttp import web


def error_body(status: int, kind: str, message: str, **extra: Any) -> dict[str, Any]:
    """OpenAI-style error payload: ``{"error": {"message", "type", "code", ...}}``."""
    return {"error": {"message": message, "type": kind, "code": status, **extra}}


def json_error(
    status: int, kind: str, message: str, headers: dict[str, str] | None = None, **extra: Any
) -> web.Response:
    """A JSON error answer with status ``status`` and body :func:`error_body`."""
    return web.json_response(
        error_body(status, kind, message, **extra), status=status, headers=headers
    )


def sse_error_event(status: int, kind: str, message: str, tail: bytes, **extra: Any) -> bytes:
    """``data: {"error": {...}}`` as one event, starting on an event boundary.

    ``tail`` is the last two bytes already sent on the stream: unless they end an event
    (``\\n\\n``), a blank line goes first so the error is not glued to a half-sent event.
    """
    event = b"data: " + json.dumps(error_body(status, kind, message, **extra)).encode()
    prefix = b"" if tail.endswith(b"\n\n") else b"\n\n"
    return prefix + event + b"\n\n"
