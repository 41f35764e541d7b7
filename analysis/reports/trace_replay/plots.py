"""trace-replay's plots: hit rates per case and phase, TTFT against uncached prompt tokens,
and the trace's arrival rate with the server's waiting queue beside it."""

from __future__ import annotations

import math
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np

from analysis.latency import request_frame
from analysis.load import RunData
from analysis.plots import save
from analysis.reports.trace_replay.details import TraceReplayDetails
from metrics.samples import series

#: Width of an arrival-rate bin (s of the phase's clock).
RATE_BIN_S = 2.0

_BARS = (
    ("hit_rate_counters", "measured (counters)"),
    ("hit_rate_requests", "measured (per request)"),
    ("predicted_hit_rate", "predicted (real capacity)"),
    ("max_hit_rate", "maximum (unbounded cache)"),
)


def hit_rate_plot(details: TraceReplayDetails, out: Path) -> Path:
    """Grouped bars per case: measured (counters, per request), predicted and maximum hit
    rate of every phase."""
    cases = list(details.cases.items())
    fig, axes = plt.subplots(1, len(cases), figsize=(6 * len(cases), 4), squeeze=False)
    for ax, (name, case) in zip(axes[0], cases, strict=True):
        phases = list(case.phases.values())
        width = 0.8 / len(_BARS)
        for k, (key, label) in enumerate(_BARS):
            values = [getattr(p, key) or 0.0 for p in phases]
            xs = [j + k * width for j in range(len(phases))]
            bars = ax.bar(xs, values, width=width, label=label)
            ax.bar_label(bars, labels=[f"{v:.3f}" for v in values], fontsize=6)
        ax.set_xticks([j + width * (len(_BARS) - 1) / 2 for j in range(len(phases))],
                      [p.phase for p in phases])  # fmt: skip
        ax.set_ylim(0, 1.1)
        ax.set_ylabel("prefix-cache hit rate")
        ax.set_title(f"case {name}: hit rate, predicted vs measured")
        ax.legend(fontsize=7)
    return save(fig, out)


def ttft_uncached_plot(run: RunData, out: Path) -> Path:
    """TTFT (ms) against each successful request's uncached prompt tokens (prompt − cached),
    one panel per case, one colour per phase."""
    fig, axes = plt.subplots(1, len(run.cases), figsize=(6 * len(run.cases), 4), squeeze=False)
    for ax, case in zip(axes[0], run.cases, strict=True):
        frame = request_frame(case.records)
        if not frame.empty:
            ok = frame[(frame["status"] == "ok") & frame["cached_tokens"].notna()]
            for phase, rows in ok.groupby("phase", sort=False):
                uncached = rows["prompt_tokens_sent"] - rows["cached_tokens"]
                ax.scatter(uncached, rows["ttft_ms"], s=8, alpha=0.6, label=str(phase))
        ax.set_xlabel("uncached prompt tokens (prompt − cached)")
        ax.set_ylabel("TTFT (ms)")
        ax.set_yscale("log")
        ax.set_title(f"case {case.name}: TTFT vs uncached prompt")
        ax.legend(fontsize=7)
    return save(fig, out)


def arrival_queue_plot(run: RunData, out: Path) -> Path:
    """Per case and phase: the requests scheduled per second (bins of ``RATE_BIN_S``) on the
    phase's clock, and vLLM's ``num_requests_waiting`` gauge over the same time."""
    panels = [(c, ph) for c in run.cases for ph in c.phases]
    fig, axes = plt.subplots(
        len(panels) or 1, 1, figsize=(9, 3 * max(1, len(panels))), squeeze=False
    )
    for ax, (case, line) in zip(axes[:, 0], panels, strict=False):
        phase = line.phase
        start, end = line.start_ns, line.end_ns
        scheduled = np.array(
            [r.scheduled_ns for r in case.records if r.phase == phase], dtype=float
        )
        t0 = float(scheduled.min()) if scheduled.size else float(start)
        span_s = max((end - t0) / 1e9, RATE_BIN_S)
        bins = np.arange(0.0, math.ceil(span_s / RATE_BIN_S) * RATE_BIN_S + RATE_BIN_S, RATE_BIN_S)
        counts, edges = np.histogram((scheduled - t0) / 1e9, bins=bins)
        ax.step(edges[:-1], counts / RATE_BIN_S, where="post", label="scheduled req/s")
        ax.set_ylabel("req/s (scheduled)")
        ax.set_xlabel(f"s since the phase's first scheduled request ({phase})")
        waiting = [(t, v) for t, v in series(case.samples, "num_requests_waiting")
                   if start <= t <= end]  # fmt: skip
        twin = ax.twinx()
        if waiting:
            ts = [(t - t0) / 1e9 for t, _ in waiting]
            twin.plot(ts, [v for _, v in waiting], color="tab:red", label="waiting (vLLM)")
        twin.set_ylabel("requests waiting", color="tab:red")
        ax.set_title(f"case {case.name}, {phase}: trace arrivals and the server's queue")
    return save(fig, out)


def trace_plots(run: RunData, details: TraceReplayDetails | None, out_dir: Path) -> list[Path]:
    """Every plot of the report (none without records)."""
    if details is None or not any(c.records for c in run.cases):
        return []
    return [
        hit_rate_plot(details, out_dir / "hit_rate_predicted_vs_measured.png"),
        ttft_uncached_plot(run, out_dir / "ttft_vs_uncached_tokens.png"),
        arrival_queue_plot(run, out_dir / "arrivals_and_queue.png"),
    ]
