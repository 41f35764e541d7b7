"""A planned request and a phase's requests built lazily: what every workload kind yields."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, overload


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


@dataclass(frozen=True)
class RequestHeader:
    """What a record needs to know about a planned request, without its prompt.

    ``exact_prompt``: the prompt is sent as token IDs, so the server counts exactly
    ``prompt_tokens`` (its usage must say so); false for a text or chat prompt, which the
    server tokenizes itself (``prompt_tokens`` is then the plan's measurement of it).
    """

    request_id: str
    group: str | None
    prompt_tokens: int
    max_tokens: int
    exact_prompt: bool = True


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
