"""The ``bench`` workload kind: synthetic token-ID prompts or dataset rows, for either endpoint.

One kind serves the everyday benchmark (``scenarios.bench``): requests go to
``/v1/completions`` or ``/v1/chat/completions``, with extra body fields and headers, and their
prompts are either synthetic token IDs (exact lengths, drawn like ``UniquePrompts``) or the
rows a dataset file gave (``scenarios.bench_dataset``: text, chat messages or token IDs),
copied into the plan so a run directory holds everything it sent.

Header values and extra body fields that are credentials (``server.net.credentials``:
``Authorization``, API keys, tokens, signatures, cookies, ``api_key`` at any depth of the body)
are kept in memory for sending and written as ``<redacted>`` whenever the workload is
serialised (``plan.json``, the workload hash), so no run file holds a secret.
"""

from __future__ import annotations

import hashlib
from typing import Annotated, Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, field_serializer, model_validator

from scenarios.request_extras import recorded_extra_body, recorded_headers
from scenarios.requests import PhaseRequests, PlannedRequest, RequestHeader
from scenarios.tokens import TokenSpace, token_ids

Endpoint = Literal["completions", "chat"]


class BenchItem(BaseModel):
    """One prompt of a dataset, as sent.

    Exactly one of ``prompt_text``, ``messages`` ((role, content) pairs) and
    ``prompt_token_ids``. ``prompt_tokens`` is its length measured with the tokenizer at plan
    time (the chat template applied for messages; exact for token IDs); the server's own
    count arrives in each response's usage. ``row`` is its position in the dataset.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")
    row: int = Field(ge=0)
    prompt_text: str | None = None
    messages: tuple[tuple[str, str], ...] | None = None
    prompt_token_ids: tuple[int, ...] | None = None
    prompt_tokens: int = Field(gt=0)
    output_tokens: int = Field(gt=0)

    @model_validator(mode="after")
    def _one_prompt(self) -> BenchItem:
        given = [x is not None for x in (self.prompt_text, self.messages, self.prompt_token_ids)]
        if sum(given) != 1:
            raise ValueError(f"row {self.row}: exactly one of text, messages, token IDs")
        return self


class BenchRequests(BaseModel):
    """``requests`` requests to ``endpoint``; synthetic (``items`` empty) or from ``items``.

    Synthetic: request i's prompt is ``prompt_tokens`` token IDs keyed by (seed, phase, i),
    its output ``output_tokens``; with a spread s > 0 a length L is drawn uniformly from the
    integers in [round(L·(1 − s)), round(L·(1 + s))] (at least 1), seeded by (seed, phase, i).
    Dataset: request i sends ``items[i % len(items)]``.

    ``extra_body`` is merged into every body (never over a field the plan sets:
    ``scenarios.request_extras``), ``headers`` go with every request; ``ignore_eos`` asks for
    exact output lengths.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")
    kind: Literal["bench"] = "bench"
    requests: Annotated[int, Field(gt=0)] | None
    endpoint: Endpoint = "completions"
    prompt_tokens: int = Field(default=256, gt=0)
    output_tokens: int = Field(default=64, gt=0)
    input_spread: float = Field(default=0.0, ge=0, lt=1)
    output_spread: float = Field(default=0.0, ge=0, lt=1)
    items: tuple[BenchItem, ...] = ()
    temperature: float = Field(default=0.0, ge=0)
    ignore_eos: bool = True
    extra_body: dict[str, Any] = Field(default_factory=dict)
    headers: tuple[tuple[str, str], ...] = ()

    @field_serializer("headers")
    def _redact(self, headers: tuple[tuple[str, str], ...]) -> list[list[str]]:
        return recorded_headers(headers)

    @field_serializer("extra_body")
    def _redact_body(self, extra_body: dict[str, Any]) -> dict[str, Any]:
        return recorded_extra_body(extra_body)

    @model_validator(mode="after")
    def _chat_needs_text(self) -> BenchRequests:
        if self.endpoint == "chat" and not self.items:
            raise ValueError("the chat endpoint needs text prompts: give a dataset")
        if self.endpoint == "chat" and any(i.prompt_token_ids for i in self.items):
            raise ValueError("the chat endpoint takes text, not token IDs")
        if self.endpoint == "completions" and any(i.messages for i in self.items):
            raise ValueError("chat messages need the chat endpoint")
        return self

    def lengths(self, seed: int, phase: str, i: int) -> tuple[int, int]:
        """(planned prompt tokens, output tokens) of request ``i`` of ``phase``."""
        if self.items:
            item = self.items[i % len(self.items)]
            return item.prompt_tokens, item.output_tokens
        if self.input_spread == 0 and self.output_spread == 0:
            return self.prompt_tokens, self.output_tokens
        digest = hashlib.sha256(f"{seed}:{phase}/lengths/{i}".encode()).digest()
        rng = np.random.default_rng(int.from_bytes(digest[:8], "little"))

        def draw(length: int, spread: float) -> int:
            lo, hi = max(1, round(length * (1 - spread))), max(1, round(length * (1 + spread)))
            return int(rng.integers(lo, hi + 1))

        return draw(self.prompt_tokens, self.input_spread), draw(
            self.output_tokens, self.output_spread
        )


def materialize_bench(
    workload: BenchRequests, phase: str, seed: int, space: TokenSpace
) -> PhaseRequests:
    """The requests of one bench phase, built lazily (see :class:`BenchRequests`).

    Raises:
        ValueError: the request count is not resolved yet.
    """
    if workload.requests is None:
        raise ValueError(f"phase {phase}: its request count is not resolved yet")
    sampling = {"temperature": workload.temperature}

    def header(i: int) -> RequestHeader:
        prompt, output = workload.lengths(seed, phase, i)
        items = workload.items
        exact = not items or items[i % len(items)].prompt_token_ids is not None
        return RequestHeader(f"{phase}-{i:04d}", None, prompt, output, exact)

    def build(i: int) -> PlannedRequest:
        h = header(i)
        common: dict[str, Any] = {
            "request_id": h.request_id,
            "max_tokens": h.max_tokens,
            "sampling": sampling,
            "endpoint": workload.endpoint,
            "extra_body": workload.extra_body,
            "headers": workload.headers,
            "ignore_eos": workload.ignore_eos,
        }
        if not workload.items:
            ids = token_ids(seed, f"{phase}/unique/{i}", h.prompt_tokens, space)
            return PlannedRequest(prompt_token_ids=ids, **common)
        item = workload.items[i % len(workload.items)]
        return PlannedRequest(
            prompt_token_ids=item.prompt_token_ids or (),
            prompt_text=item.prompt_text,
            messages=item.messages,
            **common,
        )

    return PhaseRequests(workload.requests, build, header)
