"""Gateway configuration: frozen pydantic models, loadable from a JSON file.

Owns every tunable of the gateway (upstreams, bind address, timeouts, breaker thresholds,
admission bounds, request and response size limits, live health checks, the events file) and
their validation. All durations are seconds (``_s``),
sizes are bytes (``_bytes``), rates are fractions (0-1).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, field_validator

from gateway.routing import DEFAULT_EPSILON, DEFAULT_PREFIX_BLOCKS, DEFAULT_PREFIX_CHARS

#: ``allow_inf_nan=False``: a JSON config file may hold ``NaN`` or ``Infinity`` (Python's
#: reader accepts them), and no setting means anything at such a value.
_FROZEN = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)
#: Ceiling of every time setting (s): one day; a typo of a few zeros more would hold a
#: request, a breaker or a shutdown for years.
MAX_SECONDS = 86400.0
#: Ceiling of every count setting (requests in flight or queued, failures, probes): a
#: million, past the sockets one gateway process can hold open.
MAX_COUNT = 1_000_000
#: Ceiling of the byte limits (a request body, a buffered response, one stream event):
#: 1 GiB (2^30 bytes); above it the limit no longer bounds the gateway's memory.
MAX_BYTES = 2**30


class TimeoutConfig(BaseModel):
    """Layered upstream timeouts, all in seconds.

    ``connect_s`` bounds the TCP connect, ``first_token_s`` the wait from sending the request
    to the first body chunk of a streaming response, ``idle_s`` the gap between two body
    chunks, and ``total_s`` the whole exchange. Non-streaming requests are bounded by
    ``connect_s``, ``idle_s`` (while reading the body) and ``total_s`` only, because their
    first byte arrives when generation ends.
    """

    model_config = _FROZEN

    connect_s: float = Field(
        default=5.0, gt=0, le=MAX_SECONDS, description="Upstream connect timeout, seconds."
    )
    first_token_s: float = Field(
        default=120.0,
        gt=0,
        le=MAX_SECONDS,
        description="Streaming: seconds from sending to the first body chunk.",
    )
    idle_s: float = Field(
        default=60.0, gt=0, le=MAX_SECONDS, description="Seconds allowed between two body chunks."
    )
    total_s: float = Field(
        default=1800.0,
        gt=0,
        le=MAX_SECONDS,
        description="Deadline for the whole exchange, seconds.",
    )


class BreakerConfig(BaseModel):
    """Per-upstream circuit-breaker thresholds.

    The breaker opens on ``consecutive_failures`` failures in a row, or when at least
    ``min_requests`` results in the last ``window_s`` seconds have a failure fraction of at
    least ``error_rate``, and counts a streaming first token slower than
    ``slow_first_token_s`` seconds as a failure (``None`` disables that rule). It stays open
    for ``cooldown_s`` seconds, then admits up to ``half_open_probes`` concurrent probes.
    """

    model_config = _FROZEN

    consecutive_failures: int = Field(
        default=5, ge=1, le=MAX_COUNT, description="Consecutive failures that open a breaker."
    )
    error_rate: float = Field(
        default=0.5,
        gt=0,
        le=1,
        description="Failure fraction (0-1) over the window that opens a breaker.",
    )
    window_s: float = Field(
        default=30.0, gt=0, le=MAX_SECONDS, description="Error-rate window, seconds."
    )
    min_requests: int = Field(
        default=10,
        ge=1,
        le=MAX_COUNT,
        description="Results needed in the window before the error rate counts.",
    )
    slow_first_token_s: float | None = Field(
        default=None,
        gt=0,
        le=MAX_SECONDS,
        description="First-token latency (s) above which a streaming request counts as failed.",
    )
    cooldown_s: float = Field(
        default=10.0,
        ge=0,
        le=MAX_SECONDS,
        description="Seconds a breaker stays open before half-open probes.",
    )
    half_open_probes: int = Field(
        default=1, ge=1, le=MAX_COUNT, description="Concurrent probes admitted while half-open."
    )


class AdmissionConfig(BaseModel):
    """Bounds on concurrent work: in-flight requests and waiters for a slot.

    A request that finds ``max_in_flight`` requests running waits in a queue of at most
    ``max_queue`` waiters for up to ``queue_timeout_s`` seconds; overflow and queue timeouts
    are answered 429 with ``Retry-After: retry_after_s`` (whole seconds).
    """

    model_config = _FROZEN

    max_in_flight: int = Field(
        default=256, ge=1, le=MAX_COUNT, description="Requests forwarded at once."
    )
    max_queue: int = Field(
        default=256, ge=0, le=MAX_COUNT, description="Requests waiting for a slot; beyond it 429."
    )
    queue_timeout_s: float = Field(
        default=30.0,
        gt=0,
        le=MAX_SECONDS,
        description="Seconds a request may wait for a slot before 429.",
    )
    retry_after_s: int = Field(
        default=1, ge=0, le=MAX_SECONDS, description="Retry-After of a 429 (whole seconds)."
    )


class GatewayConfig(BaseModel):
    """Everything the gateway needs to run.

    ``upstreams`` are base URLs (scheme, host, port; no query), e.g. ``http://127.0.0.1:8000``;
    the gateway only ever forwards to these. ``port`` 0 picks a free port.
    ``propagate_cancellation=False`` emulates a broken proxy: on client disconnect the upstream
    stream is drained to its end instead of closed, so the upstream keeps generating.
    ``max_response_bytes`` bounds a buffered (non-streaming) upstream body and one event of an
    upstream stream; beyond it the exchange is an upstream failure (502).
    ``health_check_timeout_s`` bounds the live check of each upstream's ``/health`` that the
    gateway's own ``/health`` makes. ``events_file``, when set, receives one JSON line per
    breaker transition, ``decisions_file`` one per routing decision (:mod:`gateway.events`).
    ``slowdown`` f ≥ 0 is a delay injector (``gateway.proxy.pace``): with t0 the moment the
    request went upstream and t_i the arrival of upstream chunk i, chunk i reaches the client
    at max(previous release, t0 + (1 + f)(t_i − t0)), so TTFT and every inter-token gap are
    (1 + f)× the upstream's (``slowdown_scope`` ``first-token``: the first chunk alone, the
    rest at their arrival once it is out); a non-streamed answer is held f × its upstream time.
    ``holds_file`` receives one line per slowed request (planned and actual holds).
    ``routing`` is the routing policy (docs/fleet.md): ``least-loaded`` (default),
    ``round-robin`` or ``prefix-hash`` with its load slack ``routing_epsilon`` and the prompt
    prefix its key covers (``routing_prefix_blocks`` blocks of token IDs, or
    ``routing_prefix_chars`` characters of a text or chat prompt).
    """

    model_config = _FROZEN

    upstreams: tuple[str, ...] = Field(
        min_length=1, description="Upstream base URL, e.g. http://127.0.0.1:8000."
    )
    host: str = Field(default="127.0.0.1", description="Address to bind.")
    port: int = Field(default=0, ge=0, le=65535, description="Port to bind (0: a free port).")
    propagate_cancellation: bool = Field(
        default=True,
        description="Close the upstream request when the client disconnects; "
        "--no-propagate-cancellation emulates a broken proxy (drain and discard).",
    )
    max_body_bytes: int = Field(
        default=8 * 2**20,
        ge=1,
        le=MAX_BYTES,
        description="Request body limit in bytes (413 above it).",
    )
    max_response_bytes: int = Field(
        default=64 * 2**20,
        ge=1,
        le=MAX_BYTES,
        description="Limit in bytes on a buffered upstream body and on one event of a stream "
        "(502 above).",
    )
    health_check_timeout_s: float = Field(
        default=1.0,
        gt=0,
        le=MAX_SECONDS,
        description="Seconds each upstream's /health may take when the gateway's /health is asked.",
    )
    events_file: Path | None = Field(
        default=None,
        description="Append one JSON line per breaker transition to this file (created at start).",
    )
    decisions_file: Path | None = Field(
        default=None, description="File receiving one JSON line per routing decision."
    )
    slowdown: float = Field(
        default=0.0,
        ge=0,
        le=10,
        description="Delay injector (0: off): every answer reaches the client (1 + slowdown) "
        "times as late as the upstream sent it, counted from the request's send (0.15: TTFT "
        "and every inter-token gap 1.15 times the upstream's).",
    )
    slowdown_scope: Literal["all", "first-token"] = Field(
        default="all",
        description="With --slowdown: 'all' stretches TTFT and every inter-token gap; "
        "'first-token' holds the first token alone and lets the rest catch up (TTFT slowed, "
        "the answer ends with the upstream's: a closed loop's load stays the same).",
    )
    holds_file: Path | None = Field(
        default=None,
        description="With --slowdown: file receiving one JSON line per request with its "
        "planned and actual hold.",
    )

    @field_validator("events_file", "decisions_file", "holds_file", mode="before")
    @classmethod
    def _a_file(cls, value: object) -> object:
        # Read as typed: Path("events.jsonl/") drops the slash and would write a file there.
        if isinstance(value, str) and value.rstrip().endswith(("/", "/.", "/..")):
            raise ValueError(f"{value} names a directory (it ends in /); give a file path")
        return value

    routing: Literal["least-loaded", "round-robin", "prefix-hash"] = Field(
        default="least-loaded",
        description="Routing policy: least-loaded (default), round-robin or prefix-hash.",
    )
    routing_epsilon: float = Field(
        default=DEFAULT_EPSILON,
        ge=0,
        le=100,
        description="prefix-hash: a replica takes at most ceil((1 + epsilon) x mean load).",
    )
    routing_prefix_blocks: int = Field(
        default=DEFAULT_PREFIX_BLOCKS,
        ge=1,
        le=2**16,
        description="prefix-hash: 128-token blocks of a token-ID prompt the key covers.",
    )
    routing_prefix_chars: int = Field(
        default=DEFAULT_PREFIX_CHARS,
        ge=1,
        le=2**24,
        description="prefix-hash: characters of a text or chat prompt the key covers.",
    )
    shutdown_timeout_s: float = Field(default=5.0, ge=0, le=MAX_SECONDS)
    #: Retries on another upstream when the connection is refused (the request never reached
    #: the upstream, so a retry cannot duplicate work). 0 turns retries off.
    connect_retries: int = Field(
        default=1,
        ge=0,
        le=MAX_COUNT,
        description="Retries on another upstream after a refused connection.",
    )
    timeouts: TimeoutConfig = TimeoutConfig()
    breaker: BreakerConfig = BreakerConfig()
    admission: AdmissionConfig = AdmissionConfig()

    @field_validator("upstreams")
    @classmethod
    def _check_upstreams(cls, urls: tuple[str, ...]) -> tuple[str, ...]:
        cleaned = tuple(_normalise_upstream(u) for u in urls)
        if len(set(cleaned)) != len(cleaned):
            raise ValueError(f"duplicate upstream in {list(cleaned)}")
        return cleaned

    @classmethod
    def from_json_file(cls, path: str | Path) -> GatewayConfig:
        """Load and validate a config from a JSON file (raises ``pydantic.ValidationError``)."""
        return cls.model_validate(json.loads(Path(path).read_text()))

    def with_overrides(self, overrides: dict[str, Any]) -> GatewayConfig:
        """Return a validated copy with nested ``overrides`` applied (``None`` values skipped).

        ``overrides`` mirrors the model's shape, e.g. ``{"timeouts": {"idle_s": 5.0}}``.
        """
        merged = _deep_merge(self.model_dump(), overrides)
        return type(self).model_validate(merged)


def _normalise_upstream(url: str) -> str:
    parts = urlsplit(url.strip())
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"upstream must be an http(s) URL with a host, got {url!r}")
    try:  # urlsplit reads the port only when asked: http://h:99999 passed, and ran
        port = parts.port
    except ValueError as exc:
        raise ValueError(f"upstream {url!r}: {exc} (a TCP port is 1-65535)") from None
    if port == 0:
        raise ValueError(f"upstream {url!r}: port 0 is not a server port (a TCP port is 1-65535)")
    if parts.query or parts.fragment:
        raise ValueError(f"upstream must not have a query or fragment, got {url!r}")
    path = parts.path.rstrip("/")
    if path.endswith("/v1") or "/v1/" in path:
        # The gateway appends the client's whole path (/v1/completions) to the upstream.
        raise ValueError(f"upstream {url!r}: drop /v1, the client's path already starts with it")
    return f"{parts.scheme}://{parts.netloc}{parts.path.rstrip('/')}"


def _deep_merge(base: dict[str, Any], overrides: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in overrides.items():
        if value is None:
            continue
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _deep_merge(out[key], value)
        else:
            out[key] = value
    return out
