"""PNG plots from the summaries and samples (matplotlib, headless Agg backend)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from analysis.latency import request_frame
from analysis.load import CaseData
from metrics.samples import series


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
    fig.tight_layout()
    fig.savefig(out, dpi=100)
    plt.close(fig)
    return out


def hit_rate_by_phase(summaries: dict[str, dict[str, Any]], phases: list[str], out: Path) -> Path:
    """Grouped bars: prefix-cache hit rate per phase (counter deltas), one bar per case."""
    fig, ax = plt.subplots(figsize=(8, 4))
    width = 0.8 / max(len(summaries), 1)
    for i, (name, case) in enumerate(summaries.items()):
        rates = [(case["phases"].get(p, {}).get("hit_rate_counters") or 0.0) for p in phases]
        xs = [j + i * width for j in range(len(phases))]
        bars = ax.bar(xs, rates, width=width, label=name)
        ax.bar_label(bars, labels=[f"{r:.3f}" for r in rates], fontsize=7)
    ax.set_xticks([j + width * (len(summaries) - 1) / 2 for j in range(len(phases))], phases)
    ax.set_ylim(0, 1.1)
    ax.set_ylabel("hit rate (Δhits / Δqueries)")
    ax.set_title("Prefix-cache hit rate per phase")
    ax.legend()
    fig.tight_layout()
    fig.savefig(out, dpi=100)
    plt.close(fig)
    return out


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
    kv = series(case.samples, "kv_cache_usage_perc")
    ax_kv.plot([(t - t0) / 1e9 for t, _ in kv], [v * 100 for _, v in kv], color="tab:purple")
    ax_kv.set_ylabel("KV usage (%)")
    ax_kv.set_ylim(0, 105)
    for name, color in (
        ("num_requests_running", "tab:blue"),
        ("num_requests_waiting", "tab:orange"),
    ):
        pts = series(case.samples, name)
        ax_q.step(
            [(t - t0) / 1e9 for t, _ in pts],
            [v for _, v in pts],
            where="post",
            label=name,
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
    cuts = [int(r["disconnect_ns"]) for r in case.records if r.get("disconnect_ns")]
    if cuts:
        for ax in axes:
            ax.axvline((max(cuts) - t0) / 1e9, color="black", linestyle=":", linewidth=1)
        ax_q.annotate("last disconnect", ((max(cuts) - t0) / 1e9, 0), fontsize=7)
    for i, phase in enumerate(case.phases):
        start = (int(phase["start_ns"]) - t0) / 1e9
        end = (int(phase["end_ns"]) - t0) / 1e9
        for ax in axes:
            ax.axvspan(start, end, alpha=0.08 if i % 2 else 0.16, color="gray")
        ax_kv.text(start, 100, str(phase["phase"]), fontsize=7, va="top")
    fig.suptitle(f"{case.name}: KV usage, queue, preemptions (sampled; peaks are lower bounds)")
    fig.tight_layout()
    fig.savefig(out, dpi=100)
    plt.close(fig)
    return out


def breaker_episode(ep: dict[str, Any], out: Path) -> Path:
    """Requests per second of send time (ok by upstream, failed) with faults and transitions."""
    fig, ax = plt.subplots(figsize=(10, 4))
    seconds = [b["second"] for b in ep["per_second"]]
    upstreams = sorted({u for b in ep["per_second"] for u in b["by_upstream"]})
    bottom = [0] * len(seconds)
    for u in upstreams:
        counts = [b["by_upstream"].get(u, 0) for b in ep["per_second"]]
        ax.bar(seconds, counts, bottom=bottom, label=f"ok via {u}", width=0.9)
        bottom = [a + c for a, c in zip(bottom, counts, strict=True)]
    failed = [b["failed"] for b in ep["per_second"]]
    ax.bar(seconds, failed, bottom=bottom, label="failed", color="tab:red", width=0.9)
    top = max((a + f for a, f in zip(bottom, failed, strict=True)), default=1)
    for f in ep["faults"]:
        t = f.get("killed_s", f.get("healthy_s"))
        what = "replica killed" if "killed_s" in f else "replica back"
        ax.axvline(t, color="black", linestyle="--", linewidth=1)
        ax.annotate(what, (t, top), fontsize=7, rotation=90, va="top")
    colors = {"open": "tab:red", "half_open": "tab:orange", "closed": "tab:green"}
    for t in ep["transitions"]:
        ax.axvline(t["t_s"], color=colors.get(t["to"], "gray"), linestyle=":", linewidth=1)
        ax.annotate(f"→{t['to']}", (t["t_s"], top * 0.75), fontsize=7, rotation=90, va="top")
    ax.set_xlabel("seconds from phase start (by send time)")
    ax.set_ylabel("requests")
    ax.set_title("Breaker episode: where requests went, faults and breaker transitions")
    ax.legend(fontsize=7, loc="upper right")
    fig.tight_layout()
    fig.savefig(out, dpi=100)
    plt.close(fig)
    return out
