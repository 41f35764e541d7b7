"""Credentials in URLs never written or printed: ``http://user:pw@host`` → ``http://user:***@host``.

A ``--url`` may carry a password (a proxy, a secured server); run files, error messages,
logs and the progress display show the URL with the password replaced. The user name stays
(it tells which account ran), the password (or a lone token in the user-name place,
``http://token@host``) does not.
"""

from __future__ import annotations

import re
import string
from typing import Any, TextIO

#: What replaces the secret part of a URL's user information.
MASK = "***"

# scheme://userinfo@ with userinfo free of '/', whitespace and quotes, up to the LAST '@'
# before them: a URL parser takes the last '@' of the authority as the end of the user
# information, so an '@' inside a password must not end it early. The scheme is the run of
# scheme characters before '://' from its first letter.
#
# Found from each '://' outwards rather than by one regular expression: a pattern starting
# at the scheme (``[A-Za-z][A-Za-z0-9+.-]*://``) is retried at every letter of a long run,
# O(n²), and every run file and console line passes through here. The pieces scanned for two
# '://' never overlap (a scheme holds no ':' or '/', user information no '/'), so the work
# is linear, and done by C string methods: text without '://' costs one scan.
_SCHEME_CHARS = string.ascii_letters + string.digits + "+.-"
_NOT_FIRST = string.digits + "+.-"
_INFO = re.compile(r"[^/\s'\"]+")


def redact_url(url: str) -> str:
    """``url`` with the password of its user information replaced by ``***``
    (``http://u:pw@h:8000/x`` → ``http://u:***@h:8000/x``; a URL without one unchanged).

    One URL as given, however malformed: without a scheme (``u:pw@h:8000``) its authority is
    what precedes the first ``/``, and the user information ends at the authority's last
    ``@``, as a URL parser reads it (``http://u@x:pw@h`` → ``http://u@x:***@h``); whitespace
    does not end it (``http://u:p w@h`` → ``http://u:***@h``)."""
    scheme, sep, rest = url.partition("://")
    if not sep:
        scheme, rest = "", url
    authority, slash, tail = rest.partition("/")
    if "@" not in authority:
        return url
    info, _, host = authority.rpartition("@")
    user, colon, _secret = info.partition(":")
    masked = f"{user}:{MASK}" if colon else MASK
    return f"{scheme}{sep}{masked}@{host}{slash}{tail}"


def redact_urls_in(text: str) -> str:
    """``text`` (a message, a command line argument, a JSON document) with every URL's
    password replaced by ``***``; text without one unchanged."""
    pos = text.find("://")
    if pos == -1:
        return text
    out: list[str] = []
    done = floor = 0  # copied up to ``done``; no scheme starts before ``floor``
    while pos != -1:
        before = text[floor:pos]
        scheme = before[len(before.rstrip(_SCHEME_CHARS)) :].lstrip(_NOT_FIRST)
        info = _INFO.match(text, pos + 3)
        at = info.group().rfind("@") if info else -1
        floor = pos + 3
        if scheme and info and at > 0:
            user, sep, _secret = info.group()[:at].partition(":")
            out += [
                text[done : pos - len(scheme)],
                scheme,
                "://",
                f"{user}:{MASK}@" if sep else f"{MASK}@",
            ]
            done = floor = pos + 3 + at + 1
        pos = text.find("://", floor)
    out.append(text[done:])
    return "".join(out)


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
