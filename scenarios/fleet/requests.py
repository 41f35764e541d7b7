"""What the fleet model needs of each request, and the event orders it replays.

A :class:`FleetRequest` is the single-server model's :class:`CacheRequest` plus what the
routers read: the gateway's routing key (:class:`gateway.routing.PrefixKeys`, the very
function the gateway keys requests with), vllm-router's routing text
(:func:`scenarios.fleet.vllm_router_hash.routing_text`) and the key its ``cache_aware``
matches (:func:`scenarios.fleet.vllm_router_hash.cache_key_of_tokens`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from gateway.routing import PrefixKeys
from scenarios.fleet.vllm_router_hash import cache_key_of_tokens, routing_text
from scenarios.prefix_cache_model import (
    CacheRequest,
    content_block_keys,
    server_block_keys,
)
from scenarios.prefix_cache_model.keys import check_model_blocks
from scenarios.tokens import TokenSpace
from scenarios.traces import Trace, TraceRequest, block_token_ids
from scenarios.workloads import TracePrompts, trace_block_seed, trace_request_id


@dataclass(frozen=True)
class FleetRequest:
    """One request as the fleet model sees it.

    Attributes:
        cache: its prompt blocks and lengths (the single-server model's view).
        prefix_key: the gateway's routing key (``None``: the gateway has none and places the
            request least-loaded).
        router_text: the text vllm-router routes it by.
        headers: the HTTP headers it is sent with (name, value), as vllm-router reads them:
            the load generator's ``X-Request-Id`` keys ``consistent_hash``.
        cache_key: what vllm-router's ``cache_aware`` matches it by: a token-ID prompt's
            tokens, one character each; empty for a text prompt, which it places by load
            (:mod:`scenarios.fleet.cache_aware`).
    """

    cache: CacheRequest
    prefix_key: int | None
    router_text: str
    headers: tuple[tuple[str, str], ...] = ()
    cache_key: str = ""

    @property
    def request_id(self) -> str:
        return self.cache.request_id


def token_fleet_request(
    request_id: str,
    token_ids: Sequence[int],
    output_tokens: int,
    block_tokens: int,
    keys: PrefixKeys | None = None,
    headers: tuple[tuple[str, str], ...] | None = None,
) -> FleetRequest:
    """A request whose prompt is known token by token (a run's planned requests): block
    keys by content (:func:`scenarios.prefix_cache_model.content_block_keys`), the gateway's
    key of the same tokens, vllm-router's text and ``cache_aware`` key of a token-ID prompt,
    and the headers it is sent with (default: the load generator's ``X-Request-Id:
    request_id``).

    Raises:
        ValueError: a token ID outside [0, 2^32), or one above 0x10FFFF
            (:func:`scenarios.fleet.vllm_router_hash.cache_key_of_tokens`).
    """
    return FleetRequest(
        cache=CacheRequest(
            request_id=request_id,
            block_keys=content_block_keys(token_ids, block_tokens),
            prompt_tokens=len(token_ids),
            output_tokens=output_tokens,
        ),
        prefix_key=(keys or PrefixKeys()).of_tokens(token_ids),
        router_text=routing_text(token_ids),
        headers=(("X-Request-Id", request_id),) if headers is None else headers,
        cache_key=cache_key_of_tokens(token_ids),
    )


@dataclass(frozen=True)
class TraceTokens:
    """How a trace replay draws its prompts' tokens: ``scenarios.workloads.TracePrompts``
    with the run's ``seed`` and the phase name as ``salt`` (``trace-replay``'s phase of
    speedup 1 is ``speedup-1x``), in the token ID range ``space``."""

    seed: int = 0
    salt: str = "speedup-1x"
    space: TokenSpace = field(default_factory=TokenSpace)


class _PromptTokens:
    """A trace replay's prompts token by token (``scenarios.traces.prompt_token_ids``' rule:
    the request's blocks in order, cut to its length), each block drawn once and held as
    ``cache_aware``'s key of its tokens (one character per token: compact, and what the
    router's match counts)."""

    def __init__(self, trace_block: int, tokens: TraceTokens) -> None:
        self.trace_block = trace_block
        self.space = tokens.space
        self.seed = trace_block_seed(tokens.seed, tokens.salt)
        self._blocks: dict[int, str] = {}

    def _block(self, hash_id: int) -> str:
        found = self._blocks.get(hash_id)
        if found is None:
            ids = block_token_ids(self.seed, hash_id, self.trace_block, self.space).tolist()
            found = self._blocks[hash_id] = cache_key_of_tokens(ids)
        return found

    def key(self, request: TraceRequest) -> str:
        """The whole prompt of ``request``, one character per token."""
        need = request.input_length
        used = request.hash_ids[: -(-need // self.trace_block)]
        return "".join(self._block(h) for h in used)[:need]


def _replayed(
    request: TraceRequest,
    request_id: str,
    server_block_tokens: int,
    keys: PrefixKeys,
    prompts: _PromptTokens,
    salt: str,
) -> FleetRequest:
    """One trace request as a replay sends it (see :func:`trace_fleet_requests`)."""
    cache = CacheRequest(
        request_id=request_id,
        block_keys=server_block_keys(request, prompts.trace_block, server_block_tokens),
        prompt_tokens=request.input_length,
        output_tokens=request.output_length,
    )
    header = ("X-Request-Id", trace_request_id(salt, request.line))
    text = routing_text(range(request.input_length))
    key = prompts.key(request)
    head = [ord(c) for c in key[: keys.prefix_tokens]]
    return FleetRequest(cache, keys.of_tokens(head), text, (header,), key)


def trace_fleet_requests(
    trace: Trace,
    server_block_tokens: int,
    keys: PrefixKeys | None = None,
    tokens: TraceTokens | None = None,
) -> list[FleetRequest]:
    """Every request of ``trace`` (file order, ids ``line-{n}``) as a replay would send it:
    block keys from its hash ids (:func:`scenarios.prefix_cache_model.server_block_keys`),
    the gateway's key of its first ``keys.prefix_tokens`` tokens drawn as ``tokens`` says,
    vllm-router's text of a token-ID prompt, and the ``X-Request-Id`` the replay sends
    (``scenarios.workloads.trace_request_id`` of the phase ``tokens.salt``).

    Raises:
        ValueError: more blocks than the model holds
            (:func:`scenarios.prefix_cache_model.keys.check_model_blocks`).
    """
    check_model_blocks(trace, server_block_tokens)
    keys, tokens = keys or PrefixKeys(), tokens or TraceTokens()
    prompts = _PromptTokens(trace.block_tokens, tokens)
    return [
        _replayed(r, f"line-{r.line}", server_block_tokens, keys, prompts, tokens.salt)
        for r in trace.requests
    ]


def closed_loop_events(n: int, concurrency: int) -> list[tuple[str, int]]:
    """The event order of ``n`` requests sent by ``concurrency`` clients in a closed loop
    with equal service times: requests 0 … C−1 start, then request i ends just before
    request i + C starts (C = 1: one after another).

    Raises:
        ValueError: ``concurrency`` < 1.
    """
    if concurrency < 1:
        raise ValueError(f"concurrency must be ≥ 1, got {concurrency}")
    events: list[tuple[str, int]] = [("start", i) for i in range(min(concurrency, n))]
    for i in range(n):
        events.append(("end", i))
        if i + concurrency < n:
            events.append(("start", i + concurrency))
    return events


def workload_fleet_requests(
    workload: TracePrompts,
    indices: Sequence[int],
    seed: int,
    server_block_tokens: int,
    keys: PrefixKeys | None = None,
    space: TokenSpace | None = None,
) -> list[FleetRequest]:
    """The requests ``indices`` of a trace-replay phase's workload as the replay sent them
    (ids ``L{line}``), as :func:`trace_fleet_requests` builds them, with the run's ``seed``
    and the phase's salt (the workload's)."""
    tokens = TraceTokens(seed, workload.salt, space or TokenSpace())
    prompts = _PromptTokens(workload.block_tokens, tokens)
    out: list[FleetRequest] = []
    for i in indices:
        item = workload.items[i]
        request = TraceRequest(
            line=item.line, timestamp_ms=None, input_length=item.input_tokens,
            output_length=item.output_tokens, hash_ids=item.hash_ids,
        )  # fmt: skip
        out.append(
            _replayed(request, f"L{item.line}", server_block_tokens, keys or PrefixKeys(),
                      prompts, workload.salt)
        )  # fmt: skip
    return out
