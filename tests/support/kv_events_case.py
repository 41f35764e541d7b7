"""The request sequence of the KV-event check (tests/integration/test_kv_events_real.py) and
the model's view of it, shared with the fast test that replays its recorded events
(tests/fixtures/kv_events/recorded_events.jsonl)."""

from __future__ import annotations

from scenarios.prefix_cache_model import CacheRequest, content_block_keys
from scenarios.tokens import TokenSpace, token_ids

PREFIX = list(token_ids(0, "kv-events/prefix", 600, TokenSpace()))
PROMPTS = {
    "a": PREFIX + list(token_ids(0, "kv-events/a", 100, TokenSpace())),
    "b": PREFIX + list(token_ids(0, "kv-events/b", 100, TokenSpace())),
    **{name: list(token_ids(0, f"kv-events/{name}", 700, TokenSpace())) for name in "cde"},
}
ORDER = ["a", "b", "c", "d", "e", "a"]
OUTPUT = 4
#: The server's cache: 128 MiB = 18 blocks of 128 tokens × 57,344 B, 17 usable.
CACHE = "128MiB"
BLOCKS = 18


def requests() -> list[CacheRequest]:
    """The model's view of ORDER: prompt blocks keyed by content."""
    return [
        CacheRequest(f"{name}-{i}", content_block_keys(PROMPTS[name], 128), 700, OUTPUT)
        for i, name in enumerate(ORDER)
    ]
