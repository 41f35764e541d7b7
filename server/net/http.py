"""A GET whose answer is never held past a size limit (``httpx``), for every one-off read.

``httpx.AsyncClient.get`` reads the whole body, however large; :func:`get_bounded` streams it
and stops at the first chunk past the limit, so a runaway answer costs at most the limit plus
one network chunk. The result is an ordinary ``httpx.Response`` (``.text``, ``.json()``,
``.is_redirect`` work) holding the body read.
"""

from __future__ import annotations

import httpx

from server.net.limits import too_large


class AnswerTooLarge(httpx.HTTPError):
    """An answer whose body passed the size limit (reading stopped there); an
    ``httpx.HTTPError``, so a caller's ``except httpx.HTTPError`` covers it. Message:
    ``"answer larger than 4194304 bytes"``."""

    def __init__(self, max_bytes: int) -> None:
        super().__init__(too_large("answer", max_bytes))
        self.max_bytes = max_bytes


async def read_bounded(response: httpx.Response, max_bytes: int) -> bytes:
    """The body of a streamed ``response``, at most ``max_bytes`` bytes.

    Reading stops at the first chunk that takes the total past ``max_bytes`` (a declared
    ``Content-Length`` over it stops it before any byte is read).

    Raises:
        AnswerTooLarge: the body is longer than ``max_bytes``.
    """
    declared = response.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > max_bytes:
        raise AnswerTooLarge(max_bytes)
    chunks: list[bytes] = []
    total = 0
    async for chunk in response.aiter_bytes():
        total += len(chunk)
        if total > max_bytes:
            raise AnswerTooLarge(max_bytes)
        chunks.append(chunk)
    return b"".join(chunks)


async def get_bounded(client: httpx.AsyncClient, url: str, max_bytes: int) -> httpx.Response:
    """``GET url`` with the body read to at most ``max_bytes`` bytes (any status).

    Raises:
        AnswerTooLarge: the body is longer than ``max_bytes``.
        httpx.HTTPError: the request failed (connect, timeout, protocol).
    """
    async with client.stream("GET", url) as streamed:
        body = await read_bounded(streamed, max_bytes)
    return httpx.Response(
        streamed.status_code,
        headers=streamed.headers,
        content=body,
        request=streamed.request,
        extensions={"http_version": streamed.extensions.get("http_version", b"HTTP/1.1")},
    )
