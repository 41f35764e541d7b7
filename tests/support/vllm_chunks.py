"""vLLM's streamed completion chunks, rendered once for every fake server of the tests.

The shapes are vLLM 0.32's ``/v1/completions`` stream (and its chat chunks): a token chunk per
engine step (one choice; with ``stream_options.continuous_usage_stats`` a running usage on
each), then a usage-only trailer (``choices: []``, the prefix-cache hit tokens in
``prompt_tokens_details.cached_tokens``) and ``[DONE]``; an engine error is an ``error`` object.
JSON without spaces, as vLLM writes it. The one aiohttp fake of vLLM (``fake_openai_server``:
the client's, the phases' and the gateway's tests) and the benchmarks' raw-protocol server
(``tests/benchmarks/sse_server.py``, byte templates built from these once) both use them.
"""

from __future__ import annotations

import json
from typing import Any

#: The event that ends every stream.
DONE = "[DONE]"


def sse_event(data: str, event: str | None = None, eol: str = "\n", lines_ended: int = 2) -> str:
    """One server-sent event: an optional ``event:`` line, the ``data:`` line, and ``eol``
    ``lines_ended`` times (2 = the line and the event end; 1 = only the line ends)."""
    return (f"event: {event}{eol}" if event else "") + f"data: {data}" + eol * lines_ended


def completion_chunk(
    text: str,
    prompt: int,
    completion: int,
    finish: str | None,
    usage: bool = True,
    completion_id: str = "cmpl-fake",
) -> str:
    """One token chunk as vLLM streams it (continuous usage included unless ``usage=False``):
    ``prompt`` and ``completion`` tokens so far, ``finish`` the finish reason or ``None``."""
    chunk: dict[str, Any] = {
        "id": completion_id,
        "object": "text_completion",
        "created": 1,
        "model": "m",
        "choices": [
            {
                "index": 0,
                "text": text,
                "logprobs": None,
                "finish_reason": finish,
                "stop_reason": None,
                "prompt_token_ids": None,
                "token_ids": None,
            }
        ],
    }
    if usage:
        chunk["usage"] = {
            "prompt_tokens": prompt,
            "total_tokens": prompt + completion,
            "completion_tokens": completion,
        }
    return json.dumps(chunk, separators=(",", ":"))


def usage_trailer(
    prompt: int, completion: int, cached: int, completion_id: str = "cmpl-fake"
) -> str:
    """The final usage-only chunk (``choices: []``) with the prefix-cache hit tokens."""
    return json.dumps(
        {
            "id": completion_id,
            "object": "text_completion",
            "created": 1,
            "model": "m",
            "choices": [],
            "usage": {
                "prompt_tokens": prompt,
                "total_tokens": prompt + completion,
                "completion_tokens": completion,
                "prompt_tokens_details": {"cached_tokens": cached},
            },
        },
        separators=(",", ":"),
    )


def chat_chunk(
    delta: dict[str, str], prompt: int, completion: int, finish: str | None, usage: bool = True
) -> str:
    """One ``/v1/chat/completions`` chunk as vLLM streams it: ``delta`` (role and/or
    content), continuous usage unless ``usage=False``."""
    chunk: dict[str, Any] = {
        "id": "chatcmpl-fake",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "m",
        "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}],
    }
    if usage:
        chunk["usage"] = {
            "prompt_tokens": prompt,
            "total_tokens": prompt + completion,
            "completion_tokens": completion,
        }
    return json.dumps(chunk, separators=(",", ":"))


ERROR_EVENT = json.dumps(
    {
        "error": {
            "message": "fake engine failure",
            "type": "InternalServerError",
            "param": None,
            "code": 500,
        }
    }
)
