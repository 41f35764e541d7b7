"""Workload kinds and their materialisation into exact token-ID requests.

Prompts are token-ID lists so their length is exact; tokens are drawn from a seeded generator
keyed by (seed, pool, item), so the same anchor prefix is identical in every phase and case,
and every "fresh" or "unique" prompt is distinct from all others.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Annotated, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field


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
    """

    request_id: str
    prompt_token_ids: tuple[int, ...]
    max_tokens: int
    group: str | None = None
    sampling: dict[str, float] = field(default_factory=lambda: {"temperature": 0.0})
    disconnect_after_tokens: int | None = None


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

    With ``disconnect_after_tokens``, a ``disconnect_fraction`` of the requests (spread evenly:
    request i disconnects when floor((i+1)·f) > floor(i·f)) close their connection after
    receiving that many tokens.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")
    kind: Literal["unique"] = "unique"
    prompt_tokens: int = Field(gt=0)
    requests: int = Field(gt=0)
    output_tokens: int = Field(gt=0)
    disconnect_after_tokens: int | None = Field(default=None, gt=0)
    disconnect_fraction: float = Field(default=1.0, ge=0, le=1)

    def disconnects(self, i: int) -> bool:
        """Whether request ``i`` disconnects early."""
        f = self.disconnect_fraction
        return self.disconnect_after_tokens is not None and int((i + 1) * f) > int(i * f)


Workload = Annotated[AnchoredPrompts | UniquePrompts, Field(discriminator="kind")]


def _tokens(seed: int, key: str, n: int, space: TokenSpace) -> tuple[int, ...]:
    digest = hashlib.sha256(f"{seed}:{key}".encode()).digest()
    rng = np.random.default_rng(int.from_bytes(digest[:8], "little"))
    return tuple(int(x) for x in rng.integers(space.low, space.high, size=n))


def materialize(
    workload: AnchoredPrompts | UniquePrompts, phase: str, seed: int, space: TokenSpace
) -> list[PlannedRequest]:
    """The concrete requests of one phase (deterministic for a given seed)."""
    out: list[PlannedRequest] = []
    if isinstance(workload, AnchoredPrompts):
        prefixes = [
            _tokens(seed, f"{workload.pool}/{a}", workload.prefix_tokens, space)
            for a in range(workload.anchors)
        ]
        for i in range(workload.requests):
            anchor = i % workload.anchors
            suffix = _tokens(seed, f"{phase}/suffix/{i}", workload.suffix_tokens, space)
            out.append(
                PlannedRequest(
                    request_id=f"{phase}-{i:04d}",
                    prompt_token_ids=prefixes[anchor] + suffix,
                    max_tokens=workload.output_tokens,
                    group=f"{workload.pool}-{anchor}",
                )
            )
        return out
    for i in range(workload.requests):
        out.append(
            PlannedRequest(
                request_id=f"{phase}-{i:04d}",
                prompt_token_ids=_tokens(
                    seed, f"{phase}/unique/{i}", workload.prompt_tokens, space
                ),
                max_tokens=workload.output_tokens,
                disconnect_after_tokens=(
                    workload.disconnect_after_tokens if workload.disconnects(i) else None
                ),
            )
        )
    return out
