"""Client-side latency metrics per request, and the summary statistics used everywhere.

Definitions (SCENARIOS.md §4; vLLM ``benchmarks/serve.py`` for TPOT):

- **TTFT** (time to first token) = arrival of the first chunk carrying ≥ 1 generated token
  − send time, in ms.
- **E2EL** (end-to-end latency) = arrival of the last token − send time, in ms.
- **TPOT** (time per output token) = (E2EL − TTFT) / (output tokens − 1), in ms, only for
  outputs of 2+ tokens (the first token is excluded, as in vLLM).
- **ITL** (inter-token latency) = gap between successive token-carrying chunks, in ms, kept
  with the chunk's token count (speculative decoding puts several tokens in one chunk).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np
import pandas as pd

PERCENTILES = (50, 90, 95, 99)


def request_frame(records: Iterable[Mapping[str, Any]]) -> pd.DataFrame:
    """One row per request record with derived columns.

    Added columns: ``output_tokens``, ``ttft_ms``, ``e2el_ms``, ``tpot_ms`` (NaN where
    undefined: no token received, or fewer than 2 tokens for TPOT).
    """
    rows = []
    for r in records:
        chunks = list(r.get("chunk_ns") or [])
        tokens = list(r.get("chunk_tokens") or [])
        sent = r.get("sent_ns")
        out = int(sum(tokens))
        ttft = e2el = tpot = math.nan
        if chunks and sent is not None:
            ttft = (chunks[0] - sent) / 1e6
            e2el = (chunks[-1] - sent) / 1e6
            if out >= 2:
                tpot = (e2el - ttft) / (out - 1)
        rows.append({**r, "output_tokens": out, "ttft_ms": ttft, "e2el_ms": e2el, "tpot_ms": tpot})
    return pd.DataFrame(rows)


def itl_gaps(records: Iterable[Mapping[str, Any]]) -> tuple[np.ndarray, np.ndarray]:
    """(gaps in ms, tokens in the later chunk) over all successive chunk pairs of all records."""
    gaps: list[float] = []
    toks: list[int] = []
    for r in records:
        chunks = list(r.get("chunk_ns") or [])
        tokens = list(r.get("chunk_tokens") or [])
        for i in range(1, len(chunks)):
            gaps.append((chunks[i] - chunks[i - 1]) / 1e6)
            toks.append(int(tokens[i]))
    return np.asarray(gaps, dtype=float), np.asarray(toks, dtype=int)


def describe(values: Iterable[float]) -> dict[str, float | int | None]:
    """count, mean, std (population), p50/p90/p95/p99 (linear interpolation, as numpy).

    NaNs are dropped first; with no value left every statistic is ``None``.
    """
    arr = np.asarray([v for v in values if v is not None and not math.isnan(v)], dtype=float)
    if arr.size == 0:
        empty: dict[str, float | int | None] = {"count": 0, "mean": None, "std": None}
        return empty | {f"p{p}": None for p in PERCENTILES}
    stats: dict[str, float | int | None] = {
        "count": int(arr.size),
        "mean": float(arr.mean()),
        "std": float(arr.std()),
    }
    for p, v in zip(PERCENTILES, np.percentile(arr, PERCENTILES), strict=True):
        stats[f"p{p}"] = float(v)
    return stats
