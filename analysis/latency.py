"""Client-side latency metrics per request, and the summary statistics used everywhere.

Definitions (vLLM ``benchmarks/serve.py`` for TPOT and ITL; docs/reports.md):

- **TTFT** (time to first token) = arrival of the first chunk carrying ≥ 1 generated token
  − send time, in ms.
- **E2EL** (end-to-end latency) = arrival of the last token − send time, in ms.
- **TPOT** (time per output token) = (E2EL − TTFT) / (output tokens − 1), in ms, only for
  outputs of 2+ tokens (the first token is excluded, as in vLLM).
- **ITL** (inter-token latency), per token = the gap between two successive token-carrying
  chunks divided evenly over the tokens of the later chunk: a chunk of k tokens after a gap g
  gives k values g/k (ms). Over successful requests only.
- **Chunk gap** (time per step) = the gap itself, one value per chunk: under speculative
  decoding a chunk carries every token a step accepted, so this is time per engine step, not
  per token. Reported separately and labelled so.
- **Tokens per chunk** = generated tokens in each token-carrying chunk.
- **Token timing** of a record: how its token stamps were obtained — ``usage`` (the server's
  running usage), ``text`` (no running usage: chunks with text), or ``final_only`` (2+ tokens
  that all arrived in one chunk, so TTFT equals E2EL and says nothing). ``final_only`` is
  derived from the chunks themselves, so records of any run are judged the same way.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

import msgspec
import numpy as np
import pandas as pd

from loadgen.runformat import ReadRecord, RequestRecord

PERCENTILES = (50, 90, 95, 99)
STAT_KEYS = ("count", "mean", "std", "p50", "p90", "p95", "p99")


def token_timing(record: RequestRecord) -> str | None:
    """How the record's token stamps were obtained (see the module docstring), or ``None``
    when no token arrived."""
    tokens = record.chunk_tokens
    if not tokens:
        return None
    if len(tokens) == 1 and tokens[0] >= 2:
        return "final_only"
    return record.token_timing or "usage"


#: The columns :func:`request_frame` adds to the record's fields.
DERIVED = ("record", "output_tokens", "ttft_ms", "e2el_ms", "tpot_ms", "timing", "send_lateness_ms")


def request_frame(records: Iterable[RequestRecord]) -> pd.DataFrame:
    """One row per request record with derived columns.

    Added columns: ``output_tokens``, ``ttft_ms``, ``e2el_ms``, ``tpot_ms`` (NaN where
    undefined: no token received, or fewer than 2 tokens for TPOT), ``timing`` (the record's
    token timing, see :func:`token_timing`), ``send_lateness_ms`` (sent − scheduled) and
    ``record`` (the record itself, for figures computed per record: :func:`records_of`); the
    record's own fields are columns too (and ``worker`` for records read back).
    """
    rows = []
    for r in records:
        chunks = r.chunk_ns
        tokens = r.chunk_tokens
        sent = r.sent_ns
        scheduled = r.scheduled_ns
        out = int(sum(tokens))
        ttft = e2el = tpot = lateness = math.nan
        if chunks and sent is not None:
            ttft = (chunks[0] - sent) / 1e6
            e2el = (chunks[-1] - sent) / 1e6
            if out >= 2:
                tpot = (e2el - ttft) / (out - 1)
        if sent is not None and scheduled is not None:
            lateness = (sent - scheduled) / 1e6
        rows.append(
            {
                **msgspec.structs.asdict(r),
                "record": r,
                "output_tokens": out,
                "ttft_ms": ttft,
                "e2el_ms": e2el,
                "tpot_ms": tpot,
                "timing": token_timing(r),
                "send_lateness_ms": lateness,
            }
        )
    frame = pd.DataFrame(rows)
    if frame.empty:  # no records (a case that failed before sending): selections find no row
        frame = pd.DataFrame(columns=[*ReadRecord.__struct_fields__, *DERIVED])
    return frame


def records_of(frame: pd.DataFrame) -> list[RequestRecord]:
    """The records behind the rows of ``frame`` (a selection of :func:`request_frame`)."""
    return [] if frame.empty else list(frame["record"])


def chunk_gaps(records: Iterable[RequestRecord]) -> tuple[np.ndarray, np.ndarray]:
    """(gap in ms, tokens of the later chunk) for every successive chunk pair of ``records``."""
    gaps: list[float] = []
    toks: list[int] = []
    for r in records:
        chunks = r.chunk_ns
        tokens = r.chunk_tokens
        for i in range(1, min(len(chunks), len(tokens))):  # unequal lengths: validate says so
            gaps.append((chunks[i] - chunks[i - 1]) / 1e6)
            toks.append(int(tokens[i]))
    return np.asarray(gaps, dtype=float), np.asarray(toks, dtype=int)


def itl_per_token_ms(records: Iterable[RequestRecord]) -> np.ndarray:
    """ITL values in ms: each chunk gap g of a k-token chunk gives k values g/k.

    Callers pass successful requests only (latency is defined over successes).
    """
    gaps, tokens = chunk_gaps(records)
    if gaps.size == 0:
        return gaps
    keep = tokens > 0
    return np.repeat(gaps[keep] / tokens[keep], tokens[keep])


def tokens_per_chunk(records: Iterable[RequestRecord]) -> np.ndarray:
    """Generated tokens of every token-carrying chunk of ``records`` (first chunks included)."""
    return np.asarray([t for r in records for t in r.chunk_tokens], dtype=float)


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
