"""One streamed ``/v1/completions`` request → one :class:`RequestRecord`.

Nothing raised inside a request escapes: connection errors, HTTP errors, error events inside
a 200 stream and a usage mismatch all end up in the record's ``status``/``error`` fields.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

import aiohttp

from loadgen.clock import Clock
from loadgen.records import RequestRecord
from loadgen.sse import DONE, SSEDecoder, parse_chunk
from scenarios.workloads import PlannedRequest


@dataclass(frozen=True)
class Target:
    """Where requests go: base URL (``http://127.0.0.1:PORT``) and served model name."""

    url: str
    model: str


def completion_body(planned: PlannedRequest, model: str) -> dict[str, object]:
    """The JSON body for ``/v1/completions``: token-ID prompt, exact length, streamed usage."""
    return {
        "model": model,
        "prompt": list(planned.prompt_token_ids),
        "max_tokens": planned.max_tokens,
        "ignore_eos": True,
        "stream": True,
        "stream_options": {"include_usage": True, "continuous_usage_stats": True},
        **planned.sampling,
    }


def _check_usage(record: RequestRecord, planned: PlannedRequest) -> str | None:
    """A mismatch between what was asked and what the server says it did, else ``None``."""
    if record.usage_prompt_tokens is not None and record.usage_prompt_tokens != len(
        planned.prompt_token_ids
    ):
        return (
            f"usage.prompt_tokens={record.usage_prompt_tokens} but "
            f"{len(planned.prompt_token_ids)} prompt tokens were sent"
        )
    if record.usage_completion_tokens is None:
        return "no usage reported"
    if record.usage_completion_tokens != planned.max_tokens:
        return (
            f"usage.completion_tokens={record.usage_completion_tokens}, "
            f"max_tokens={planned.max_tokens} asked with ignore_eos"
        )
    if record.output_tokens != record.usage_completion_tokens:
        return (
            f"counted {record.output_tokens} streamed tokens, "
            f"usage says {record.usage_completion_tokens}"
        )
    return None


async def send_request(
    session: aiohttp.ClientSession,
    target: Target,
    planned: PlannedRequest,
    record: RequestRecord,
    clock: Clock,
) -> RequestRecord:
    """Send ``planned``, stream the response, and fill ``record`` in place (also returned).

    TTFT/ITL inputs are the arrival stamps of chunks that carry at least one generated token
    (``record.chunk_ns`` / ``chunk_tokens``); the final usage-only chunk adds no stamp.
    """
    decoder = SSEDecoder()
    seen_tokens = 0
    record.sent_ns = clock.now_ns()
    try:
        async with session.post(
            f"{target.url}/v1/completions", json=completion_body(planned, target.model)
        ) as response:
            record.http_status = response.status
            record.upstream = response.headers.get("X-Gateway-Upstream")
            if response.status != 200:
                text = await response.text()
                record.status = "error"
                record.error = f"HTTP {response.status}: {text[:300]}"
                return record
            async for line in response.content:
                now = clock.now_ns()
                data = decoder.feed_line(line)
                if data is None:
                    continue
                if data == DONE:
                    break
                chunk = parse_chunk(data)
                if chunk.error is not None:
                    record.status = "error"
                    record.error = f"error event in stream: {chunk.error}"
                    return record
                if chunk.completion_tokens is not None:
                    new_tokens = chunk.completion_tokens - seen_tokens
                    if new_tokens > 0:
                        record.chunk_ns.append(now)
                        record.chunk_tokens.append(new_tokens)
                        seen_tokens = chunk.completion_tokens
                    record.usage_completion_tokens = chunk.completion_tokens
                if chunk.prompt_tokens is not None:
                    record.usage_prompt_tokens = chunk.prompt_tokens
                if chunk.cached_tokens is not None:
                    record.cached_tokens = chunk.cached_tokens
                if chunk.finish_reason is not None:
                    record.finish_reason = chunk.finish_reason
                limit = planned.disconnect_after_tokens
                if limit is not None and seen_tokens >= limit:
                    record.disconnect_ns = clock.now_ns()
                    record.status = "aborted"
                    response.close()  # drop the connection: the server should abort the request
                    return record
        mismatch = _check_usage(record, planned)
        record.status = "error" if mismatch else "ok"
        record.error = mismatch
    except asyncio.CancelledError:
        record.status = "error"
        record.error = "cancelled before completion (run interrupted)"
        raise
    except (TimeoutError, aiohttp.ClientError, ValueError, OSError) as exc:
        record.status = "error"
        record.error = f"{type(exc).__name__}: {exc}"
    finally:
        record.end_ns = clock.now_ns()
    return record
