"""Writing a comparison: ``compare.md``, ``compare.json``, ``compare.html`` and
``plots/compare_<case>.png`` and ``.svg`` (the candidate/baseline ratios with their intervals;
hover a metric on the page for its figures). Reads a ``Comparison``; computes nothing new.

``compare.json`` is typed and versioned (:class:`CompareFile`, :data:`COMPARE_FORMAT_VERSION`)
and read back by :func:`read_compare_file` (a sequential gate's looks read its decision).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import matplotlib
from pydantic import ValidationError

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from analysis.compare_models import (
    CLASSES,
    Comparison,
    MetricComparison,
    PairedMetric,
    VerdictComparison,
)
from analysis.gate_decision import Decision, decide, is_key, key_selectors
from analysis.html.compare_page import compare_page
from analysis.markdown import f, table
from analysis.plots import save
from loadgen.runformat.atomic import current_file, staged_writes, write_text
from loadgen.runformat.layout import COMPARE_HTML, COMPARE_JSON, COMPARE_MD, PLOTS_DIR
from loadgen.runformat.reading import read_json_object
from server.net.json_text import dumps
from server.net.jsonl import writing

#: The version of ``compare.json``'s format (:class:`CompareFile`).
COMPARE_FORMAT_VERSION = 1


class CompareFile(Comparison):
    """``compare.json``: the comparison with its decision (``analysis.gate_decision``).

    Attributes:
        format_version: this format's version (:data:`COMPARE_FORMAT_VERSION`; a file
            written before it was recorded has none and is version 1).
        exit_code: ``loadgen compare``'s exit code for it (0, 1 or 3).
        decision: the headline, why, and the undecided key metrics.
        strict: every gated metric was key (``--strict``).
    """

    format_version: int = COMPARE_FORMAT_VERSION
    exit_code: int
    decision: Decision
    strict: bool


class CompareFileError(ValueError):
    """``compare.json`` is missing, unreadable, of another format version or mistyped; the
    message is one line naming the file."""


def read_compare_file(out_dir: Path) -> CompareFile:
    """The ``compare.json`` of ``out_dir``, its format version checked first.

    Raises:
        CompareFileError: see the class.
    """
    path = out_dir / COMPARE_JSON
    data, exists, problem = read_json_object(path)
    if data is None:
        raise CompareFileError(f"{path}: {problem}" if exists else f"{path} missing")
    found = data.get("format_version", 1)
    if type(found) is not int or found != COMPARE_FORMAT_VERSION:
        raise CompareFileError(f"{path}: compare format version {found!r}, this loadgen reads "
                               f"version {COMPARE_FORMAT_VERSION}")  # fmt: skip
    try:
        return CompareFile.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(str(x) for x in err["loc"]) or "file"
        raise CompareFileError(f"{path} is not a well-typed comparison ({where}: "
                               f"{err['msg']})") from None  # fmt: skip


_COLOURS = {
    "regression": "tab:red",
    "improvement": "tab:green",
    "no change": "tab:gray",
    "inconclusive": "tab:orange",
    "missing": "black",
}


def _value(m: MetricComparison, x: float | None) -> str:
    if x is None:
        return "–"
    if m.metric.endswith("_ms") or m.metric.endswith("_s"):
        return f(x, 1)
    return f(x, 3) if abs(x) < 10 else f(x, 1)


def _change(m: MetricComparison) -> tuple[str, str, str]:
    """(change, interval, tolerance) cells."""
    if m.scale == "ratio":
        change = "–" if m.change is None else f"{m.change:.3f}×"
        interval = "–" if m.low is None or m.high is None else f"[{m.low:.3f}, {m.high:.3f}]"
        return change, interval, f"±{m.tolerance * 100:.0f} %"
    change = "–" if m.change is None else f"{m.change:+.4g}"
    interval = "–" if m.low is None or m.high is None else f"[{m.low:+.4g}, {m.high:+.4g}]"
    return change, interval, f"±{m.tolerance:g}"


def metric_rows(
    metrics: list[MetricComparison], key: Callable[[MetricComparison], bool] | None = None
) -> list[list[str]]:
    """Table rows: phase, metric, baseline, candidate, change, interval, tolerance, class;
    ``key`` marks the key metrics (``**name**``)."""
    rows = []
    for m in metrics:
        change, interval, tol = _change(m)
        name = m.metric + (f" {m.stat}" if m.stat else "")
        name = f"**{name}**" if key is not None and key(m) else name
        klass = m.classification.upper() if m.classification == "regression" else m.classification
        klass += "" if m.gated else " (not gated)"
        klass += " (incomplete run)" if m.incomplete else ""
        rows.append(
            [m.phase, name, _value(m, m.baseline), _value(m, m.candidate), change, interval, tol,
             klass, m.note]
        )  # fmt: skip
    return rows


def decision_markdown(d: Decision, strict: bool = False) -> list[str]:
    """The headline and, per undecided key metric, why and what would decide it."""
    out = [f"**{d.line}** (exit code {d.exit_code}" + (", --strict" if strict else "") + ")", ""]
    if d.undecided:
        rows = [[u.label, u.classification,
                 "–" if u.estimate is None or u.estimate.extra_pairs is None
                 else str(u.estimate.extra_pairs),
                 "–" if u.estimate is None or u.estimate.requests_factor is None
                 else f"×{u.estimate.requests_factor:.2g}",
                 (u.estimate.why if u.estimate else "") or u.reason]
                for u in d.undecided]  # fmt: skip
        out += [
            "Undecided key metrics, and what would decide them (the extra pairs: each "
            "half-width of the interval shrinking as √(runs) at the observed spread and "
            "effect, t/√(runs) for per-run figures; × requests per phase: the same, if "
            "run-to-run shifts are small; "
            "docs/gate-decisions.md):",
            "",
            table(["key metric", "class", "extra pairs", "or requests", "how / why"], rows),
            "",
        ]
    return out


def _paired_value(m: PairedMetric, x: float | None, relative: bool = False) -> str:
    if x is None:
        return "–"
    if m.scale == "log":
        return f"{x - 1:+.1%}" if not relative else f"{x:.1%}"
    return f"{x:+.3g}" if not relative else f"{x:.3g}"


def paired_markdown(c: Comparison) -> list[str]:
    """The paired key metrics of a paired gate (``analysis.gate_paired_keys``), one row each,
    with the smallest change each can see; empty for an unpaired comparison."""
    if c.paired is None:
        return []
    rows = [[m.case, m.metric, _paired_value(m, m.change),
             "–" if m.low is None else f"[{_paired_value(m, m.low)}, {_paired_value(m, m.high)}]",
             _paired_value(m, m.tolerance, True), _paired_value(m, m.mde, True),
             _paired_value(m, m.mde_next, True), m.classification, m.note]
            for m in c.paired]  # fmt: skip
    return [
        "Paired key metrics (these and every verdict decide; change within block pairs, "
        "pooled over each case's phases; MDE: the smallest change seen with 80 % power at the "
        "comparison's confidence, now and after one more pair; docs/gate-paired.md):",
        "",
        table(
            [
                "case",
                "metric",
                "change",
                "interval",
                "tolerance",
                "MDE",
                "MDE +1 pair",
                "class",
                "note",
            ],
            rows,
        ),
        "",
    ]


@dataclass(frozen=True)
class CompareSections:
    """compare.md's parts, each a list of lines, in the order compare.md shows them;
    compare.html shows the same text (``analysis.html.compare_page``).

    Attributes:
        title: ``# Regression gate: SCENARIO``.
        decision: the headline and the undecided key metrics (``decision_markdown``).
        overview: the sides, the counts, the method, the runs, notes, unpaired cases.
        headings: per baseline case, its heading (``## Case …``).
        verdicts: per baseline case, its verdicts compared (empty without verdicts).
        metrics: per baseline case, its metrics compared.
    """

    title: list[str]
    decision: list[str]
    overview: list[str]
    headings: dict[str, list[str]]
    verdicts: dict[str, list[str]]
    metrics: dict[str, list[str]]

    def lines(self) -> list[str]:
        """Every line in compare.md's order, each case followed by its ratio plot."""
        out = self.title + self.decision + self.overview
        for case, heading in self.headings.items():
            out += [*heading, *self.verdicts[case], *self.metrics[case]]
            out += [f"![ratios]({PLOTS_DIR}/compare_{case}.png)", ""]
        return out


def _who_decides(c: Comparison) -> str:
    """The method's last sentence: which figures decide the headline. In a paired comparison
    the per-phase table is information only (its rows are never bold), whatever the gate
    file's ``[key_metrics]`` names."""
    if c.paired is not None:
        return ("Paired comparison: the paired key metrics above and every verdict decide the "
                "headline; the per-phase table below (each side's runs pooled, classified as "
                "described here) and its counts are information.")  # fmt: skip
    return (
        "Key metrics (in bold) and every verdict decide the headline; the others are information."
    )


def _overview(c: Comparison) -> list[str]:
    b, k, s = c.baseline, c.candidate, c.settings
    out = [
        table(
            ["side", "vLLM (served)", "runs", "workload hash"],
            [
                [
                    side.label,
                    ", ".join(side.vllm_versions),
                    str(len(side.runs)),
                    side.workload_hash[:16],
                ]
                for side in (b, k)
            ],
        ),
        "",
        "Counts: " + ", ".join(f"{name} {c.counts.get(name, 0)}" for name in CLASSES),
        "",
        "Method: per-request metrics are pooled over every successful request of every run of a "
        "side (never an average of per-run percentiles); the interval is a seeded percentile "
        f"bootstrap of the candidate/baseline ratio ({s['resamples']} resamples of whole "
        f"requests, {s['confidence'] * 100:g} %, seed {s['seed']}). Per-run figures compare the "
        "difference (or ratio) of the side means: with 3+ runs a side by Welch's t-interval "
        "at the same confidence, with 2 against the larger run-to-run range. Regression: the "
        "interval lies entirely beyond the tolerance on the bad side; improvement: on the good "
        "side; no change: inside the tolerance; inconclusive: it straddles a tolerance edge, or "
        f"too few values (a statistic needs {s['min_samples']} values, a percentile "
        f"{s['min_tail_samples']} beyond it); missing: a server metric family is absent from a "
        "run (never read as 0). " + _who_decides(c),
        "",
    ]
    for run_list, label in ((b.runs, "Baseline runs"), (k.runs, "Candidate runs")):
        out += [f"{label}: " + ", ".join(f"`{r}`" for r in run_list), ""]
    if c.notes:
        out += ["Notes:", "", *[f"- {n}" for n in c.notes], ""]
    if c.unpaired:
        out += ["Not compared (no partner): " + ", ".join(c.unpaired), ""]
    return out


def _verdict_row(v: VerdictComparison) -> list[str]:
    """A verdict's row: sides, flips of its tested pairs, the smaller one-sided p, class."""
    ps = [p for p in (v.p_regression, v.p_improvement) if p is not None]
    flips = f"{v.pass_fail} / {v.fail_pass} of {v.blocks}" if v.blocks else "–"
    return [v.check, v.baseline, v.candidate, flips, f"{min(ps):.3g}" if ps else "–",
            v.classification + (" (incomplete run)" if v.incomplete else ""), v.note]  # fmt: skip


def compare_sections(c: Comparison, strict: bool = False) -> CompareSections:
    """The comparison's Markdown in parts (``CompareSections``)."""
    selectors = key_selectors(c)

    def keyed(m: MetricComparison) -> bool:
        return c.paired is None and is_key(m, selectors, strict)

    headings: dict[str, list[str]] = {}
    verdict_lines: dict[str, list[str]] = {}
    metric_lines: dict[str, list[str]] = {}
    for b_case, c_case in c.pairs.items():
        title = b_case if b_case == c_case else f"{b_case} ↔ {c_case}"
        headings[b_case] = [f"## Case {title}", ""]
        verdicts = [v for v in c.verdicts if v.case == b_case]
        verdict_lines[b_case] = []
        if verdicts:
            rows = [_verdict_row(v) for v in verdicts]
            heads = ["check", "baseline", "candidate", "pairs pass→fail / fail→pass",
                     "exact p", "class", "note"]  # fmt: skip
            verdict_lines[b_case] = ["Verdicts (McNemar's exact test over the block pairs):",
                                     "", table(heads, rows), ""]  # fmt: skip
        metrics = [m for m in c.metrics if m.case == b_case]
        headers = ["phase", "metric", "baseline", "candidate", "change", "interval",
                   "tolerance", "class", "note"]  # fmt: skip
        metric_lines[b_case] = [table(headers, metric_rows(metrics, keyed)), ""]
    return CompareSections(
        title=[f"# Regression gate: {c.scenario}", ""],
        decision=decision_markdown(decide(c, strict), strict) + paired_markdown(c),
        overview=_overview(c),
        headings=headings,
        verdicts=verdict_lines,
        metrics=metric_lines,
    )


def render_markdown(c: Comparison, strict: bool = False) -> str:
    """The comparison as Markdown."""
    return "\n".join(compare_sections(c, strict).lines())


def _ratio_tip(m: MetricComparison) -> str:
    change, interval, tol = _change(m)
    name = " ".join(x for x in (m.phase, m.metric, m.stat) if x)
    return f"{name}: {change}, interval {interval}, tolerance {tol}: {m.classification}"


def ratio_plot(c: Comparison, case: str, out: Path) -> Path:
    """Forest plot: each ratio metric of ``case`` with its interval and tolerance band."""
    rows = [m for m in c.metrics if m.case == case and m.scale == "ratio" and m.change is not None]
    fig, ax = plt.subplots(figsize=(8, max(2.5, 0.22 * len(rows) + 1)))
    tooltips: dict[str, list[str]] = {}
    for i, m in enumerate(rows):
        y = len(rows) - 1 - i
        ax.add_patch(plt.Rectangle((1 - m.tolerance, y - 0.4), 2 * m.tolerance, 0.8,
                                   color="0.92", zorder=0))  # fmt: skip
        colour = _COLOURS[m.classification]
        if m.low is not None and m.high is not None:
            ax.plot([m.low, m.high], [y, y], color=colour, lw=2, gid=f"interval-{i}")
            tooltips[f"interval-{i}"] = [_ratio_tip(m)]
        ax.plot([m.change or 0.0], [y], "o", color=colour, ms=4, gid=f"change-{i}")
        tooltips[f"change-{i}"] = [_ratio_tip(m)]
    ax.axvline(1.0, color="0.5", lw=0.8)
    ax.set_yticks(
        range(len(rows)),
        [f"{m.phase} {m.metric} {m.stat or ''}".strip() for m in reversed(rows)],
        fontsize=7,
    )
    finite = [
        v for m in rows for v in (m.low, m.high, m.change) if v and math.isfinite(v) and v > 0
    ]
    if finite:
        ax.set_xscale("log")
        ax.set_xlim(min(min(finite), 0.8) / 1.05, max(max(finite), 1.25) * 1.05)
    ax.set_xlabel("candidate / baseline (interval; grey: no-change band)")
    ax.set_title(f"{c.scenario}, case {case}: " + " vs ".join(
        ", ".join(s.vllm_versions) for s in (c.baseline, c.candidate)))  # fmt: skip
    handles = [plt.Line2D([], [], color=col, lw=2, label=k) for k, col in _COLOURS.items()]
    ax.legend(handles=handles, fontsize=7, loc="lower right")
    return save(fig, out, tooltips)


def write_comparison(c: Comparison, out_dir: Path, strict: bool = False) -> Path:
    """Write ``compare.md``, ``compare.json``, ``compare.html`` and the plots (PNG and SVG)
    into ``out_dir``; return the .md.

    Raises:
        RunWriteError: a file (or a directory) could not be written.
    """
    with staged_writes():  # the comparison's files as one set: all new, or all as they were
        return _write_comparison(c, out_dir, strict)


def _write_comparison(c: Comparison, out_dir: Path, strict: bool) -> Path:
    """:func:`write_comparison`'s files, each written whole."""
    plots = out_dir / PLOTS_DIR
    with writing(plots):
        plots.mkdir(parents=True, exist_ok=True)
    svgs = {}
    for case in c.pairs:
        png = ratio_plot(c, case, plots / f"compare_{case}.png")
        svgs[case] = current_file(png.with_suffix(".svg")).read_text()
    decision = decide(c, strict)
    typed = CompareFile(**dict(c), exit_code=decision.exit_code, decision=decision, strict=strict)
    data = typed.model_dump(mode="json")
    # Strict JSON: a NaN or Infinity is refused with its place (the readers of compare.json,
    # the gate among them, take its floats as they are, so none is turned into null).
    write_text(out_dir / COMPARE_JSON, dumps(data, COMPARE_JSON, indent=2) + "\n")
    sections = compare_sections(c, strict)
    path = out_dir / COMPARE_MD
    write_text(path, "\n".join(sections.lines()))
    write_text(out_dir / COMPARE_HTML, compare_page(c, decision, sections, svgs, strict))
    return path
