"""What a relayed event means: the end of an OpenAI stream, or an error inside a 200 (pure).

The gateway relays an upstream's ``text/event-stream`` byte for byte and feeds a copy of each
chunk to the one SSE decoder (:class:`server.net.sse.SSEDecoder`), which gives whole events
whatever the split of the bytes. These functions judge each event.

OpenAI-style streams (vLLM's ``/v1/completions`` and ``/v1/chat/completions``) end with
``data: [DONE]``; a failure inside an already-started 200 stream is sent as an event whose data
is a JSON object with an ``error`` key (vLLM's stream generators: ``data: {"error": {...}}``
then ``data: [DONE]``). :func:`is_error_event` also counts an event named ``error``.
"""

from __future__ import annotations

import json

from server.net.sse import DONE, SSEEvent


def is_done(event: SSEEvent) -> bool:
    """Whether ``event`` is the OpenAI end-of-stream marker ``data: [DONE]``."""
    return event.data.strip() == DONE


def is_error_event(event: SSEEvent) -> bool:
    """Whether ``event`` reports a failure: named ``error``, or data that is a JSON object with
    a non-null ``error`` member (``{"error": null}`` in a normal chunk is no error)."""
    if event.event == "error":
        return True
    if '"error"' not in event.data:  # cheap test first: most chunks are tokens
        return False
    try:
        payload = json.loads(event.data)
    except ValueError:
        return False
    return isinstance(payload, dict) and payload.get("error") is not None
