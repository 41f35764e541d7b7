"""Size limits on what the testbed reads from the network, in one place (bytes).

Every reader of network input holds a bounded amount: a ``/metrics`` answer, one line of an
event stream. Input past a limit fails the read with a reason naming the limit; it is never
buffered whole.
"""

from __future__ import annotations

#: Largest ``/metrics`` answer body (4 MiB = 4 × 2**20): a real vLLM page is ~50 KB
#: (≈100 KB with many engines or LoRA adapters), so 40× headroom, while a runaway page (a
#: label explosion, another app's dump) cannot grow memory or ``raw.jsonl.gz`` without bound.
#: ``loadgen run --metrics-max-bytes`` changes it for the scraper.
METRICS_MAX_BYTES = 4 * 2**20

#: Longest line of a server-sent event stream (1 MiB = 2**20), newline excluded: one chunk
#: of a completion is a few hundred bytes (a few KB with logprobs), so a longer line is a
#: broken or hostile stream; the request fails with that reason.
SSE_MAX_LINE_BYTES = 2**20


def too_large(what: str, limit: int) -> str:
    """The reason a read stopped at ``limit``: ``"answer larger than 4194304 bytes"``."""
    return f"{what} larger than {limit} bytes"


#: Largest answer to a one-off control request (``/health``, ``/version``, ``/v1/models``):
#: 1 MiB; they are a few hundred bytes. ``/metrics`` read outside the scraper (the capacity
#: read at start, gauge probes between phases) keeps :data:`METRICS_MAX_BYTES`.
CONTROL_MAX_BYTES = 2**20
