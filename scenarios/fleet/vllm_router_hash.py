"""vllm-router's ``consistent_hash`` placement, ported bit for bit so the fleet model can
predict it.

Source: vllm-router 0.1.17 (``vllm-project/router``), ``src/policies/consistent_hash.rs``
(``ConsistentHashPolicy``: ``murmur_hash_64a``, ``murmur_rehash_64a``, ``furc_hash``,
``furc_get_bit``, ``fbi_hash``, ``update_hash_ring``, ``find_worker_by_hash``,
``select_worker_with_headers``) and ``src/policies/hash_key.rs`` (``extract_hash_key``).
Pinned against the installed router binary by a test that sends requests through it to
recording upstreams.

- The key of a request with a session header is ``header:{name}:{value}`` of the first of
  :data:`SESSION_HEADERS` it carries. The testbed's load generator sends ``X-Request-Id``
  (the request's id) with every request, so through vllm-router ``consistent_hash`` keys
  each request by its id: a placement blind to prompts (read from the router's log).
- The key of a request without one, nor ``session_params.session_id`` / ``user`` /
  ``session_id`` / ``user_id`` body fields (the testbed sends none), is its routing text:
  ``request_hash:{fbi_hash(text):016x}`` when the text is longer than 100 bytes, else
  ``request:{text}``. The routing text of a completion is its text prompt, but for a token-ID
  prompt only ``token_ids:{count}`` (:func:`routing_text`).
- The ring holds 160 points per worker, ``fbi_hash(f"{url}:{i}")``, in a sorted map (a later
  worker's point overwrites an earlier one's on a collision: ``fbi_hash`` has only 2^23
  distinct values). A key goes to the first point at or after ``fbi_hash(key)``, wrapping to
  the smallest; a worker that is unhealthy or whose breaker is open sends the request to the
  first healthy worker instead.
- ``fbi_hash`` is mcrouter's FurcHash (``furc_hash`` with modulus 2^23 − 1) of the key,
  widened by MurmurHash64A of its 4 little-endian bytes.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence

_M = 0xC6A4A7935BD1E995
_R = 47
_MASK = (1 << 64) - 1
_SEED = 4193360111
_FURC_SHIFT = 23
_FURC_MAX_TRIES = 32
_FURC_MODULUS = (1 << 23) - 1
#: Points per worker on vllm-router's ring (``VIRTUAL_NODES_PER_WORKER``).
VIRTUAL_NODES = 160
#: Texts longer than this many bytes are keyed by their hash, shorter ones by themselves.
_RAW_KEY_MAX_BYTES = 100


def murmur_hash_64a(key: bytes, seed: int) -> int:
    """MurmurHash64A of ``key`` (mcrouter's ``hash.c``), an unsigned 64-bit integer."""
    h = (seed ^ (len(key) * _M)) & _MASK
    whole = len(key) // 8 * 8
    for start in range(0, whole, 8):
        k = int.from_bytes(key[start : start + 8], "little")
        k = (k * _M) & _MASK
        k ^= k >> _R
        k = (k * _M) & _MASK
        h ^= k
        h = (h * _M) & _MASK
    rest = key[whole:]
    if rest:
        for i in range(len(rest) - 1, -1, -1):
            h ^= rest[i] << (8 * i)
        h = (h * _M) & _MASK
    h ^= h >> _R
    h = (h * _M) & _MASK
    h ^= h >> _R
    return h


def murmur_rehash_64a(k: int) -> int:
    """MurmurHash64A of one 64-bit integer with the FurcHash seed (``murmur_rehash_64a``)."""
    h = (_SEED ^ ((8 * _M) & _MASK)) & _MASK
    k = (k * _M) & _MASK
    k ^= k >> _R
    k = (k * _M) & _MASK
    h ^= k
    h = (h * _M) & _MASK
    h ^= h >> _R
    h = (h * _M) & _MASK
    h ^= h >> _R
    return h


class _Bits:
    """``furc_get_bit``: bit ``idx`` of the stream MurmurHash64A(key), rehash, rehash, …"""

    def __init__(self, key: bytes) -> None:
        self.key = key
        self.cache: list[int] = []

    def bit(self, idx: int) -> int:
        word = idx >> 6
        while len(self.cache) <= word:
            n = len(self.cache)
            self.cache.append(
                murmur_hash_64a(self.key, _SEED) if n == 0 else murmur_rehash_64a(self.cache[-1])
            )
        return (self.cache[word] >> (idx & 0x3F)) & 1


def furc_hash(key: bytes, m: int) -> int:
    """mcrouter's FurcHash of ``key`` onto [0, ``m``) (``furc_hash``)."""
    if m <= 1:
        return 0
    bits = _Bits(key)
    d = 0
    while m > (1 << d):
        d += 1
    a = d
    for _ in range(_FURC_MAX_TRIES):
        while not bits.bit(a):
            if d == 0:
                return 0
            d -= 1
            a = d
        a += _FURC_SHIFT
        num = 1
        for _ in range(max(0, d - 1)):
            num = (num << 1) | bits.bit(a)
            a += _FURC_SHIFT
        if num < m:
            return num
    return 0


def fbi_hash(key: str) -> int:
    """vllm-router's ring hash of ``key`` (``fbi_hash``): FurcHash onto 2^23 − 1 values,
    widened by MurmurHash64A of its 4 little-endian bytes."""
    furc = furc_hash(key.encode("utf-8"), _FURC_MODULUS)
    return murmur_hash_64a(furc.to_bytes(4, "little"), _SEED)


def routing_text(token_ids: Sequence[int] | None = None, text: str | None = None) -> str:
    """The text vllm-router 0.1.17's ``consistent_hash`` keys a completion by (without a
    session header): a text prompt as it is; a token-ID prompt as ``token_ids:{count}``: its
    length only, not its tokens (read from the router's own log, which prints the key it
    hashed), so every token-ID prompt of one length lands on one worker whatever its
    content. (``cache_aware`` keys its tree otherwise: :func:`cache_key_of_tokens`.)"""
    if text is not None:
        return text
    return f"token_ids:{len(token_ids or ())}"


#: One past the largest token ID :func:`cache_key_of_tokens` can write (Unicode's range).
_MAX_KEY_TOKEN = 0x110000


def cache_key_of_tokens(token_ids: Sequence[int]) -> str:
    """The key vllm-router 0.1.17's ``cache_aware`` matches a token-ID prompt by, as the
    fleet model holds it: one character per token (``chr`` of its ID), so a common prefix
    counts whole tokens, as the router's does (``scenarios.fleet.cache_aware``).

    Raises:
        ValueError: a token ID outside [0, 0x110000) (no vocabulary comes near).
    """
    try:
        return "".join(map(chr, token_ids))
    except (ValueError, OverflowError):
        bad = next(t for t in token_ids if not 0 <= t < _MAX_KEY_TOKEN)
        raise ValueError(f"token ID {bad} outside [0, {_MAX_KEY_TOKEN})") from None


#: Headers that key a request, first found wins (``hash_key.rs``, ``SESSION_HEADER_NAMES``).
SESSION_HEADERS = (
    "x-session-id",
    "x-user-id",
    "x-tenant-id",
    "x-correlation-id",
    "x-request-id",
    "x-trace-id",
)


def ring_key(text: str, headers: Sequence[tuple[str, str]] = ()) -> str:
    """The ring key of a request with routing text ``text`` and HTTP ``headers`` (name, value)
    (``extract_hash_key``: a session header first, else :func:`hash_key`)."""
    present = {name.lower(): value for name, value in headers if value}
    for name in SESSION_HEADERS:
        if name in present:
            return f"header:{name}:{present[name]}"
    return hash_key(text)


def hash_key(text: str) -> str:
    """The ring key of a request with routing text ``text`` and no session identifier
    (``extract_hash_key``'s fallback)."""
    if len(text.encode("utf-8")) > _RAW_KEY_MAX_BYTES:
        return f"request_hash:{fbi_hash(text):016x}"
    return f"request:{text}"


class ConsistentHashRing:
    """vllm-router's ring over worker URLs ``urls`` (in ``--worker-urls`` order).

    Raises:
        ValueError: no URL.
    """

    def __init__(self, urls: Sequence[str], virtual_nodes: int = VIRTUAL_NODES) -> None:
        if not urls:
            raise ValueError("vllm-router's ring needs at least one worker URL")
        self.urls = list(urls)
        points: dict[int, str] = {}
        for url in self.urls:
            for i in range(virtual_nodes):
                points[fbi_hash(f"{url}:{i}")] = url
        self._positions = sorted(points)
        self._owners = [self.urls.index(points[p]) for p in self._positions]

    def worker_of(self, key: str, healthy: Sequence[bool] | None = None) -> int:
        """Index (in ``urls``) of the worker that takes ``key``; an unhealthy target gives
        the first healthy worker (``healthy``: one flag per URL, default all healthy).

        Raises:
            ValueError: no healthy worker.
        """
        ok = list(healthy) if healthy is not None else [True] * len(self.urls)
        if not any(ok):
            raise ValueError("no healthy worker")
        index = bisect.bisect_left(self._positions, fbi_hash(key))
        target = self._owners[index % len(self._positions)]
        return target if ok[target] else ok.index(True)
