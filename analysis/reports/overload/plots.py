"""overload's plot: goodput against offered load, one line per arm, the peak and the
no-admission collapse marked."""

from __future__ import annotations

from pathlib import Path

from matplotlib import pyplot as plt

from analysis.plots import save
from analysis.reports.overload.models import OverloadDetails
from scenarios.overload import NONE_ARM


def goodput_vs_load(details: OverloadDetails, out: Path) -> Path:
    """Goodput (req/s) against the offered load (× the sustainable rate), per arm."""
    fig, ax = plt.subplots(figsize=(7.5, 4.5))
    arms = list(dict.fromkeys(p.arm for p in details.points))
    for arm in arms:
        points = sorted((p for p in details.points if p.arm == arm), key=lambda p: p.load)
        style = "k--o" if arm == NONE_ARM else "-s"
        ax.plot([p.load for p in points], [p.goodput_rps for p in points], style, label=arm)
    peak = max(details.points, key=lambda p: p.goodput_rps, default=None)
    if peak is not None:
        ax.plot([peak.load], [peak.goodput_rps], "*", color="tab:green", markersize=16,
                label=f"peak {peak.goodput_rps:.2f} req/s ({peak.arm})")  # fmt: skip
    none = [p for p in details.points if p.arm == NONE_ARM]
    if none and peak is not None:
        worst = min(none, key=lambda p: p.goodput_rps)
        ax.annotate(
            f"no admission: {worst.goodput_rps:.2f} req/s at {worst.load:g}×",
            (worst.load, worst.goodput_rps), xytext=(0.3, 0.12), textcoords="axes fraction",
            arrowprops={"arrowstyle": "->", "color": "tab:red"}, color="tab:red", fontsize=8,
        )  # fmt: skip
    ax.set_xlabel("offered load (× the sustainable rate)")
    ax.set_ylabel("goodput (req/s meeting every SLO)")
    ax.set_ylim(0, None)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    ax.set_title("Goodput vs offered load, per admission arm")
    return save(fig, out)


def draw_plots(details: OverloadDetails, out_dir: Path) -> list[Path]:
    """Every plot of the report, written into ``out_dir``."""
    return [goodput_vs_load(details, out_dir / "overload_goodput.png")]
