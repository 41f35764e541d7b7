"""compare.html: a comparison (``loadgen compare``, ``loadgen gate``) as one self-contained page.

The same text as compare.md (``analysis.compare_report.compare_sections``), ordered for a
reader: the gate's headline and exit code (which names what regressed), the undecided key
metrics, every verdict compared, then the sides and the method, then per case the forest plot
of candidate/baseline ratios (inlined; hover a metric for its change, interval and class) above
its metrics table.
Nothing here computes a figure.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

from analysis.compare import Comparison
from analysis.gate_decision import Decision
from analysis.html.page import anchor, esc, figure, markdown_html, page


class CompareSections(Protocol):
    """What the page reads of ``analysis.compare_report.CompareSections`` (which imports this
    module to write the page): compare.md's parts, each a list of lines."""

    @property
    def decision(self) -> list[str]: ...
    @property
    def overview(self) -> list[str]: ...
    @property
    def headings(self) -> dict[str, list[str]]: ...
    @property
    def verdicts(self) -> dict[str, list[str]]: ...
    @property
    def metrics(self) -> dict[str, list[str]]: ...


_TONES = {0: "pass", 1: "fail"}


def _head(c: Comparison, decision: Decision, strict: bool) -> str:
    sides = " vs ".join(
        f"{side.label} vLLM {', '.join(side.vllm_versions)} ({len(side.runs)} run"
        f"{'' if len(side.runs) == 1 else 's'})"
        for side in (c.baseline, c.candidate)
    )
    return (
        f'<header><p class="kicker">serving-testbed comparison · {esc(sides)}</p>'
        f"<h1>Regression gate: {esc(c.scenario)}</h1>"
        f'<div class="headline {_TONES.get(decision.exit_code, "undecided")}" id="headline">'
        f"<strong>{esc(decision.line)}</strong> (exit code {decision.exit_code}"
        + (", --strict" if strict else "")
        + ")</div></header>"
    )


def compare_page(
    c: Comparison, decision: Decision, sections: CompareSections, svgs: Mapping[str, str],
    strict: bool = False,
) -> str:  # fmt: skip
    """The page of a comparison: ``c`` (compare.json's model), its ``decision``, its Markdown
    ``sections`` and the SVG of each case's ratio plot, keyed by baseline case."""
    cases = list(sections.headings)
    toc = [("verdicts", "Verdicts"), ("overview", "Sides and method")]
    toc += [(f"case-{anchor(case)}", f"Case {case}") for case in cases]
    verdicts = []
    for case in cases:
        if sections.verdicts[case]:
            verdicts.append(f"<h3>Case {esc(case)}</h3>" + markdown_html(sections.verdicts[case]))
    parts = [
        _head(c, decision, strict),
        '<nav class="toc">'
        + "".join(f'<a href="#{a}">{esc(label)}</a>' for a, label in toc)
        + "</nav>",
        # The decision's own lines after its headline: the undecided key metrics, if any.
        markdown_html(sections.decision[2:]),
        '<section id="verdicts"><h2>Verdicts</h2>'
        + ("".join(verdicts) or "<p>No verdicts to compare.</p>")
        + "</section>",
        '<section id="overview"><h2>Sides and method</h2>'
        + markdown_html(sections.overview)
        + "</section>",
    ]
    for case in cases:
        caption = (
            f"plots/compare_{case}.png: candidate/baseline ratio of each metric with its "
            "interval (grey: the no-change band); hover a metric for its figures"
        )
        parts.append(
            f'<section id="case-{anchor(case)}">{markdown_html(sections.headings[case])}'
            f"{figure(f'compare_{case}', svgs.get(case), caption)}"
            f"{markdown_html(sections.metrics[case])}</section>"
        )
    parts.append(
        "<footer>Rendered by loadgen from compare.json's figures and the plots' SVGs; "
        "compare.md holds the same text. Click a column header to sort a table.</footer>"
    )
    return page(f"{c.scenario} gate: {decision.line}", "\n".join(parts))
