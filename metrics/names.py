"""The one place that maps vLLM metric names (which vary across versions) to canonical names.

Canonical names drop the ``vllm:`` prefix and the ``_total`` suffix. Everything downstream
(samples files, analysis) uses canonical names; the raw exposition text keeps the originals.
"""

from __future__ import annotations

from typing import Literal

MetricType = Literal["gauge", "counter"]

#: canonical name → (type, exposition sample names it may appear under, newest first)
METRICS: dict[str, tuple[MetricType, tuple[str, ...]]] = {
    "num_requests_running": ("gauge", ("vllm:num_requests_running",)),
    "num_requests_waiting": ("gauge", ("vllm:num_requests_waiting",)),
    # A fraction in [0, 1] despite the name; renamed from gpu_cache_usage_perc in v1.
    "kv_cache_usage_perc": ("gauge", ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc")),
    "num_preemptions": ("counter", ("vllm:num_preemptions_total", "vllm:num_preemptions")),
    "prefix_cache_queries": (
        "counter",
        ("vllm:prefix_cache_queries_total", "vllm:gpu_prefix_cache_queries_total"),
    ),
    "prefix_cache_hits": (
        "counter",
        ("vllm:prefix_cache_hits_total", "vllm:gpu_prefix_cache_hits_total"),
    ),
    "prompt_tokens": ("counter", ("vllm:prompt_tokens_total",)),
    "generation_tokens": ("counter", ("vllm:generation_tokens_total",)),
    "request_success": ("counter", ("vllm:request_success_total",)),
    "spec_decode_num_drafts": ("counter", ("vllm:spec_decode_num_drafts_total",)),
    "spec_decode_num_draft_tokens": ("counter", ("vllm:spec_decode_num_draft_tokens_total",)),
    "spec_decode_num_accepted_tokens": (
        "counter",
        ("vllm:spec_decode_num_accepted_tokens_total",),
    ),
    "spec_decode_num_accepted_tokens_per_pos": (
        "counter",
        ("vllm:spec_decode_num_accepted_tokens_per_pos_total",),
    ),
}

#: exposition sample name → canonical name
CANONICAL_BY_SAMPLE: dict[str, str] = {
    raw: canonical for canonical, (_, raws) in METRICS.items() for raw in raws
}


def metric_type(canonical: str) -> MetricType:
    """``gauge`` or ``counter`` for a canonical name.

    Raises:
        KeyError: the name is not one this project records.
    """
    return METRICS[canonical][0]
