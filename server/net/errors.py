"""One line describing an exception, never empty: type, message, and the errno behind it.

``str(TimeoutError())`` is ``""``, so ``f"cannot reach {url}: {exc}"`` ends in nothing for a
connect timeout; an ``httpx.ConnectError`` hides the ``ECONNREFUSED`` of the socket in its
cause. :func:`describe_exception` names the kind (the type, the errno's or DNS code's symbolic
name) and the message, and redacts URL credentials the message may quote.
"""

from __future__ import annotations

import errno
import socket

from server.net.urls import redact_urls_in

#: getaddrinfo's error codes (negative, not in ``errno``) by number: EAI_NONAME, EAI_AGAIN, ...
_EAI_NAMES = {
    getattr(socket, name): name for name in dir(socket) if name.startswith("EAI_")
}  # fmt: skip


def _code_name(exc: BaseException) -> str | None:
    """Symbolic name of the errno (or DNS code) of ``exc`` or of the first cause that has one."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        code = getattr(current, "errno", None)
        if isinstance(code, int):
            if isinstance(current, socket.gaierror) and code in _EAI_NAMES:
                return _EAI_NAMES[code]
            if code in errno.errorcode:
                return errno.errorcode[code]
        current = current.__cause__ or current.__context__
    return None


def _first_text(exc: BaseException) -> str:
    """The message of ``exc``, else of the first exception in its cause chain with one."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        text = str(current).strip()
        if text:
            return text if current is exc else f"{type(current).__name__}: {text}"
        current = current.__cause__ or current.__context__
    return ""


def describe_exception(exc: BaseException) -> str:
    """``"Type: message (ERRNO)"`` for ``exc``: never empty, one line, URL passwords masked.

    An empty message falls back to the first cause with one, else to the type alone; a
    timeout (``TimeoutError`` and types named ``*Timeout*``) without a message of its own is
    ``"timed out"``, whatever caused it;
    the symbolic errno (``ECONNREFUSED``, ``ENOSPC``, ``EAI_NONAME``) is added when the
    exception or a cause carries one the message does not already name.
    Examples: ``TimeoutError: timed out``; ``ConnectError: [Errno 111] Connection refused
    (ECONNREFUSED)``; ``OSError: [Errno 28] No space left on device (ENOSPC)``.
    """
    name = type(exc).__name__
    timeout = isinstance(exc, TimeoutError) or "Timeout" in name
    # A timeout's own words, not its cause's: httpx's ReadTimeout is caused by anyio's
    # CancelledError, whose text is a cancel scope's id ("ReadTimeout: CancelledError: ").
    text = str(exc).strip() if timeout else _first_text(exc)
    if not text and timeout:
        text = "timed out"
    code = _code_name(exc)
    line = f"{name}: {text}" if text else name
    if code and code not in line:
        line += f" ({code})"
    return redact_urls_in(" ".join(line.split()))
