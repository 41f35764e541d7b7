"""Header hygiene for the proxy: hop-by-hop stripping in both directions.

Owns which headers cross the gateway. Hop-by-hop headers (RFC 9110 section 7.6.1: Connection,
Keep-Alive, Proxy-*, TE, Trailer, Transfer-Encoding, Upgrade, and every header named in
``Connection``; the one list is ``server.net.headers``, which the load generator's user headers
obey too) never cross. Framing and routing headers the gateway recomputes itself
(Host, Content-Length) are dropped as well, and upstream requests ask for an uncompressed body
so the gateway can inject SSE error events into it. An upstream that encodes its body anyway is
decoded by the gateway's HTTP client (:data:`DECODED_ENCODINGS`), so what reaches the client is
always identity-coded and carries no ``Content-Encoding``; any other coding is refused
(:func:`undecodable_encoding`), never relayed: one body never mixes encodings.
"""

from __future__ import annotations

from collections.abc import Mapping

from aiohttp.compression_utils import HAS_BROTLI, HAS_ZSTD
from multidict import CIMultiDict, CIMultiDictProxy

from server.net.headers import connection_tokens, is_hop_by_hop

_RECOMPUTED: frozenset[str] = frozenset({"host", "content-length"})

#: Content codings the gateway's aiohttp session decodes (``auto_decompress``): gzip and
#: deflate always, br and zstd when their libraries are installed. Names as aiohttp matches
#: them: one coding, case-insensitive (RFC 9110 §8.4.1), ``x-gzip`` and stacked codings not.
DECODED_ENCODINGS: frozenset[str] = frozenset(
    {"identity", "gzip", "deflate"}
    | ({"br"} if HAS_BROTLI else set())
    | ({"zstd"} if HAS_ZSTD else set())
)


def undecodable_encoding(upstream_headers: CIMultiDictProxy[str] | CIMultiDict[str]) -> str | None:
    """The upstream's ``Content-Encoding`` if the gateway cannot decode it, else ``None``."""
    values = [v.strip() for v in upstream_headers.getall("Content-Encoding", [])]
    if not values or values == [""]:
        return None
    if len(values) == 1 and values[0].lower() in DECODED_ENCODINGS:
        return None
    return ", ".join(values)


def strip_hop_by_hop(headers: Mapping[str, str] | CIMultiDict[str]) -> CIMultiDict[str]:
    """Copy of ``headers`` without hop-by-hop headers; repeated headers are kept."""
    named = connection_tokens(headers)
    items = headers.items()
    return CIMultiDict((k, v) for k, v in items if not is_hop_by_hop(k, named))


#: Forwarding headers a client may not set for itself: the gateway writes what it saw (the
#: host it received, the scheme it was reached by) or drops them. ``X-Forwarded-For`` is
#: appended to instead (below); ``Forwarded`` (RFC 7239), ``X-Real-IP`` and
#: ``X-Forwarded-Port`` claim what only a proxy knows and are dropped.
_CLIENT_FORWARDING: tuple[str, ...] = (
    "x-forwarded-host",
    "x-forwarded-proto",
    "x-forwarded-port",
    "x-real-ip",
    "forwarded",
)


def upstream_request_headers(
    client_headers: Mapping[str, str] | CIMultiDict[str],
    client_ip: str | None,
    host: str | None = None,
    scheme: str | None = None,
) -> CIMultiDict[str]:
    """Headers to send upstream for a client request.

    Drops hop-by-hop, Host and Content-Length (aiohttp sets them for the upstream), forces
    ``Accept-Encoding: identity``, appends the client address (``client_ip``, the TCP peer)
    to ``X-Forwarded-For`` (a client's own list is kept in front, as every proxy does; with
    no known peer the client's list is dropped: nothing vouches for it), sets
    ``X-Forwarded-Host`` to ``host`` (the Host the gateway received) and
    ``X-Forwarded-Proto`` to ``scheme``, and drops the client's own values of those and
    of ``X-Forwarded-Port``, ``X-Real-IP`` and ``Forwarded``: no forwarding header reaches
    the upstream as the client gave it.
    """
    out = strip_hop_by_hop(client_headers)
    for name in (*_RECOMPUTED, "accept-encoding", *_CLIENT_FORWARDING):
        out.popall(name, None)
    out["Accept-Encoding"] = "identity"
    previous = out.popall("X-Forwarded-For", [])
    if client_ip:
        out["X-Forwarded-For"] = ", ".join([*previous, client_ip])
    if host:
        out["X-Forwarded-Host"] = host
    if scheme:
        out["X-Forwarded-Proto"] = scheme
    return out


def client_response_headers(
    upstream_headers: Mapping[str, str] | CIMultiDict[str],
) -> CIMultiDict[str]:
    """Headers to send the client for an upstream response (hop-by-hop and length dropped,
    and ``Content-Encoding``: the relayed body is the decoded one)."""
    out = strip_hop_by_hop(upstream_headers)
    for name in (*_RECOMPUTED, "content-encoding"):
        out.popall(name, None)
    return out
