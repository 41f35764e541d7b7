"""HTTP header rules shared by the load generator and the gateway: which headers belong to
one connection, and which user-given headers a request may carry.

Hop-by-hop headers (RFC 9110 §7.6.1: Connection, Keep-Alive, Proxy-*, TE, Trailer,
Transfer-Encoding, Upgrade, and every header named in ``Connection``) describe one connection;
a proxy never forwards them (``gateway.headers``) and a user never sets them
(:func:`check_user_headers`). A user header (``loadgen run bench --header``) may also not set
what the client owns: the message framing (Content-Length, Host, Expect), the body's type and
coding (Content-Type, Content-Encoding: the body is the plan's JSON) and the response's coding
(Accept-Encoding: the stream is timed as it arrives, never through a decompressor's buffer).
Sent anyway, a Content-Length or Transfer-Encoding desynchronises the keep-alive connection
and every later request on it fails as if the server had.

Names are RFC 9110 tokens; values are visible ASCII with spaces and tabs inside (no CR, LF,
NUL, other control characters or DEL, which split or corrupt the request; no bytes above
0x7F, obsolete in RFC 9110 §5.5). Sizes are bounded so every server's default limits hold
them (:data:`HEADER_MAX_BYTES`, :data:`HEADERS_MAX_BYTES`).
"""

from __future__ import annotations

import string
from collections.abc import Iterable, Mapping, Sequence

#: Hop-by-hop headers by name (lower case); any ``Proxy-*`` is one too (:func:`is_hop_by_hop`).
HOP_BY_HOP: frozenset[str] = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "proxy-connection",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
    }
)

#: End-to-end headers the client sets itself and a user may not (lower case): framing and
#: routing (Content-Length, Host, Expect) and the codings of the body and the response.
CLIENT_OWNED: frozenset[str] = frozenset(
    {"content-length", "host", "expect", "content-type", "content-encoding", "accept-encoding"}
)

#: Largest user header, name and value together (4 KiB = 4,096 bytes): half of the 8 KiB a
#: header line may take in aiohttp (8,190 bytes) and nginx (``large_client_header_buffers``);
#: a JWT or a cookie is well under it.
HEADER_MAX_BYTES = 4096
#: Largest total of the user headers, each counted as ``name: value`` plus CRLF (8 KiB =
#: 8,192 bytes): half of the 16 KiB that h11 (uvicorn's parser, vLLM's API server) allows the
#: whole request head, leaving the rest to the request line and the client's own headers.
HEADERS_MAX_BYTES = 8192

# RFC 9110 §5.6.2 tchar.
_TOKEN_CHARS = frozenset("!#$%&'*+-.^_`|~" + string.digits + string.ascii_letters)


def connection_tokens(headers: Mapping[str, str] | Iterable[tuple[str, str]]) -> set[str]:
    """Lower-cased header names listed in every ``Connection`` header of ``headers``."""
    items = headers.items() if isinstance(headers, Mapping) else headers
    values = [v for k, v in items if k.lower() == "connection"]
    return {tok.strip().lower() for value in values for tok in value.split(",") if tok.strip()}


def is_hop_by_hop(name: str, named_in_connection: set[str] | frozenset[str] = frozenset()) -> bool:
    """Whether header ``name`` is hop-by-hop (fixed list, any ``Proxy-*``, or named there)."""
    lower = name.lower()
    return lower in HOP_BY_HOP or lower.startswith("proxy-") or lower in named_in_connection


def _control_char(text: str) -> str | None:
    """The first character of ``text`` a header value may not hold, shown as ``\\xNN``."""
    for char in text:
        code = ord(char)
        if (code < 0x20 and char != "\t") or code == 0x7F or code > 0x7E:
            return f"\\x{code:02x}" if code <= 0xFF else f"\\u{code:04x}"
    return None


def header_problem(name: str, value: str) -> str | None:
    """Why ``name: value`` may not be sent as a user header, else ``None``. The reason names
    the header and the offending character, never the value (it may be a secret)."""
    if not name:
        return "header name '' is empty (letters, digits, !#$%&'*+-.^_`|~)"
    bad = next((c for c in name if c not in _TOKEN_CHARS), None)
    if bad is not None:
        # Shown escaped, never raw (a control character would reach the terminal), and named:
        # "X-?" read as a typed question mark when the user typed X-Ü.
        shown, what = (t.encode("unicode_escape").decode("ascii") for t in (name[:64], bad))
        return (f"header name '{shown}' is not an HTTP token: '{what}' may not be in it "
                "(letters, digits, !#$%&'*+-.^_`|~)")  # fmt: skip
    lower = name.lower()
    if is_hop_by_hop(lower):
        return f"header {name} is hop-by-hop (it describes one connection): it is not sent"
    if lower in CLIENT_OWNED:
        return f"header {name} is set by the client itself (framing or coding of the request)"
    bad = _control_char(value)
    if bad is not None:
        return (
            f"header {name}: its value holds {bad}; a value is visible ASCII, spaces and tabs "
            "(no CR, LF, NUL or other control characters, nothing above 0x7E)"
        )
    size = len(name.encode()) + len(value.encode())
    if size > HEADER_MAX_BYTES:
        return f"header {name} is {size:,} bytes, name and value; at most {HEADER_MAX_BYTES:,}"
    return None


def check_user_headers(headers: Sequence[tuple[str, str]]) -> None:
    """Refuse user headers that cannot be sent as given (the module doc's rules).

    Raises:
        ValueError: a header breaks a rule (:func:`header_problem`), a name is given twice
            (case-insensitive: the server would see one of them), or all together exceed
            :data:`HEADERS_MAX_BYTES`; the message names the header, never its value.
    """
    seen: set[str] = set()
    total = 0
    for name, value in headers:
        problem = header_problem(name, value)
        if problem is not None:
            raise ValueError(problem)
        if name.lower() in seen:
            raise ValueError(f"header {name} is given twice")
        seen.add(name.lower())
        total += len(name.encode()) + len(value.encode()) + 4  # ": " and CRLF
    if total > HEADERS_MAX_BYTES:
        raise ValueError(
            f"the headers are {total:,} bytes together (name: value and CRLF each); at most "
            f"{HEADERS_MAX_BYTES:,}"
        )
