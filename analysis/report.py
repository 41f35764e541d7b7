"""Building the report of a run from its raw files: ``report.json``, ``report.md``,
``report.html``, plots.

``build_report`` is the single entry point used at the end of a run and by
``loadgen report RUN``; it reads only the run directory (through ``analysis.load``), so a
rebuild gives the same report. It builds nothing from a broken run: the integrity rule every
reader applies (``analysis.integrity.check_run``) must find no problem first, else it raises
``IntegrityError`` and writes nothing (docs/run-integrity.md). The generic part comes from
``analysis.summaries``; the scenario's own section, columns, plots and check evaluators from
its module in ``analysis.reports``.

See docs/reports.md.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from analysis import checks, plots
from analysis.html.report_page import report_page
from analysis.integrity import IntegrityError, check_run, manifest_changes
from analysis.load import RunData, load_run
from analysis.markdown import phase_rows, report_sections
from analysis.models import ResealFact, RunFacts, RunSummary
from analysis.reports import ScenarioReport, report_for
from analysis.summaries import case_summary
from loadgen.runformat import Reseal
from loadgen.runformat.atomic import current_file, staged_writes, write_text
from loadgen.runformat.layout import (
    LATENCY_PLOT,
    PLOTS_DIR,
    REPORT_HTML,
    REPORT_JSON,
    REPORT_MD,
    TIMELINE_PLOT,
    TTFT_PLOT,
)
from loadgen.runformat.manifest import read_reseals
from server.net.json_text import dumps, finite_or_none
from server.net.jsonl import writing


def _run_info(data: RunData, reseals: list[Reseal]) -> RunFacts:
    run = data.run
    return RunFacts(
        file_problems=data.file_problems,
        command=list(run.command or []),
        started_at=run.started_at,
        status=run.status,
        wall_s=run.wall_s,
        model_variant=run.model_variant,
        format_version=data.format_version,
        resealed=[ResealFact(at=r.at, reason=r.reason, changed=r.changed) for r in reseals],
    )


@dataclass(frozen=True)
class Report:
    """A built report: the typed summary, the scenario's report parts, its details, and the
    file problems of the run it was built from."""

    summary: RunSummary
    parts: ScenarioReport[Any]
    details: Any
    #: What the reader skipped or read as empty (run file, then ``case: problem``).
    file_problems: tuple[str, ...] = ()

    def as_dict(self) -> dict[str, Any]:
        """The report as written to ``report.json`` (JSON-ready, no NaN)."""
        result: dict[str, Any] = finite_or_none(self.summary.model_dump(mode="json"))
        return result

    def console_tables(self) -> list[tuple[str, list[str], list[list[str]]]]:
        """Per case: (title, headers, rows) of a short per-phase table for the terminal."""
        keep = {"phase", "req", "failed", "TTFT mean", "TTFT p95", "TPOT mean", "out tok/s"}
        extra = self.parts.phase_columns(self.details)
        keep |= {c.header for c in extra}
        out = []
        for name, case in self.summary.cases.items():
            headers, rows = phase_rows(case, list(case.phases), extra)
            # Requests cut by the user are shown apart from failures, where there are any.
            shown = keep | ({"interrupted"} if case.requests_interrupted else set())
            idx = [i for i, h in enumerate(headers) if h in shown]
            title = f"{self.summary.scenario} — case {name} ({case.status})"
            out.append((title, [headers[i] for i in idx], [[r[i] for i in idx] for r in rows]))
        return out


def summarize_run(data: RunData, reseals: list[Reseal] | None = None) -> Report:
    """The report of ``data`` without plots; ``reseals``: the run's explicit re-seals (its
    manifest's, read when ``None``)."""
    if reseals is None:
        reseals = read_reseals(data.run_dir)
    plan = data.plan
    cases = {
        c.name: case_summary(c, spec.label, [p.name for p in plan.phases_of(spec)])
        for c, spec in zip(data.cases, plan.cases, strict=True)
    }
    parts = report_for(plan.scenario)
    details = parts.details(data, cases)
    verdicts = checks.evaluate(plan.checks, cases, parts, details)
    summary = RunSummary(
        scenario=plan.scenario,
        description=plan.description,
        run=_run_info(data, reseals),
        params=plan.params,
        sizing=plan.sizing,
        phases=plan.phase_names(),
        cases=cases,
        details=None if details is None else details.model_dump(mode="json"),
        verdicts=verdicts,
        verdict_summary=checks.summary(verdicts),
    )
    problems = [
        *data.file_problems,
        *(f"{c.name}: {p}" for c in data.cases for p in c.file_problems),
    ]
    return Report(summary, parts, details, tuple(problems))


def summarize(run_dir: Path, data: RunData | None = None) -> dict[str, Any]:
    """The report as a JSON-ready dict (no file written, no plots); ``data`` if loaded."""
    return summarize_run(data or load_run(run_dir)).as_dict()


def build_report(run_dir: Path, reseal: Reseal | None = None) -> Report:
    """Write ``report.json``, ``report.md``, ``report.html`` and the plots (``plots/*.png``
    and the same figures as ``plots/*.svg``) into ``run_dir``; return the report.
    ``reseal``: the explicit re-seal about to be recorded (``loadgen report --reseal``), shown
    after the run's earlier ones; its manifest differences are then no problem.

    Raises:
        IntegrityError: the run is broken (``analysis.integrity``); nothing was written.
        FormatVersionError: the run's format version is neither this one nor 0.
        RunWriteError: a file of the report could not be written.
    """
    integrity = check_run(run_dir, rebuilding=True)
    problems = integrity.problems
    if reseal is not None:
        manifest = set(manifest_changes(run_dir, rebuilding=True))
        problems = [p for p in problems if p not in manifest]
    if problems:
        raise IntegrityError(run_dir, problems, integrity.implausible)
    data = load_run(run_dir)
    built = summarize_run(data, integrity.reseals + ([reseal] if reseal else []))
    with staged_writes():  # the report's files as one set: all new, or all as they were
        built = _write_report(run_dir, data, built)
    return built


def _write_report(run_dir: Path, data: RunData, built: Report) -> Report:
    """Write the plots, ``report.json``, ``report.md`` and ``report.html`` of ``built``;
    return it with the plots' paths.

    Raises:
        RunWriteError: a file could not be written.
    """
    summary = built.summary
    plot_dir = run_dir / PLOTS_DIR
    with writing(plot_dir):
        plot_dir.mkdir(exist_ok=True)
    written: list[Path] = []
    ran = [c for c in data.cases if c.records]
    if ran:
        written.append(plots.ttft_by_phase(ran, summary.phases, plot_dir / TTFT_PLOT))
    written += built.parts.plots(data, summary.cases, built.details, plot_dir)
    for case in data.cases:
        if case.records:
            written.append(plots.latency(case, plot_dir / LATENCY_PLOT.format(case=case.name)))
        if case.samples:
            written.append(plots.timeline(case, plot_dir / TIMELINE_PLOT.format(case=case.name)))
    summary = summary.model_copy(
        update={"plots": [p.relative_to(run_dir).as_posix() for p in written]}
    )
    built = Report(summary, built.parts, built.details, built.file_problems)
    write_text(run_dir / REPORT_JSON, dumps(built.as_dict(), REPORT_JSON, indent=2) + "\n")
    sections = report_sections(summary, built.parts, built.details)
    write_text(run_dir / REPORT_MD, "\n".join(sections.lines()))
    svg_files = {p: (run_dir / p).with_suffix(".svg") for p in summary.plots}
    svgs = {p: current_file(svg).read_text() for p, svg in svg_files.items()
            if current_file(svg).exists()}  # fmt: skip
    write_text(run_dir / REPORT_HTML, report_page(summary, sections, svgs))
    return built
