"""The token IDs prompts are drawn from, and the seeded draw every workload kind uses."""

from __future__ import annotations

import hashlib

import numpy as np
from pydantic import Field

from server.frozen import FrozenModel


class TokenSpace(FrozenModel):
    """Token IDs to draw prompts from: [low, high). Keep inside every model's vocabulary."""

    low: int = Field(default=10, ge=0)
    high: int = Field(default=4000, gt=1)


def token_array(seed: int, key: str, n: int, space: TokenSpace) -> np.ndarray:
    """``n`` token IDs in [``space.low``, ``space.high``), shape (n,), the same for the same
    (``seed``, ``key``): a NumPy generator seeded by the first 8 bytes of sha256("seed:key")."""
    digest = hashlib.sha256(f"{seed}:{key}".encode()).digest()
    rng = np.random.default_rng(int.from_bytes(digest[:8], "little"))
    return rng.integers(space.low, space.high, size=n)


def token_ids(seed: int, key: str, n: int, space: TokenSpace) -> tuple[int, ...]:
    """:func:`token_array` as a tuple of ints (a prompt's token IDs)."""
    return tuple(token_array(seed, key, n, space).tolist())
