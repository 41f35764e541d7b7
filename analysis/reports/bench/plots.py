"""bench's plot: the throughput–latency curve, one point per phase."""

from __future__ import annotations

from pathlib import Path

from analysis.plots import save
from analysis.reports.bench.figures import BenchPhase, phases_frame


def throughput_latency(phases: list[BenchPhase], out: Path) -> Path:
    """Output tok/s (x) against TTFT p99 and TPOT p50 (ms, y; two panels), each point a phase
    labelled with its name, joined in run order; written to ``out``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    frame = phases_frame(phases)
    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for ax, column, label in (
        (axes[0], "ttft_p99_ms", "TTFT p99 (ms)"),
        (axes[1], "tpot_p50_ms", "TPOT p50 (ms)"),
    ):
        ax.plot(frame["output_tok_s"], frame[column], marker="o")
        for _, row in frame.iterrows():
            ax.annotate(str(row["phase"]), (row["output_tok_s"], row[column]),
                        textcoords="offset points", xytext=(4, 4), fontsize=8)  # fmt: skip
        ax.set_xlabel("output throughput (tok/s)")
        ax.set_ylabel(label)
        ax.grid(True, alpha=0.3)
    fig.suptitle("Throughput–latency, one point per phase")
    return save(fig, out)
