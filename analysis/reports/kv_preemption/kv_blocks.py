"""When a phase's KV-cache usage should be at its predicted peak, from the client's own token
stamps, and which scrapes looked at the server then.

A sampled gauge peak is a lower bound (docs/reports.md): a scrape every 250 ms can miss a peak
that lasts about a second (a request reaches its last block at most B decode steps before its
end, B = 128 tokens on CPU), and one slow scrape blinds the scraper for as long as it takes.
A peak check must therefore know whether any scrape looked while the peak was there.

Blocks a request holds, a lower bound from what the client has received (vLLM V1's
``KVCacheManager.allocate_slots``: a step holds slots for every token computed so far plus the
one it computes; the last sampled token is never written):

- before its first token: 0 (it may still be queued);
- after its k-th of O output tokens, k < O: ceil((P + k − 1)/B): the step that produced
  token k wrote P + k − 1 tokens (the prompt and tokens 1…k−1), and the step now running
  holds at least those;
- after its last (O-th) token: 0 (finished; its blocks are freed, or kept only as evictable
  prefix-cache blocks, which ``kv_cache_usage_perc`` does not count).

The phase's **peak window** is every instant at which the sum over its requests reaches a
level in blocks (the predicted peak). A scrape *looked inside* it when the whole scrape,
from request sent (``start_ns``) to response received (``end_ns``), lies inside one interval
of the window: vLLM rendered the page at some instant in between. Client stamps trail the
server by the response's transit, so the window is approximate by that much. A preempted
request's blocks are freed while this model still counts them: in a case that preempts, the
window is where the model's demand reaches the level (the cache's limit), and the cache is
full, or nearly, then.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

from loadgen.runformat import RequestRecord, ScrapeTick

Interval = tuple[int, int]  # [start_ns, end_ns], monotonic ns


def blocks_after_token(prompt_tokens: int, k: int, output_tokens: int, block_size: int) -> int:
    """Blocks a request holds at least, once its k-th output token was received (module
    docstring); k = 0 is before its first token.

    Raises:
        ValueError: a block size below 1, or k outside 0…``output_tokens``.
    """
    if block_size < 1:
        raise ValueError(f"block size {block_size} is not a positive number of tokens")
    if not 0 <= k <= output_tokens:
        raise ValueError(f"token {k} is outside 0…{output_tokens}")
    if k == 0 or k == output_tokens:
        return 0
    return math.ceil((prompt_tokens + k - 1) / block_size)


def _steps(record: RequestRecord, block_size: int) -> list[tuple[int, int]]:
    """(t_ns, change in blocks held) of one successful request, from its chunk stamps."""
    prompt = record.usage_prompt_tokens or record.prompt_tokens_sent
    stamps = record.chunk_ns
    counts = record.chunk_tokens or [1] * len(stamps)
    total = record.usage_completion_tokens or sum(counts)
    out, held, k = [], 0, 0
    for t_ns, n in zip(stamps, counts, strict=False):
        k = min(total, k + int(n))
        now = blocks_after_token(prompt, k, total, block_size)
        if now != held:
            out.append((int(t_ns), now - held))
            held = now
    return out


def peak_window(
    records: Iterable[RequestRecord], block_size: int, level_blocks: int
) -> list[Interval]:
    """Intervals in which the successful ``records`` (request records with ``chunk_ns``,
    ``chunk_tokens``, token counts) together hold at least ``level_blocks`` blocks, by the
    lower bound of the module docstring; empty when they never do.

    Raises:
        ValueError: ``level_blocks`` below 1, or a block size below 1.
    """
    if level_blocks < 1:
        raise ValueError(f"level {level_blocks} blocks: a peak window needs a positive level")
    steps = sorted(step for r in records if r.status == "ok" for step in _steps(r, block_size))
    out: list[Interval] = []
    held, since = 0, None
    i = 0
    while i < len(steps):
        t = steps[i][0]
        while i < len(steps) and steps[i][0] == t:  # every change at one instant, then judge
            held += steps[i][1]
            i += 1
        if held >= level_blocks and since is None:
            since = t
        elif held < level_blocks and since is not None:
            out.append((since, t))
            since = None
    return out


def scrapes_inside(scrapes: Sequence[ScrapeTick], window: Sequence[Interval]) -> list[int]:
    """Indices (``scrape``) of the successful scrapes that lay wholly inside one interval of
    ``window`` (sent at or after its start, answered at or before its end), in order."""
    return [
        s.scrape
        for s in scrapes
        if s.outcome == "ok" and s.scrape is not None and s.start_ns is not None
        and s.end_ns is not None and any(a <= s.start_ns and s.end_ns <= b for a, b in window)
    ]  # fmt: skip
