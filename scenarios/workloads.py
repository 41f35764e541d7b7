"""Workload kinds and their materialisation into exact token-ID requests.

Prompts are token-ID lists so their length is exact; tokens are drawn from a seeded generator
keyed by (seed, pool, item), so the same anchor prefix is identical in every phase and case,
and every "fresh" or "unique" prompt is distinct from all others. Materialisation is lazy: a
phase's prompts are built one at a time, when each request is sent.
"""

from __future__ import annotations

import hashlib
from typing import Annotated, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from scenarios.bench_workload import BenchRequests, materialize_bench
from scenarios.requests import PhaseRequests, PlannedRequest, RequestHeader
from scenarios.tokens import TokenSpace, token_array, token_ids
from scenarios.traces import block_token_ids


class AnchoredPrompts(BaseModel):
    """Requests that share one of ``anchors`` prefixes (cycled in order) + a unique suffix.

    Request i uses anchor ``i % anchors``; its group is ``{pool}-{anchor}``.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")
    kind: Literal["anchored"] = "anchored"
    pool: str = "anchors"
    anchors: int = Field(gt=0)
    prefix_tokens: int = Field(gt=0)
    suffix_tokens: int = Field(ge=0)
    requests: int = Field(gt=0)
    output_tokens: int = Field(gt=0)

    @property
    def prompt_tokens(self) -> int:
        return self.prefix_tokens + self.suffix_tokens


class UniquePrompts(BaseModel):
    """Requests whose prompts share nothing with any other request (no prefix reuse).

    ``requests`` is ``None`` only in a phase whose open-loop arrival has a ``duration_s``: the
    count is then the number of arrivals in that duration, fixed when the phase is resolved
    (``PhaseSpec.resolved``) and known before any request of it is sent.

    With ``length_spread`` s > 0, request i's prompt and output lengths are drawn uniformly
    from the integers in [round(L·(1 − s)), round(L·(1 + s))] around ``prompt_tokens`` and
    ``output_tokens`` (each at least 1), seeded by (seed, phase, i), so they are the same in
    every run; s = 0 (the default) keeps every length exact.

    With ``disconnect_after_tokens``, a ``disconnect_fraction`` of the requests (spread evenly:
    request i disconnects when floor((i+1)·f) > floor(i·f)) close their connection after
    receiving that many tokens.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")
    kind: Literal["unique"] = "unique"
    prompt_tokens: int = Field(gt=0)
    requests: Annotated[int, Field(gt=0)] | None
    output_tokens: int = Field(gt=0)
    length_spread: float = Field(default=0.0, ge=0, lt=1)
    disconnect_after_tokens: int | None = Field(default=None, gt=0)
    disconnect_fraction: float = Field(default=1.0, ge=0, le=1)

    def disconnects(self, i: int) -> bool:
        """Whether request ``i`` disconnects early."""
        f = self.disconnect_fraction
        return self.disconnect_after_tokens is not None and int((i + 1) * f) > int(i * f)

    def length_bounds(self, tokens: int) -> tuple[int, int]:
        """(shortest, longest) length drawn around ``tokens`` (equal when no spread)."""
        s = self.length_spread
        return max(1, round(tokens * (1 - s))), max(1, round(tokens * (1 + s)))

    def lengths(self, seed: int, phase: str, i: int) -> tuple[int, int]:
        """(prompt tokens, output tokens) of request ``i`` of ``phase`` (see the class doc)."""
        if self.length_spread == 0:
            return self.prompt_tokens, self.output_tokens
        digest = hashlib.sha256(f"{seed}:{phase}/lengths/{i}".encode()).digest()
        rng = np.random.default_rng(int.from_bytes(digest[:8], "little"))
        (p_lo, p_hi), (o_lo, o_hi) = (
            self.length_bounds(self.prompt_tokens),
            self.length_bounds(self.output_tokens),
        )
        return int(rng.integers(p_lo, p_hi + 1)), int(rng.integers(o_lo, o_hi + 1))


class TraceItem(BaseModel):
    """One trace request as sent (after scaling and any truncation).

    Attributes:
        line: its line in the trace file (1-based): request ids and reports name it.
        input_tokens / output_tokens: prompt length and exact output length (tokens).
        hash_ids: its prefix-block hashes, one per ``TracePrompts.block_tokens`` tokens (the
            last block partial), covering ``input_tokens``.
        session_id / turn: the session it belongs to and its turn (0 = first), if any.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")
    line: int = Field(gt=0)
    input_tokens: int = Field(gt=0)
    output_tokens: int = Field(gt=0)
    hash_ids: tuple[int, ...]
    session_id: str | None = None
    turn: int = Field(default=0, ge=0)


class TracePrompts(BaseModel):
    """The requests of a trace slice, prompts built from their hash ids (``scenarios.traces``).

    Each hash id becomes a deterministic block of ``block_tokens`` token IDs keyed by the
    run seed, ``salt`` and the hash id (``scenarios.traces.block_token_ids``); a prompt is
    its blocks in order, cut to ``input_tokens``. Two requests sharing their first k hash ids
    share exactly their first k blocks. A different ``salt`` (the scenario uses the phase
    name) gives every block new tokens, so phases replaying the same slice share nothing.

    ``trace_sha256`` (the file's content hash), ``token_scale``, the block size and the items
    (what the slice, the length rule and the scale made of the file) are part of the plan and
    so of the workload hash that ``compare`` checks; the file's path is not (the plan's sizing
    keeps it): the same content elsewhere is the same workload.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")
    kind: Literal["trace"] = "trace"
    trace_sha256: str
    token_scale: str
    block_tokens: int = Field(gt=0)
    salt: str
    items: tuple[TraceItem, ...] = Field(min_length=1)

    @property
    def requests(self) -> int:
        """The request count (one per item)."""
        return len(self.items)

    def block_seed(self, seed: int) -> int:
        """The integer seed the blocks of this workload are drawn with
        (:func:`trace_block_seed` of ``seed`` and its salt)."""
        return trace_block_seed(seed, self.salt)


def trace_block_seed(seed: int, salt: str) -> int:
    """The integer seed a trace workload's blocks are drawn with under ``salt`` (the phase
    name): sha256 of ``{seed}:{salt}``, its first 8 bytes read little-endian."""
    digest = hashlib.sha256(f"{seed}:{salt}".encode()).digest()
    return int.from_bytes(digest[:8], "little")


Workload = Annotated[
    AnchoredPrompts | UniquePrompts | TracePrompts | BenchRequests, Field(discriminator="kind")
]


def _request_id(phase: str, i: int) -> str:
    return f"{phase}-{i:04d}"


def materialize(
    workload: AnchoredPrompts | UniquePrompts | TracePrompts | BenchRequests,
    phase: str,
    seed: int,
    space: TokenSpace,
    *,
    headers_only: bool = False,
) -> PhaseRequests:
    """The concrete requests of one phase (deterministic for a given seed), built lazily.

    Request i of an anchored workload is anchor ``i % anchors``'s prefix (the same tokens in
    every phase) + a suffix keyed by (phase, i); of a unique workload, tokens keyed by
    (phase, i). Anchor prefixes are drawn once per call and kept as compact arrays. Request
    i of a trace workload is item i's blocks (:class:`TracePrompts`), drawn once per call
    (:data:`PREBUILT_BLOCK_BYTES`); its id names its trace line (``{phase}-L{line}``) and its
    group its session (``session-{id}``), if any. ``headers_only``: the caller reads only
    :meth:`PhaseRequests.header` (a reader checking records against the plan), so nothing is
    drawn ahead (a trace's blocks are then drawn only if a request is built).
    """
    if isinstance(workload, AnchoredPrompts):
        return _anchored(workload, phase, seed, space)
    if isinstance(workload, TracePrompts):
        return _traced(workload, phase, seed, space, prebuild=not headers_only)
    if isinstance(workload, BenchRequests):
        return materialize_bench(workload, phase, seed, space)
    return _unique(workload, phase, seed, space)


def _anchored(workload: AnchoredPrompts, phase: str, seed: int, space: TokenSpace) -> PhaseRequests:
    prefixes: dict[int, np.ndarray] = {}

    def prefix(anchor: int) -> np.ndarray:
        if anchor not in prefixes:
            prefixes[anchor] = token_array(
                seed, f"{workload.pool}/{anchor}", workload.prefix_tokens, space
            )
        return prefixes[anchor]

    def header(i: int) -> RequestHeader:
        return RequestHeader(
            request_id=_request_id(phase, i),
            group=f"{workload.pool}-{i % workload.anchors}",
            prompt_tokens=workload.prompt_tokens,
            max_tokens=workload.output_tokens,
        )

    def build(i: int) -> PlannedRequest:
        suffix = token_array(seed, f"{phase}/suffix/{i}", workload.suffix_tokens, space)
        h = header(i)
        return PlannedRequest(
            request_id=h.request_id,
            prompt_token_ids=tuple(np.concatenate([prefix(i % workload.anchors), suffix]).tolist()),
            max_tokens=h.max_tokens,
            group=h.group,
        )

    return PhaseRequests(workload.requests, build, header)


def _unique(workload: UniquePrompts, phase: str, seed: int, space: TokenSpace) -> PhaseRequests:
    if workload.requests is None:
        raise ValueError(
            f"phase {phase}: its request count is not resolved yet (a duration-driven open "
            "loop gets it from PhaseSpec.resolved before it runs)"
        )

    def header(i: int) -> RequestHeader:
        prompt_tokens, output_tokens = workload.lengths(seed, phase, i)
        return RequestHeader(
            request_id=_request_id(phase, i),
            group=None,
            prompt_tokens=prompt_tokens,
            max_tokens=output_tokens,
        )

    def build(i: int) -> PlannedRequest:
        prompt_tokens, output_tokens = workload.lengths(seed, phase, i)
        return PlannedRequest(
            request_id=_request_id(phase, i),
            prompt_token_ids=token_ids(seed, f"{phase}/unique/{i}", prompt_tokens, space),
            max_tokens=output_tokens,
            disconnect_after_tokens=(
                workload.disconnect_after_tokens if workload.disconnects(i) else None
            ),
        )

    return PhaseRequests(workload.requests, build, header)


def trace_request_id(phase: str, line: int) -> str:
    """The request id of the trace request on ``line`` in ``phase``: ``{phase}-L{line:05d}``."""
    return f"{phase}-L{line:05d}"


#: Budget of a trace workload's blocks drawn before its phase (int32 token IDs): within it,
#: every distinct block is drawn once, up front, so a request's prompt is only concatenated
#: when it is sent. Drawing a block costs a generator seeding (tens of µs), and a 2,000-token
#: prompt of 16-token blocks is 125 of them: 9 ms p90, 17 ms p99 here when drawn at send
#: time, all of it send lateness. Beyond the budget blocks are drawn when needed.
PREBUILT_BLOCK_BYTES = 256 * 2**20


def _traced(
    workload: TracePrompts, phase: str, seed: int, space: TokenSpace, prebuild: bool = True
) -> PhaseRequests:

    block_seed = workload.block_seed(seed)
    size = workload.block_tokens

    def used(item: TraceItem) -> tuple[int, ...]:
        return item.hash_ids[: -(-item.input_tokens // size)]

    distinct = dict.fromkeys(h for item in workload.items for h in used(item))
    blocks: dict[int, np.ndarray] = {}
    if prebuild and len(distinct) * size * 4 <= PREBUILT_BLOCK_BYTES:
        blocks = {h: block_token_ids(block_seed, h, size, space).astype(np.int32) for h in distinct}

    def block(h: int) -> np.ndarray:
        found = blocks.get(h)
        return found if found is not None else block_token_ids(block_seed, h, size, space)

    def header(i: int) -> RequestHeader:
        item = workload.items[i]
        return RequestHeader(
            request_id=trace_request_id(phase, item.line),
            group=None if item.session_id is None else f"session-{item.session_id}",
            prompt_tokens=item.input_tokens,
            max_tokens=item.output_tokens,
        )

    def build(i: int) -> PlannedRequest:
        # scenarios.traces.prompt_token_ids' rule: the blocks in order, cut to the length.
        item = workload.items[i]
        ids = np.concatenate([block(h) for h in used(item)])[: item.input_tokens]
        h = header(i)
        return PlannedRequest(
            request_id=h.request_id,
            prompt_token_ids=tuple(ids.tolist()),
            max_tokens=h.max_tokens,
            group=h.group,
        )

    return PhaseRequests(len(workload.items), build, header)
