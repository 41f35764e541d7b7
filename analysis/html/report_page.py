"""report.html: a run's report as one self-contained page (docs/reports.md, "report.html").

The page shows what report.md shows, from the same typed summary that report.json holds and
the same Markdown (``analysis.markdown.report_sections``), in the order a reader wants it:
the headline and every verdict first, then the scenario's answer, the run's facts, each case
with its tables and its figures, the scenario's own section with its figures. Figures are
the SVGs written beside the PNGs (``analysis.plots.save``), inlined, with their hover texts.
Nothing here computes a figure: a value on the page is one of report.json's.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import PurePosixPath

from analysis.html.page import anchor, esc, figure, markdown_html, page
from analysis.markdown import VERDICT_MARKS, ReportSections, finding, headline
from analysis.models import RunSummary

#: What each generic plot shows, for its caption (scenario plots are captioned by name).
CAPTIONS = {
    "latency": "each request's TTFT and E2EL over time; hover a point for its request id, "
    "phase and figures",
    "timeline": "KV usage, running and waiting requests over time; hover a scrape's point for "
    "its phase and values, a band for its phase",
    "ttft_by_phase": "TTFT per phase (box plot)",
}


def _tone(summary: RunSummary) -> str:
    s = summary.verdict_summary
    return "fail" if s.failed else "undecided" if s.undecided else "pass"


def _verdict_table(summary: RunSummary) -> str:
    rows = []
    for v in summary.verdicts:
        mark = VERDICT_MARKS[v.passed]
        rows.append(
            f'<tr class="{mark.lower()}"><td class="mark">{mark}</td><td>{esc(v.case)}</td>'
            f"<td>{esc(v.check)}</td><td>{esc(v.detail)}</td></tr>"
        )
    if not rows:
        return "<p>This scenario declares no checks.</p>"
    return (
        '<div class="scroll"><table class="verdicts"><thead><tr><th>result</th><th>case</th>'
        "<th>check</th><th>detail</th></tr></thead><tbody>\n"
        + "\n".join(rows)
        + "\n</tbody></table></div>"
    )


def _head(summary: RunSummary) -> str:
    run = summary.run
    facts = [f"run status {run.status or 'unknown'}", f"run format {run.format_version}"]
    if run.started_at:
        facts.insert(0, f"started {run.started_at}")
    why = finding(summary)
    return (
        f'<header><p class="kicker">serving-testbed report · {esc(" · ".join(facts))}</p>'
        f"<h1>{esc(summary.scenario)}</h1>"
        f'<p class="lede">{esc(summary.description)}</p>'
        f'<div class="headline {_tone(summary)}" id="headline"><strong>'
        f"{esc(headline(summary))}</strong>"
        + (f'<span class="why">{esc(why)}</span>' if why else "")
        + "</div></header>"
    )


def _case_of(plot: str, cases: list[str]) -> str | None:
    """The case a plot belongs to, by its file name (``timeline_NAME.png``,
    ``breaker_NAME_PHASE.png``), longest case name first; ``None`` for a run-wide plot."""
    stem = PurePosixPath(plot).stem
    for case in sorted(cases, key=len, reverse=True):
        if stem.endswith(f"_{case}") or f"_{case}_" in stem:
            return case
    return None


def _figures(plots: list[str], svgs: Mapping[str, str]) -> str:
    out = []
    for plot in plots:
        stem = PurePosixPath(plot).stem
        kind = next((k for k in CAPTIONS if stem == k or stem.startswith(f"{k}_")), None)
        caption = f"{plot}" + (f": {CAPTIONS[kind]}" if kind else "")
        out.append(figure(stem, svgs.get(plot), caption))
    return "\n".join(out)


def report_page(summary: RunSummary, sections: ReportSections, svgs: Mapping[str, str]) -> str:
    """The page of a run: ``summary`` (report.json's model), its Markdown ``sections`` and the
    SVG text of each plot, keyed by the plot's path as ``summary.plots`` lists it."""
    cases = list(sections.cases)
    by_case: dict[str | None, list[str]] = {}
    for plot in summary.plots:
        by_case.setdefault(_case_of(plot, cases), []).append(plot)
    toc = [("verdicts", "Verdicts"), ("run", "Run")]
    toc += [(f"case-{anchor(c)}", f"Case {c}") for c in cases]
    if sections.scenario or by_case.get(None):
        toc.append(("scenario", summary.scenario if sections.scenario else "Figures"))
    parts = [
        _head(summary),
        '<nav class="toc">'
        + "".join(f'<a href="#{a}">{esc(label)}</a>' for a, label in toc)
        + "</nav>",
        f'<section id="verdicts"><h2>Verdicts</h2>{_verdict_table(summary)}</section>',
    ]
    if sections.closing:
        parts.append(f'<section id="answer">{markdown_html(sections.closing)}</section>')
    parts.append(
        '<section id="run"><h2>Run</h2>'
        + markdown_html(sections.run)
        + "<details><summary>Sizing and definitions</summary>"
        + markdown_html(sections.sizing)
        + "</details></section>"
    )
    for case, lines in sections.cases.items():
        parts.append(
            f'<section id="case-{anchor(case)}">{markdown_html(lines)}'
            f"{_figures(by_case.get(case, []), svgs)}</section>"
        )
    if sections.scenario or by_case.get(None):
        text = markdown_html(sections.scenario) if sections.scenario else "<h2>Figures</h2>"
        parts.append(
            f'<section id="scenario">{text}{_figures(by_case.get(None, []), svgs)}</section>'
        )
    parts.append(
        "<footer>Rendered by loadgen from report.json's figures and the plots' SVGs "
        "(plots/*.svg); report.md holds the same text. Click a column header to sort a "
        "table.</footer>"
    )
    return page(f"{summary.scenario}: {headline(summary)}", "\n".join(parts))
