"""slo-goodput's plots (PNG, matplotlib Agg): they read the report's details and raw samples only.

- ``goodput_vs_rate.png``: completed and goodput req/s against the offered rate, with y = x
  and the measured saturation throughput;
- ``attainment_vs_rate.png``: SLO attainment (all SLOs, and per SLO) against the offered rate,
  with the target and the maximum sustainable rate;
- ``ttft_vs_rate.png``: client TTFT p50 and p99 against the offered rate, with the TTFT SLO;
- ``queue_top_rate.png``: the top rate over time — vLLM's waiting and running requests (sampled)
  and the client's requests in flight, then every request's TTFT by send time with the SLO:
  the cause of the collapse.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from matplotlib import pyplot as plt

from analysis.load import CaseData
from analysis.plots import save
from analysis.reports.slo_goodput.models import SLOGoodputDetails
from metrics.samples import series


def _offered(details: SLOGoodputDetails) -> list[float]:
    return [p.offered_rps for p in details.points]


def _mark_max_rate(ax: plt.Axes, details: SLOGoodputDetails) -> None:
    rate = details.answer.max_rate_rps
    if rate is not None:
        ax.axvline(
            rate,
            color="tab:green",
            linestyle=":",
            linewidth=1.2,
            label=f"max sustainable {rate:.2f} req/s",
        )


def goodput_vs_rate(details: SLOGoodputDetails, out: Path) -> Path:
    x = _offered(details)
    fig, ax = plt.subplots(figsize=(7, 4.5))
    top = max(x) * 1.05
    ax.plot([0, top], [0, top], color="gray", linestyle="--", linewidth=1, label="y = x")
    ax.plot(x, [p.completed_rps for p in details.points], "o-", label="completed")
    ax.plot(x, [p.goodput_rps for p in details.points], "s-", label="goodput (met every SLO)")
    sat = details.saturation.closed_loop_rps if details.saturation else None
    if sat:
        ax.axhline(
            sat, color="tab:red", linestyle=":", linewidth=1, label=f"saturation {sat:.2f} req/s"
        )
    _mark_max_rate(ax, details)
    ax.set_xlabel("offered rate (req/s)")
    ax.set_ylabel("req/s in the measurement window")
    ax.set_xlim(0, top)
    ax.set_ylim(0, None)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    ax.set_title("Completed and goodput vs offered rate")
    return save(fig, out)


def attainment_vs_rate(details: SLOGoodputDetails, out: Path) -> Path:
    x = _offered(details)
    fig, ax = plt.subplots(figsize=(7, 4.5))
    ax.plot(
        x, [100 * (p.attainment or 0) for p in details.points], "o-", linewidth=2, label="all SLOs"
    )
    for s in details.slo:
        ax.plot(
            x,
            [100 * p.attainment_by_slo.get(s.metric, np.nan) for p in details.points],
            ".--",
            linewidth=1,
            label=f"{s.metric.upper()} ≤ {s.limit_ms or 0:.0f} ms",
        )
    target = details.answer.target_attainment * 100
    ax.axhline(target, color="tab:red", linestyle=":", linewidth=1, label=f"target {target:g} %")
    _mark_max_rate(ax, details)
    ax.set_xlabel("offered rate (req/s)")
    ax.set_ylabel("SLO attainment (% of counted requests)")
    ax.set_ylim(-3, 103)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    ax.set_title("SLO attainment vs offered rate")
    return save(fig, out)


def ttft_vs_rate(details: SLOGoodputDetails, out: Path) -> Path:
    x = _offered(details)
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for key, style in (("p50", "o-"), ("p99", "s-")):
        ax.plot(x, [p.ttft_ms[key] or np.nan for p in details.points], style, label=f"TTFT {key}")
    limit = next((s.limit_ms for s in details.slo if s.metric == "ttft"), None)
    if limit:
        ax.axhline(
            limit, color="tab:red", linestyle=":", linewidth=1, label=f"TTFT SLO {limit:.0f} ms"
        )
    _mark_max_rate(ax, details)
    ax.set_yscale("log")
    ax.set_xlabel("offered rate (req/s)")
    ax.set_ylabel("TTFT (ms, log scale)")
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=8)
    ax.set_title("TTFT vs offered rate (successful counted requests)")
    return save(fig, out)


def queue_top_rate(case: CaseData, details: SLOGoodputDetails, out: Path) -> Path:
    top = details.points[-1]
    line = next(p for p in case.phases if p.phase == top.phase)
    records = [r for r in case.records if r.phase == top.phase and r.sent_ns]
    t0 = min(int(r.scheduled_ns) for r in records) if records else int(line.start_ns)
    end = int(line.end_ns)
    fig, (ax_q, ax_t) = plt.subplots(2, 1, figsize=(9, 6.5), sharex=True)
    for name, color in (
        ("num_requests_waiting", "tab:orange"),
        ("num_requests_running", "tab:blue"),
    ):
        pts = [(t, v) for t, v in series(case.samples, name) if t0 <= t <= end]
        ax_q.step(
            [(t - t0) / 1e9 for t, _ in pts],
            [v for _, v in pts],
            where="post",
            color=color,
            label=f"vLLM {name.removeprefix('num_requests_')} (sampled)",
        )
    if records:
        grid = np.arange(t0, max(int(r.end_ns or end) for r in records), 250_000_000)
        sent = np.sort([r.sent_ns for r in records if r.sent_ns is not None])
        ended = np.sort([int(r.end_ns) for r in records if r.end_ns])
        flight = np.searchsorted(sent, grid, "right") - np.searchsorted(ended, grid, "right")
        ax_q.plot(
            (grid - t0) / 1e9, flight, color="gray", linewidth=1, label="client: requests in flight"
        )
        ok = [r for r in records if r.status == "ok" and r.chunk_ns]
        ax_t.scatter(
            [(r.sent_ns - t0) / 1e9 for r in ok if r.sent_ns is not None],
            [(r.chunk_ns[0] - r.sent_ns) / 1e6 for r in ok if r.sent_ns is not None],
            s=4,
            label="TTFT of each request",
        )
    limit = next((s.limit_ms for s in details.slo if s.metric == "ttft"), None)
    if limit:
        ax_t.axhline(limit, color="tab:red", linestyle=":", label=f"TTFT SLO {limit:.0f} ms")
    warm = details.warmup_s
    for ax in (ax_q, ax_t):
        ax.axvspan(warm, warm + top.window_s, color="gray", alpha=0.1, label="counted window")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, loc="upper left")
    ax_q.set_ylabel("requests")
    ax_t.set_yscale("log")
    ax_t.set_ylabel("TTFT (ms, log)")
    ax_t.set_xlabel(f"seconds since {top.phase} started (by send time)")
    fig.suptitle(
        f"{top.phase}: offered {top.offered_rps:.2f} req/s — the queue grows and TTFT with it"
    )
    return save(fig, out)


def draw_plots(case: CaseData, details: SLOGoodputDetails, out_dir: Path) -> list[Path]:
    """The four plots of the module docstring, written into ``out_dir``."""
    return [
        goodput_vs_rate(details, out_dir / "goodput_vs_rate.png"),
        attainment_vs_rate(details, out_dir / "attainment_vs_rate.png"),
        ttft_vs_rate(details, out_dir / "ttft_vs_rate.png"),
        queue_top_rate(case, details, out_dir / "queue_top_rate.png"),
    ]
