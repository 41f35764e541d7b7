"""Keeping secrets out of run files: the command line as recorded, credentials hidden.

``loadgen run bench --header 'Authorization: Bearer X'`` must not leave ``X`` in ``run.json``
or ``manifest.json``: a header that is a credential (``server.net.credentials``: its name, or
a value that reads as one) keeps its name and loses its value; an ``--extra-body`` keeps its
fields and loses the value of every credential key at any depth (``{"api_key": …}``); a URL's
password (``--url http://user:pw@host``) becomes ``***`` (``server.net.urls``).
"""

from __future__ import annotations

import json
from collections.abc import Callable

from server.net.credentials import REDACTED, redact_fields, redact_header_value
from server.net.urls import redact_urls_in


def _redact_header(value: str) -> str:
    name, sep, rest = value.partition(":")
    if not sep:  # not NAME:VALUE (refused before any run): nothing to tell name from secret
        return REDACTED
    redacted = redact_header_value(name.strip(), rest.strip())
    return value if redacted == rest.strip() else f"{name}: {redacted}"


def _redact_extra_body(value: str) -> str:
    try:
        obj = json.loads(value)
    except (ValueError, RecursionError):  # not readable (refused before any run): all of it
        return REDACTED
    redacted = redact_fields(obj)
    return value if redacted == obj else json.dumps(redacted)


#: Flags whose value may hold a secret, and how it is redacted.
_SECRET_FLAGS: dict[str, Callable[[str], str]] = {
    "--header": _redact_header,
    "--extra-body": _redact_extra_body,
}


def redact_command(argv: list[str]) -> list[str]:
    """``argv`` with the secrets of every ``--header NAME:VALUE`` and ``--extra-body JSON``
    (also written ``--flag=value``) replaced by ``<redacted>`` and every URL password by
    ``***``."""
    out: list[str] = []
    pending: Callable[[str], str] | None = None
    for arg in argv:
        if pending is not None:
            out.append(pending(arg))
            pending = None
            continue
        flag, eq, value = arg.partition("=")
        if flag in _SECRET_FLAGS and eq:
            out.append(f"{flag}={_SECRET_FLAGS[flag](value)}")
            continue
        pending = _SECRET_FLAGS.get(arg)
        out.append(arg)
    return [redact_urls_in(arg) for arg in out]
