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

# scheme://userinfo@ with userinfo free of '/', whitespace and quotes, up to the LAST '@'
# before them (greedy): a URL parser takes the last '@' of the authority as the end of the
# user information, so an '@' inside a password must not end the match early.
#
# Linear in the text, which matters because every run file and console line passes through
# here: a match may only start where a run of scheme characters starts (the lookbehind), so
# the scan does not restart at every letter of a long run (``[A-Za-z][A-Za-z0-9+.-]*://``
# alone retried at each of n letters and cost O(n²)). The scheme is the run from its first
# letter (``lead`` holds the digits and ``+.-`` before it, written back unchanged), taken
# possessively; ``info`` cannot hold '/' so the segments scanned after two '://' never overlap.
_USERINFO = re.compile(
    r"(?<![A-Za-z0-9+.-])(?P<lead>[0-9+.-]*+)(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*+://)"
    r"(?P<info>[^/\s'\"]+)@"
)


def _masked(match: re.Match[str]) -> str:
    user, sep, _secret = match["info"].partition(":")
    head = f"{match['lead']}{match['scheme']}"
    return f"{head}{user}:{MASK}@" if sep else f"{head}{MASK}@"


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
