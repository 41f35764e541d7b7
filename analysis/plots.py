"""Generic PNG plots (matplotlib, headless Agg backend): TTFT per phase, and per case the KV
usage, queue and preemption timeline. Scenario report modules draw their own with ``save``."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
from matplotlib.figure import Figure

from analysis.latency import request_frame
from analysis.load import CaseData
from loadgen.runformat.atomic import write_with
from metrics.samples import series, series_by


def save(fig: Figure, out: Path) -> Path:
    """Lay out, write ``out`` (PNG, 100 dpi) atomically and close ``fig``; return ``out``.

    Written under a temporary name and renamed (``loadgen.runformat.atomic``): a full disk
    leaves no 0-byte or half PNG, and no temporary file.

    Raises:
        RunWriteError: the PNG could not be written.
    """
    try:
        fig.tight_layout()
        write_with(out, lambda tmp: fig.savefig(tmp, dpi=100, format="png"))
    finally:
        plt.close(fig)
    return out


def ttft_by_phase(cases: list[CaseData], phases: list[str], out: Path) -> Path:
    """Box plot of per-request TTFT (ms) per phase, one panel per case."""
    fig, axes = plt.subplots(1, len(cases), figsize=(5 * len(cases), 4), squeeze=False, sharey=True)
    for ax, case in zip(axes[0], cases, strict=True):
        frame = request_frame(case.records)
        data = []
        for phase in phases:
            rows = (
                frame[(frame["phase"] == phase) & (frame["status"] == "ok")]
                if not frame.empty
                else frame
            )
            data.append(rows["ttft_ms"].dropna().to_numpy() if not rows.empty else [])
        ax.boxplot(data, tick_labels=phases, showfliers=True)
        ax.set_title(case.name)
        ax.set_ylabel("TTFT (ms)")
        ax.grid(axis="y", alpha=0.3)
    fig.suptitle("TTFT per phase")
    return save(fig, out)


def timeline(case: CaseData, out: Path) -> Path:
    """KV-cache usage and running/waiting requests over time, with phase bands."""
    if not case.samples:
        return out
    t0 = min(s.t_ns for s in case.samples)
    preempt = series(case.samples, "num_preemptions")
    base = preempt[0][1] if preempt else 0.0
    cumulative = [(t, v - base) for t, v in preempt]
    first = next((t for t, v in cumulative if v > 0), None)
    n_panels = 3 if first is not None else 2
    fig, axes = plt.subplots(n_panels, 1, figsize=(10, 2.5 * n_panels), sharex=True)
    ax_kv, ax_q = axes[0], axes[1]
    # Gauges per engine: summed, data-parallel engines' KV usage would exceed 100 %.
    kv_engines = series_by(case.samples, "kv_cache_usage_perc")
    for engine, kv in kv_engines.items():
        label = f"engine {engine}" if len(kv_engines) > 1 else None
        ax_kv.plot([(t - t0) / 1e9 for t, _ in kv], [v * 100 for _, v in kv], label=label)
    ax_kv.set_ylabel("KV usage (%)")
    ax_kv.set_ylim(0, 105)
    for name, color in (
        ("num_requests_running", "tab:blue"),
        ("num_requests_waiting", "tab:orange"),
    ):
        engines = series_by(case.samples, name)
        for engine, pts in engines.items():
            ax_q.step(
                [(t - t0) / 1e9 for t, _ in pts],
                [v for _, v in pts],
                where="post",
                label=name if len(engines) == 1 else f"{name} (engine {engine})",
                color=color,
            )
    ax_q.set_ylabel("requests")
    ax_q.set_xlabel("time since first scrape (s)")
    ax_q.legend(loc="upper right", fontsize=8)
    if first is not None:
        ax_p = axes[2]
        ax_p.step([(t - t0) / 1e9 for t, _ in cumulative], [v for _, v in cumulative], where="post",
                  color="tab:red")  # fmt: skip
        ax_p.set_ylabel("preemptions (cum.)")
        for ax in axes:
            ax.axvline((first - t0) / 1e9, color="tab:red", linestyle="--", linewidth=1)
        ax_p.annotate("first preemption seen", ((first - t0) / 1e9, 0), fontsize=7, color="tab:red")
        ax_p.set_xlabel("time since first scrape (s)")
    cuts = [r.disconnect_ns for r in case.records if r.disconnect_ns]
    if cuts:
        for ax in axes:
            ax.axvline((max(cuts) - t0) / 1e9, color="black", linestyle=":", linewidth=1)
        ax_q.annotate("last disconnect", ((max(cuts) - t0) / 1e9, 0), fontsize=7)
    for i, phase in enumerate(case.phases):
        start = (phase.start_ns - t0) / 1e9
        end = (phase.end_ns - t0) / 1e9
        for ax in axes:
            ax.axvspan(start, end, alpha=0.08 if i % 2 else 0.16, color="gray")
        ax_kv.text(start, 100, phase.phase, fontsize=7, va="top")
    fig.suptitle(f"{case.name}: KV usage, queue, preemptions (sampled; peaks are lower bounds)")
    return save(fig, out)
