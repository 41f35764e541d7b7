"""Arrival patterns: when each request of a phase is sent.

- closed-loop: a fixed number C of requests in flight; the next is sent when one finishes.
- all-at-once: every request sent at the phase start (closed-loop with C = all).
- open-loop: requests sent at precomputed offsets from the phase start (rate λ), regardless
  of completions; inter-arrival gaps are gamma-distributed with shape = ``burstiness``
  (1.0 = Poisson), mean 1/λ, as in vLLM's ``bench serve``. An optional ``max_concurrency``
  caps requests in flight at the client (vLLM bench's ``--max-concurrency``): an arrival that
  finds the cap reached waits for a slot, and the record keeps that wait (``admitted_ns``).

Offsets are a pure, seeded function; the sender sleeps until start + offset (absolute, so
lateness does not accumulate) and the records keep the scheduled time to show lateness.
"""

from __future__ import annotations

from typing import Annotated, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field


class ClosedLoop(BaseModel):
    """Keep ``concurrency`` requests in flight."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    kind: Literal["closed_loop"] = "closed_loop"
    concurrency: int = Field(gt=0)


class AllAtOnce(BaseModel):
    """Send every request at the phase start."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    kind: Literal["all_at_once"] = "all_at_once"


class OpenLoop(BaseModel):
    """Send at ``rate_rps`` requests/s on average, gamma inter-arrivals (shape = burstiness).

    ``max_concurrency``: at most this many requests in flight (``None``: no client cap).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")
    kind: Literal["open_loop"] = "open_loop"
    rate_rps: float = Field(gt=0)
    burstiness: float = Field(default=1.0, gt=0)
    seed: int = 0
    max_concurrency: int | None = Field(default=None, gt=0)


Arrival = Annotated[ClosedLoop | AllAtOnce | OpenLoop, Field(discriminator="kind")]


def open_loop_offsets_ns(arrival: OpenLoop, n: int) -> list[int]:
    """Send offsets (ns from phase start) for ``n`` requests; the first is at 0.

    Gaps ~ Gamma(shape=burstiness, scale=1/(λ·burstiness)), so the mean gap is 1/λ s.
    """
    if n == 0:
        return []
    rng = np.random.default_rng(arrival.seed)
    shape = arrival.burstiness
    gaps_s = rng.gamma(shape, 1.0 / (arrival.rate_rps * shape), size=n - 1)
    offsets = np.concatenate([[0.0], np.cumsum(gaps_s)])
    return [int(x * 1e9) for x in offsets]


def concurrency_limit(arrival: ClosedLoop | AllAtOnce | OpenLoop, n: int) -> int | None:
    """How many requests may be in flight (``None`` = unlimited: an uncapped open loop)."""
    if isinstance(arrival, ClosedLoop):
        return arrival.concurrency
    if isinstance(arrival, AllAtOnce):
        return max(n, 1)
    return arrival.max_concurrency
