"""Reading the real KV-cache capacity back from a running vLLM (``/metrics`` or its log)."""

from __future__ import annotations

import re
from dataclasses import dataclass

from prometheus_client.parser import text_string_to_metric_families

CACHE_CONFIG_FAMILY = "vllm:cache_config_info"
_LOG_RE = re.compile(r"(?:GPU|CPU|XPU|TPU)? ?KV cache size:\s*([\d,]+)\s*tokens")


@dataclass(frozen=True)
class KVCapacity:
    """KV-cache capacity of a server.

    Attributes:
        tokens: tokens the cache holds (``num_gpu_blocks × block_size``).
        block_size: tokens per block (128 on vLLM's CPU backend, 16 by default on GPU).
        num_blocks: blocks in the pool; ``None`` when only the log line was available.
        memory_bytes: bytes reserved for the cache if the server reports it, else ``None``.
        source: ``"metrics"`` or ``"log"``.
    """

    tokens: int
    block_size: int | None
    num_blocks: int | None
    memory_bytes: int | None
    source: str


def _int_label(labels: dict[str, str], key: str) -> int | None:
    value = labels.get(key)
    if value in (None, "", "None"):
        return None
    return int(float(value))


def capacity_from_metrics(text: str) -> KVCapacity | None:
    """Parse ``vllm:cache_config_info`` from Prometheus exposition text.

    Uses the labels ``num_gpu_blocks`` and ``block_size`` (capacity = their product), and
    ``kv_cache_memory_bytes`` when present. Returns ``None`` if the family or the block count
    is absent (vLLM fills ``num_gpu_blocks`` only after profiling).
    """
    # Parse only the family we need: the full page is ~50 KB and slow to parse.
    lines = [line for line in text.splitlines() if CACHE_CONFIG_FAMILY in line]
    for family in text_string_to_metric_families("\n".join(lines) + "\n"):
        for sample in family.samples:
            labels = sample.labels
            blocks = _int_label(labels, "num_gpu_blocks")
            block_size = _int_label(labels, "block_size")
            if blocks is None or block_size is None:
                continue
            return KVCapacity(
                tokens=blocks * block_size,
                block_size=block_size,
                num_blocks=blocks,
                memory_bytes=_int_label(labels, "kv_cache_memory_bytes"),
                source="metrics",
            )
    return None


def cache_config_problem(text: str) -> str | None:
    """Why ``capacity_from_metrics(text)`` finds no capacity, or ``None`` when it does."""
    if capacity_from_metrics(text) is not None:
        return None
    if not any(CACHE_CONFIG_FAMILY in line for line in text.splitlines()):
        return f"the page has no {CACHE_CONFIG_FAMILY} family"
    return (
        f"{CACHE_CONFIG_FAMILY} has no num_gpu_blocks or block_size value (vLLM fills "
        "num_gpu_blocks only after profiling the KV cache)"
    )


def capacity_from_log(text: str) -> KVCapacity | None:
    """Parse the engine's ``... KV cache size: N tokens`` log line (the last one wins)."""
    found = _LOG_RE.findall(text)
    if not found:
        return None
    return KVCapacity(
        tokens=int(found[-1].replace(",", "")),
        block_size=None,
        num_blocks=None,
        memory_bytes=None,
        source="log",
    )
