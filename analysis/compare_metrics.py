"""What a regression gate compares, per case and phase, and where each figure comes from.

- **Per-request metrics** (ms, lower is better), pooled over every successful request of every
  run of a side (definitions: ``analysis.latency``): ``ttft_ms``, ``tpot_ms``, ``e2el_ms`` (one
  value per request) and ``itl_ms`` (one value per token; a request is resampled whole).
- **Per-run figures**, one number per run and phase (from ``analysis.summaries``):
  ``output_throughput_tok_s`` (relative, higher is better), ``goodput_req_s`` (req/s meeting the
  run's SLOs, as the scenario's report computes it: bench with ``--slo``, slo-goodput,
  trace-replay), ``failed_requests`` (count), ``prefix_cache_hit_rate`` = Δ``prefix_cache_hits`` /
  Δ``prefix_cache_queries`` (vLLM counters, tokens), ``cached_token_rate`` = Σ cached / Σ prompt
  tokens of the phase's successful requests that reported cached tokens (``None`` when none
  did: inconclusive, never a drop to 0), ``num_preemptions`` (Δ counter) and ``kv_cache_usage_peak``
  (largest sampled ``kv_cache_usage_perc``, a fraction).

A per-run figure read from a server metric names its families: when a family is missing from
a run (an older vLLM that lacks it, see ``metrics.names``), the figure is *missing*, never 0.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import pandas as pd

from analysis.compare_stats import Better
from analysis.latency import itl_per_token_ms
from analysis.models import PhaseSummary
from loadgen.runformat import RequestRecord

Scale = Literal["ratio", "difference"]


@dataclass(frozen=True)
class RequestMetric:
    """A per-request metric: a column of ``analysis.latency.request_frame`` or per-token."""

    name: str
    per_token: bool = False


REQUEST_METRICS: tuple[RequestMetric, ...] = (
    RequestMetric("ttft_ms"),
    RequestMetric("tpot_ms"),
    RequestMetric("itl_ms", per_token=True),
    RequestMetric("e2el_ms"),
)


def _ratio(num: float | None, den: float | None) -> float | None:
    return None if num is None or den is None or den == 0 else num / den


@dataclass(frozen=True)
class RunMetric:
    """A per-run figure of a phase.

    Attributes:
        name: the metric's name (a gate file key).
        scale: ``ratio`` (relative tolerance) or ``difference`` (absolute tolerance).
        better: which direction is an improvement.
        value: the figure from the phase's summary; ``None`` when undefined or absent.
        families: server metric families it is computed from.
        optional: a figure only some scenarios report (skipped when no run has it).
        needs_repeats: a sampled figure whose run-to-run noise nothing bounds (a gauge peak
            sampled every scrape interval is a lower bound that one short phase can miss):
            inconclusive unless a side has 2+ runs to show its spread.
        samples: for a sampled figure, how many scrapes of the phase it was taken from;
            below ``MIN_PEAK_SAMPLES`` in any run the figure is inconclusive.
        reported: a figure of the scenario's own report section, not of the generic phase
            summary (``value`` is unused): goodput, which needs the run's SLOs and the
            scenario's window (``ScenarioReport.phase_goodput``, held in ``RunView.goodput``).
    """

    name: str
    scale: Scale
    better: Better
    value: Callable[[PhaseSummary], float | None]
    families: tuple[str, ...] = ()
    optional: bool = False
    needs_repeats: bool = False
    samples: Callable[[PhaseSummary], int] | None = None
    reported: bool = False


#: Fewest in-phase scrapes a sampled peak is compared from (5 s at the 250 ms interval). Seen
#: here: a 1.1 s phase (4 scrapes) of 4 concurrent requests holding 20 of 21 KV blocks showed
#: peaks 0.24, 0.24 on one side and 0.95, 0.95 on the other, same vLLM, same load: with a
#: handful of scrapes the peak says which moment was sampled, not what the server did.
MIN_PEAK_SAMPLES = 20


RUN_METRICS: tuple[RunMetric, ...] = (
    RunMetric("output_throughput_tok_s", "ratio", "higher", lambda p: p.output_throughput_tok_s),
    RunMetric("goodput_req_s", "ratio", "higher", lambda p: None, optional=True, reported=True),
    RunMetric("failed_requests", "difference", "lower", lambda p: float(p.failed)),
    RunMetric(
        "prefix_cache_hit_rate",
        "difference",
        "higher",
        lambda p: _ratio(
            p.counter_deltas.get("prefix_cache_hits"), p.counter_deltas.get("prefix_cache_queries")
        ),
        families=("prefix_cache_hits", "prefix_cache_queries"),
    ),
    RunMetric(
        "cached_token_rate",
        "difference",
        "higher",
        lambda p: p.cached_token_rate,
    ),
    RunMetric(
        "num_preemptions",
        "difference",
        "lower",
        lambda p: p.counter_deltas.get("num_preemptions"),
        families=("num_preemptions",),
    ),
    RunMetric(
        "kv_cache_usage_peak",
        "difference",
        "lower",
        lambda p: p.gauge_peaks.get("kv_cache_usage_perc"),
        families=("kv_cache_usage_perc",),
        needs_repeats=True,
        samples=lambda p: p.gauge_samples.get("kv_cache_usage_perc", 0),
    ),
)


def request_samples(
    frame: pd.DataFrame, records: Sequence[RequestRecord], phase: str
) -> dict[str, list[Any]]:
    """Per-request values of every request metric for the successful requests of ``phase``:
    ``{metric: [float, ...]}``, or for per-token metrics ``{metric: [array per request]}``.

    ``frame`` is ``analysis.latency.request_frame(records)`` (same order as ``records``).
    NaN values (no token, or a 1-token output for TPOT) are left out.
    """
    out: dict[str, list[Any]] = {m.name: [] for m in REQUEST_METRICS}
    if frame.empty:
        return out
    mask = ((frame["phase"] == phase) & (frame["status"] == "ok")).to_numpy()
    chosen = frame[mask]
    for metric in REQUEST_METRICS:
        if metric.per_token:
            kept = [records[i] for i in np.flatnonzero(mask)]
            out[metric.name] = [a for a in (itl_per_token_ms([r]) for r in kept) if a.size]
        else:
            values = chosen[metric.name].to_numpy(dtype=float)
            out[metric.name] = [float(v) for v in values[~np.isnan(values)]]
    return out
