"""Keeping secrets out of run files: the command line as recorded, credential headers hidden.

``loadgen run bench --header 'Authorization: Bearer X'`` must not leave ``X`` in ``run.json``
or ``manifest.json``; a header whose name looks like a credential
(``scenarios.bench_workload.is_credential``) keeps its name and loses its value; a URL's
password (``--url http://user:pw@host``) becomes ``***`` (``server.net.urls``).
"""

from __future__ import annotations

from scenarios.bench_workload import REDACTED, is_credential
from server.net.urls import redact_urls_in

_HEADER_FLAGS = ("--header",)


def _redact_header(value: str) -> str:
    name, sep, _ = value.partition(":")
    return f"{name}:{' ' if sep else ''}{REDACTED}" if is_credential(name) else value


def redact_command(argv: list[str]) -> list[str]:
    """``argv`` with the value of every credential header (``--header NAME:VALUE`` or
    ``--header=NAME:VALUE``) replaced by ``<redacted>`` and every URL password by ``***``."""
    return [redact_urls_in(arg) for arg in _redact_headers(argv)]


def _redact_headers(argv: list[str]) -> list[str]:
    out: list[str] = []
    after_flag = False
    for arg in argv:
        if after_flag:
            out.append(_redact_header(arg))
            after_flag = False
            continue
        flag, eq, value = arg.partition("=")
        if flag in _HEADER_FLAGS and eq:
            out.append(f"{flag}={_redact_header(value)}")
            continue
        after_flag = arg in _HEADER_FLAGS
        out.append(arg)
    return out
