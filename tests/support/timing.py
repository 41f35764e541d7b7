"""Linear-time checks that do not depend on the machine's speed: the time of a call as a
ratio to a linear scan of the same input, measured in the same test."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable


def best_seconds(func: Callable[[str], object], text: str, repeats: int = 3) -> float:
    """The fastest of ``repeats`` calls ``func(text)``, in seconds (the least disturbed by
    other work on the machine); an exception the call raises counts as its end."""
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        with contextlib.suppress(ValueError):
            func(text)
        best = min(best, time.perf_counter() - start)
    return best


def linear_scan(text: str) -> int:
    """One Python step per character: the unit a linear-time call is measured in."""
    return sum(1 for c in text if c == "@")


def times_a_linear_scan(func: Callable[[str], object], text: str) -> float:
    """How many linear scans of ``text`` one call ``func(text)`` costs. Quadratic work on
    ``n`` characters is about ``n`` scans (thousands for the inputs tests use), linear work
    a small constant."""
    return best_seconds(func, text) / best_seconds(linear_scan, text)
