"""Workload kinds and their materialisation into exact token-ID requests.

Prompts are token-ID lists so their length is exact; tokens are drawn from a seeded generator
keyed by (seed, pool, item), so the same anchor prefix is identical in every phase and case,
and every "fresh" or "unique" prompt is distinct from all others. Materialisation is lazy: a
phase's prompts are built one at a time, when each request is sent.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal, overload

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from scenarios.bench_workload import BenchRequests, materialize_bench


@dataclass(frozen=True)
class PlannedRequest:
    """A request to send.

    Attributes:
        request_id: unique within the run.
        prompt_token_ids: the exact prompt, as token IDs.
        max_tokens: output tokens to generate (with ``ignore_eos`` the exact output length).
        group: prefix group shared by requests with the same prefix, else ``None``.
        sampling: extra body fields (``temperature`` etc.); default greedy.
        disconnect_after_tokens: close the connection after this many generated tokens.
        endpoint: ``completions`` (``/v1/completions``) or ``chat`` (``/v1/chat/completions``).
        prompt_text: a text prompt instead of token IDs (``prompt_token_ids`` then empty; its
            length in tokens is the server's, read from the usage).
        messages: a chat conversation as (role, content) pairs (``chat`` only).
        extra_body: fields merged last into the request body (``--extra-body``).
        headers: HTTP headers sent with the request, as (name, value) pairs.
        ignore_eos: ask for ``ignore_eos`` (exact output length); off for servers without it.
    """

    request_id: str
    prompt_token_ids: tuple[int, ...]
    max_tokens: int
    group: str | None = None
    sampling: dict[str, float] = field(default_factory=lambda: {"temperature": 0.0})
    disconnect_after_tokens: int | None = None
    endpoint: Literal["completions", "chat"] = "completions"
    prompt_text: str | None = None
    messages: tuple[tuple[str, str], ...] | None = None
    extra_body: dict[str, Any] = field(default_factory=dict)
    headers: tuple[tuple[str, str], ...] = ()
    ignore_eos: bool = True


class TokenSpace(BaseModel):
    """Token IDs to draw prompts from: [low, high). Keep inside every model's vocabulary."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    low: int = Field(default=10, ge=0)
    high: int = Field(default=4000, gt=1)


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


Workload = Annotated[AnchoredPrompts | UniquePrompts | BenchRequests, Field(discriminator="kind")]


def _token_array(seed: int, key: str, n: int, space: TokenSpace) -> np.ndarray:
    digest = hashlib.sha256(f"{seed}:{key}".encode()).digest()
    rng = np.random.default_rng(int.from_bytes(digest[:8], "little"))
    return rng.integers(space.low, space.high, size=n)


def _tokens(seed: int, key: str, n: int, space: TokenSpace) -> tuple[int, ...]:
    return tuple(_token_array(seed, key, n, space).tolist())


#: ``n`` token IDs of ``space`` keyed by (seed, key): the same for the same key, in any run.
token_ids = _tokens


@dataclass(frozen=True)
class RequestHeader:
    """What a record needs to know about a planned request, without its prompt."""

    request_id: str
    group: str | None
    prompt_tokens: int
    max_tokens: int


def header_of(planned: PlannedRequest) -> RequestHeader:
    """The header of an already built request."""
    return RequestHeader(
        planned.request_id, planned.group, len(planned.prompt_token_ids), planned.max_tokens
    )


class PhaseRequests(Sequence[PlannedRequest]):
    """The requests of one phase, each built when indexed and not kept.

    ``len()``, indexing (an ``int`` builds one :class:`PlannedRequest`, prompt included; a
    slice builds a list) and iteration; :meth:`header` gives id, group and lengths without
    building the prompt. A 100,000-request phase thus holds no prompt until one is asked for
    (a 1,024-token prompt as a tuple of ints is ≈ 37 KB).
    """

    def __init__(
        self,
        count: int,
        build: Callable[[int], PlannedRequest],
        header: Callable[[int], RequestHeader],
    ) -> None:
        self._count = count
        self._build = build
        self._header = header

    @classmethod
    def of(cls, requests: Sequence[PlannedRequest]) -> PhaseRequests:
        """Requests built already (tests, hand-made plans), behind the same interface."""
        if isinstance(requests, PhaseRequests):
            return requests
        items = list(requests)
        return cls(len(items), items.__getitem__, lambda i: header_of(items[i]))

    def __len__(self) -> int:
        return self._count

    @overload
    def __getitem__(self, index: int) -> PlannedRequest: ...

    @overload
    def __getitem__(self, index: slice) -> list[PlannedRequest]: ...

    def __getitem__(self, index: int | slice) -> PlannedRequest | list[PlannedRequest]:
        if isinstance(index, slice):
            return [self._build(i) for i in range(*index.indices(self._count))]
        return self._build(self._index(index))

    def header(self, index: int) -> RequestHeader:
        """Request id, group and lengths of request ``index``, without building its prompt."""
        return self._header(self._index(index))

    def _index(self, index: int) -> int:
        i = index + self._count if index < 0 else index
        if not 0 <= i < self._count:
            raise IndexError(f"request {index} of a phase of {self._count}")
        return i


def _request_id(phase: str, i: int) -> str:
    return f"{phase}-{i:04d}"


def materialize(
    workload: AnchoredPrompts | UniquePrompts | BenchRequests,
    phase: str,
    seed: int,
    space: TokenSpace,
) -> PhaseRequests:
    """The concrete requests of one phase (deterministic for a given seed), built lazily.

    Request i of an anchored workload is anchor ``i % anchors``'s prefix (the same tokens in
    every phase) + a suffix keyed by (phase, i); of a unique workload, tokens keyed by
    (phase, i). Anchor prefixes are drawn once per call and kept as compact arrays.
    """
    if isinstance(workload, AnchoredPrompts):
        return _anchored(workload, phase, seed, space)
    if isinstance(workload, BenchRequests):
        return materialize_bench(workload, phase, seed, space)
    return _unique(workload, phase, seed, space)


def _anchored(workload: AnchoredPrompts, phase: str, seed: int, space: TokenSpace) -> PhaseRequests:
    prefixes: dict[int, np.ndarray] = {}

    def prefix(anchor: int) -> np.ndarray:
        if anchor not in prefixes:
            prefixes[anchor] = _token_array(
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
        suffix = _token_array(seed, f"{phase}/suffix/{i}", workload.suffix_tokens, space)
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
            prompt_token_ids=_tokens(seed, f"{phase}/unique/{i}", prompt_tokens, space),
            max_tokens=output_tokens,
            disconnect_after_tokens=(
                workload.disconnect_after_tokens if workload.disconnects(i) else None
            ),
        )

    return PhaseRequests(workload.requests, build, header)
