"""Generic plots (matplotlib, headless Agg backend): TTFT per phase, and per case each
request's latency over time and the KV usage, queue and preemption timeline. Scenario report
modules draw their own with ``save``, which writes every figure twice: a PNG (for report.md)
and an SVG beside it (inlined in report.html, with hover texts: ``analysis.svg``)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from analysis.latency import request_frame
from analysis.load import CaseData
from analysis.svg import figure_svg
from loadgen.runformat.atomic import write_text, write_with
from metrics.samples import series, series_by

#: Most points of one plot that get their own hover text; beyond it every k-th point has
#: one (all are drawn), so a long run's page stays small.
MAX_TIPS = 1000


def save(fig: Figure, out: Path, tooltips: Mapping[str, Sequence[str]] | None = None) -> Path:
    """Lay out, write ``out`` (PNG, 100 dpi) and ``out`` with suffix ``.svg`` (the same
    figure as vectors, ``tooltips`` as its hover texts: ``analysis.svg.figure_svg``)
    atomically, close ``fig``; return ``out``.

    Written under a temporary name and renamed (``loadgen.runformat.atomic``): a full disk
    leaves no 0-byte or half file, and no temporary file.

    Raises:
        RunWriteError: a file could not be written.
    """
    try:
        fig.tight_layout()
        write_with(out, lambda tmp: fig.savefig(tmp, dpi=100, format="png"))
        write_text(out.with_suffix(".svg"), figure_svg(fig, out.stem, tooltips) + "\n")
    finally:
        plt.close(fig)
    return out


def tip_step(points: int) -> int:
    """Every how many points of a plot with ``points`` in all gets a hover text (``MAX_TIPS``)."""
    return max(1, math.ceil(points / MAX_TIPS))


def tipped_points(
    ax: Axes, x: Sequence[float], y: Sequence[float], tips: Sequence[str], gid: str,
    tooltips: dict[str, list[str]], step: int | None = None, **style: object,
) -> None:  # fmt: skip
    """Draw the points (``x``, ``y``) as markers, and give them hover texts ``tips`` (one
    per point) in ``tooltips`` under ``gid``: every ``step``-th point (default: every point up
    to ``MAX_TIPS``, else every k-th; the others are drawn in the same style, without one)."""
    if not len(x):
        return
    step = step or tip_step(len(x))
    rest = [i for i in range(len(x)) if i % step]
    if rest:
        ax.plot([x[i] for i in rest], [y[i] for i in rest], linestyle="none", **style)  # type: ignore[arg-type]
    ax.plot(x[::step], y[::step], linestyle="none", gid=gid, **style)  # type: ignore[arg-type]
    tooltips[gid] = list(tips[::step])


def phase_bands(axes: Sequence[Axes], case: CaseData, t0: int, label_ax: Axes,
                tooltips: dict[str, list[str]] | None = None) -> None:  # fmt: skip
    """Shade each phase's window on every axis (times in s since ``t0`` ns) and name it just
    above ``label_ax``'s frame; with ``tooltips``, the band on ``label_ax`` says the phase and
    its window on hover."""
    for i, phase in enumerate(case.phases):
        start = (phase.start_ns - t0) / 1e9
        end = (phase.end_ns - t0) / 1e9
        for ax in axes:
            gid = f"band-{i}" if tooltips is not None and ax is label_ax else None
            ax.axvspan(start, end, alpha=0.08 if i % 2 else 0.16, color="gray", gid=gid)
        if tooltips is not None:
            tooltips[f"band-{i}"] = [f"phase {phase.phase}: {start:.1f}–{end:.1f} s"]
        label_ax.text(start, 1.0, phase.phase, fontsize=7, va="bottom",
                      transform=label_ax.get_xaxis_transform())  # fmt: skip


def phase_at(case: CaseData, t_ns: int) -> str:
    """The phase whose window holds ``t_ns``, or ``between phases``."""
    for phase in case.phases:
        if phase.start_ns <= t_ns <= phase.end_ns:
            return phase.phase
    return "between phases"


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


def latency(case: CaseData, out: Path) -> Path:
    """Each request's TTFT and E2EL (ms) against when it was sent (s since the case's first
    phase began), one colour per phase, failed requests as red crosses at 0; hover a point for
    its request id, phase and figures (from ``analysis.latency.request_frame``)."""
    frame = request_frame(case.records)
    t0 = min((p.start_ns for p in case.phases), default=0)
    fig, (ax_t, ax_e) = plt.subplots(2, 1, figsize=(10, 5.5), sharex=True)
    tooltips: dict[str, list[str]] = {}
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    sent = frame[frame["sent_ns"].notna()] if not frame.empty else frame
    step = tip_step(2 * len(sent))  # two panels share the plot's hover texts
    for k, phase in enumerate(dict.fromkeys(sent["phase"]) if not sent.empty else []):
        rows = sent[(sent["phase"] == phase) & (sent["status"] == "ok") & sent["ttft_ms"].notna()]
        x = [(t - t0) / 1e9 for t in rows["sent_ns"]]
        tips = [
            f"{r.request_id} · phase {phase} · TTFT {r.ttft_ms:.1f} ms · E2EL {r.e2el_ms:.1f} "
            f"ms · {r.output_tokens} tokens out"
            + ("" if r.cached_tokens is None or r.cached_tokens != r.cached_tokens
               else f" · {int(r.cached_tokens)} cached")
            for r in rows.itertuples()
        ]  # fmt: skip
        style = {"marker": "o", "ms": 3, "color": colours[k % len(colours)]}
        tipped_points(ax_t, x, list(rows["ttft_ms"]), tips, f"ttft-{k}", tooltips, step,
                      label=phase, **style)  # fmt: skip
        tipped_points(ax_e, x, list(rows["e2el_ms"]), tips, f"e2el-{k}", tooltips, step, **style)
    failed = sent[sent["status"] != "ok"] if not sent.empty else sent
    if not failed.empty:
        tips = [f"{r.request_id} · phase {r.phase} · {r.status}"
                + (f": {r.error}" if isinstance(r.error, str) and r.error else "")
                for r in failed.itertuples()]  # fmt: skip
        tipped_points(ax_t, [(t - t0) / 1e9 for t in failed["sent_ns"]], [0.0] * len(failed),
                      tips, "failed", tooltips, step, marker="x", ms=5, color="tab:red",
                      label="not ok")  # fmt: skip
    phase_bands([ax_t, ax_e], case, t0, ax_t)
    ax_t.set_ylabel("TTFT (ms)")
    ax_e.set_ylabel("E2EL (ms)")
    ax_e.set_xlabel("request sent, s since the case's first phase began")
    if tooltips:
        ax_t.legend(loc="upper right", fontsize=7)
    fig.suptitle(f"{case.name}: latency of each request (hover a point for its request)")
    return save(fig, out, tooltips)


def _sample_tips(case: CaseData, t0: int) -> tuple[list[float], list[float], list[str]]:
    """Per scrape: time (s since ``t0``), the largest engine's KV usage (%) and a hover text
    with the phase, KV usage, running and waiting requests (summed over engines) and the
    cumulative preemptions."""
    kv: dict[int, float] = {}
    for points in series_by(case.samples, "kv_cache_usage_perc").values():
        for t, v in points:
            kv[t] = max(v, kv.get(t, v))
    totals: dict[str, dict[int, float]] = {}
    for name in ("num_requests_running", "num_requests_waiting", "num_preemptions"):
        for t, v in series(case.samples, name):
            totals.setdefault(name, {})[t] = totals.get(name, {}).get(t, 0.0) + v
    preempt = totals.get("num_preemptions", {})
    base = preempt[min(preempt)] if preempt else 0.0
    x, y, tips = [], [], []
    for t in sorted(kv):
        running = totals.get("num_requests_running", {}).get(t)
        waiting = totals.get("num_requests_waiting", {}).get(t)
        tip = f"{(t - t0) / 1e9:.2f} s · phase {phase_at(case, t)} · KV {kv[t] * 100:.1f} %"
        tip += "" if running is None else f" · running {running:.0f}"
        tip += "" if waiting is None else f" · waiting {waiting:.0f}"
        tip += f" · preemptions {preempt[t] - base:.0f}" if t in preempt else ""
        x.append((t - t0) / 1e9)
        y.append(kv[t] * 100)
        tips.append(tip)
    return x, y, tips


def timeline(case: CaseData, out: Path) -> Path:
    """KV-cache usage and running/waiting requests over time, with phase bands; hover a
    scrape's point on the KV panel for its phase and values, a band for its phase."""
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
    tooltips: dict[str, list[str]] = {}
    # Gauges per engine: summed, data-parallel engines' KV usage would exceed 100 %.
    kv_engines = series_by(case.samples, "kv_cache_usage_perc")
    for engine, kv in kv_engines.items():
        label = f"engine {engine}" if len(kv_engines) > 1 else None
        ax_kv.plot([(t - t0) / 1e9 for t, _ in kv], [v * 100 for _, v in kv], label=label)
    x, y, tips = _sample_tips(case, t0)
    tipped_points(ax_kv, x, y, tips, "scrapes", tooltips, marker="o", ms=2, color="tab:blue")
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
    phase_bands(list(axes), case, t0, ax_kv, tooltips)
    fig.suptitle(f"{case.name}: KV usage, queue, preemptions (sampled; peaks are lower bounds)")
    return save(fig, out, tooltips)
