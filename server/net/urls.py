"""Credentials in URLs never written or printed: ``http://user:pw@host`` → ``http://user:***@host``.

A ``--url`` may carry a password (a proxy, a secured server); run files, error messages,
logs and the progress display show the URL with the password replaced. The user name stays
(it tells which account ran), the password (or a lone token in the user-name place,
``http://token@host``) does not.
"""

from __future__ import annotations

import re
from typing import Any, TextIO

#: What replaces the secret part of a URL's user information.
MASK = "***"

# scheme://userinfo@ with userinfo free of '/', '@' and whitespace (RFC 3986 authority).
_USERINFO = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*://)(?P<info>[^/@\s'\"]+)@")


def _masked(match: re.Match[str]) -> str:
    user, sep, _secret = match["info"].partition(":")
    return f"{match['scheme']}{user}:{MASK}@" if sep else f"{match['scheme']}{MASK}@"


def redact_url(url: str) -> str:
    """``url`` with the password of its user information replaced by ``***``
    (``http://u:pw@h:8000/x`` → ``http://u:***@h:8000/x``; a URL without one unchanged)."""
    return _USERINFO.sub(_masked, url)


def redact_urls_in(text: str) -> str:
    """``text`` (a message, a command line argument, a JSON document) with every URL's
    password replaced by ``***``; text without one unchanged."""
    return _USERINFO.sub(_masked, text)


class RedactingStream:
    """A text stream that writes through to ``inner`` with URL passwords masked; every other
    attribute (``isatty``, ``fileno``, ``encoding``, ...) is ``inner``'s, so a console drawing
    on it behaves as on ``inner``."""

    def __init__(self, inner: TextIO) -> None:
        self._inner = inner

    def write(self, text: str) -> int:
        """Write ``text`` with its URL passwords masked; the length of ``text``."""
        self._inner.write(redact_urls_in(text))
        return len(text)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)
