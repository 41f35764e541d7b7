"""Rendering a report as Markdown (reads summaries only; computes nothing new).

The generic parts (header, sizing, per-case tables, data quality, verdicts, plots) are here,
with the table helpers scenario report modules use for their own sections.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from analysis.models import CaseSummary, PhaseSummary, QuantileBucket, ResealFact, RunSummary
from analysis.reports import PhaseColumn, ScenarioReport
from analysis.server_side import QUANTILES
from loadgen.runformat.manifest import UNVERIFIED_SEAL_REASON
from metrics.names import FAMILIES

STAT_KEYS = ("mean", "std", "p50", "p90", "p95", "p99")


def f(x: Any, digits: int = 1) -> str:
    """A cell: ``–`` for missing, floats with ``digits`` decimals, anything else as text."""
    if x is None:
        return "–"
    if isinstance(x, float):
        return f"{x:.{digits}f}"
    return str(x)


def pct(fraction: float | None) -> str:
    """A 0–1 fraction as a percentage cell (one decimal)."""
    return f(fraction * 100 if fraction is not None else None)


def table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """A Markdown table."""
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


def _generic_columns() -> list[tuple[str, Any]]:
    def kv(p: PhaseSummary) -> str:
        peak = p.gauge_peaks.get("kv_cache_usage_perc")
        return f(peak * 100 if peak is not None else None)

    return [
        ("phase", lambda p: p.phase + (" (incomplete)" if p.incomplete else "")),
        ("req", lambda p: str(p.requests)),
        ("failed", lambda p: str(p.failed)),
        ("interrupted", lambda p: str(p.interrupted)),
        ("TTFT mean", lambda p: f(p.ttft_ms.mean)),
        ("TTFT p50", lambda p: f(p.ttft_ms.p50)),
        ("TTFT p95", lambda p: f(p.ttft_ms.p95)),
        ("TTFT p99", lambda p: f(p.ttft_ms.p99)),
        ("TPOT mean", lambda p: f(p.tpot_ms.mean)),
        ("E2EL p95", lambda p: f(p.e2el_ms.p95)),
        ("out tok/s", lambda p: f(p.output_throughput_tok_s)),
        ("KV peak %", kv),
        ("running peak", lambda p: f(p.gauge_peaks.get("num_requests_running"), 0)),
        ("waiting peak", lambda p: f(p.gauge_peaks.get("num_requests_waiting"), 0)),
        ("conc. asked", lambda p: f(p.requested_concurrency, 0)),
        ("server in flight peak", lambda p: f(p.server_in_flight_peak, 0)),
        ("preemptions", lambda p: f(p.counter_deltas.get("num_preemptions"), 0)),
    ]


def phase_rows(
    case: CaseSummary, phases: Sequence[str], extra: Sequence[PhaseColumn]
) -> tuple[list[str], list[list[str]]]:
    """(headers, rows) of a case's per-phase table: generic columns plus ``extra`` ones,
    each placed after the generic column it names; a planned phase that did not run says so."""
    columns: list[tuple[str, Any]] = []
    for header, cell in _generic_columns():
        columns.append((header, cell))
        for col in extra:
            if col.after == header:
                columns.append((col.header, col))
    headers = [h for h, _ in columns]
    rows = []
    for name in phases:
        p = case.phases.get(name)
        if p is None:
            rows.append([name, "not run"] + [""] * (len(headers) - 2))
            continue
        rows.append(
            [
                cell.cell(case.name, name) if isinstance(cell, PhaseColumn) else cell(p)
                for _, cell in columns
            ]
        )
    return headers, rows


def _counter_table(case: CaseSummary) -> list[str]:
    """Every counter the server reported, as deltas per phase (columns with any value)."""
    names = [
        n
        for n in dict.fromkeys(k for p in case.phases.values() for k in p.counter_deltas)
        if any(p.counter_deltas.get(n) for p in case.phases.values())
    ]
    if not names:
        return []
    rows = [[name, *(f(p.counter_deltas.get(n), 0) for n in names)]
            for name, p in case.phases.items()]  # fmt: skip
    return ["Server counters (Δ over each phase window, summed over engines):", "",
            table(["phase", *names], rows), ""]  # fmt: skip


def bound_text(bound_ms: float) -> str:
    """A bucket bound in ms, as short as it is exact (``5``, ``2.5``, ``2560000``)."""
    value = round(bound_ms, 6)
    return str(int(value)) if value == int(value) else f"{value:g}"


def bucket_text(bucket: QuantileBucket | None) -> str:
    """A server histogram bucket as ``[a, b]`` ms, ``> a`` for the ``+Inf`` bucket."""
    if bucket is None:
        return "–"
    if bucket.high_ms is None:
        return "–" if bucket.low_ms is None else f"> {bound_text(bucket.low_ms)}"
    low = "−∞" if bucket.low_ms is None else bound_text(bucket.low_ms)
    return f"[{low}, {bound_text(bucket.high_ms)}]"


def placed_in(value_ms: float | None, bucket: QuantileBucket | None, digits: int = 1) -> str:
    """A client quantile and where it lies against the server's bucket for the same quantile:
    ``412.0 (inside)``, ``(below)`` or ``(above)``; never a difference to a bucket edge."""
    shown = f(value_ms, digits)
    if value_ms is None or bucket is None:
        return shown
    if bucket.holds(value_ms):
        return f"{shown} (inside)"
    below = bucket.low_ms is not None and value_ms < bucket.low_ms
    return f"{shown} ({'below' if below else 'above'})"


def histogram_table(case: CaseSummary) -> list[str]:
    """vLLM's histograms per phase beside the client's figures for the same quantity: means as
    a difference, quantiles as the server's bucket and where the client's lies against it."""
    rows = []
    for name, p in case.phases.items():
        for h in p.server_histograms.values():
            client = {"ttft_seconds": p.ttft_ms, "itl_seconds": p.itl_ms, "tpot_seconds": p.tpot_ms,
                      "e2e_latency_seconds": p.e2el_ms}.get(h.family)  # fmt: skip
            mean = client.mean if client is not None else None
            diff = mean - h.mean_ms if mean is not None and h.mean_ms is not None else None
            row = [name, h.family, f(h.count, 0), f(h.mean_ms), f(mean), f(diff)]
            for key in QUANTILES:
                bucket = h.buckets.get(key)
                row += [bucket_text(bucket),
                        placed_in(getattr(client, key) if client else None, bucket)]  # fmt: skip
            rows.append(row)
    if not rows:
        return []
    headers = ["phase", "server histogram", "count", "server mean ms", "client mean ms",
               "client − server mean"]  # fmt: skip
    for key in QUANTILES:
        headers += [f"server {key} bucket ms", f"client {key} ms"]
    return [
        "Server-side histograms (bucket deltas over the phase) beside the client's figures for "
        "the same quantity (ms). Means compare as a difference. A histogram only knows which "
        "bucket holds a quantile, so each server quantile is shown as that bucket ('> a': "
        "above the largest finite bound) and the client's quantile as inside, below or above "
        "it, never as a difference to a bucket edge:",
        "",
        table(headers, rows),
        "",
    ]


def _workers_lines(case: CaseSummary) -> list[str]:
    """How many workers sent each phase and, across hosts, the clock-offset error bound."""
    split = {n: p for n, p in case.phases.items() if p.workers}
    if not split:
        return []
    bounds = [p.clock_offset_bound_ms for p in split.values() if p.clock_offset_bound_ms]
    text = (
        f"Load sent by {max(p.workers or 0 for p in split.values())} load-generator workers, "
        "each with its own event loop and record file; every statistic is pooled over the "
        "merged records of all workers (never averaged per worker)."
    )
    if bounds:
        text += (
            " Worker clocks were aligned to the coordinator's by offsets measured before each "
            "phase (minimum-delay round trip through Ray); error bound at most "
            f"{f(max(bounds), 3)} ms (half that round trip)."
        )
    return [text, ""]


def _client_lines(case: CaseSummary) -> list[str]:
    """How the load generator ran: policy and cores of each sending thread, and why."""
    lines = []
    for k, c in enumerate(case.client):
        who = "Load generator" if len(case.client) == 1 else f"Load-generator worker {k}"
        if c is None:
            lines.append(f"{who}: scheduled as Ray started it.")
            continue
        cpus = c.get("cpus")
        cores = f" on core(s) {','.join(map(str, cpus))}" if isinstance(cpus, list) and cpus else ""
        problem = f" **{c['problem']}**" if c.get("problem") else ""
        lines.append(f"{who}: {c.get('policy', '?')}{cores} ({c.get('reason', '')}).{problem}")
    return [" ".join(lines), ""] if lines else []


def _status_line(case: CaseSummary) -> str:
    """The case's one-line summary: status, server, KV capacity, requests, scrapes."""
    server = case.server
    cap = server.get("capacity") or {}
    variant = (server.get("model_variant") or {}).get("variant")
    scrapes = case.scrapes
    return (
        f"Status: **{case.status}**"
        + (f" — {case.error}" if case.error else "")
        + f"; vLLM {server.get('version', '?')}"
        + (f"; model variant {variant}" if variant else "")
        + f"; KV capacity {cap.get('tokens', '?')} tokens "
        f"(block size {cap.get('block_size', '?')}, {cap.get('num_blocks', '?')} blocks); "
        + (
            f"server start {f(server.get('startup_s'))} s; "
            if server.get("pid") is not None or not server.get("url")
            else "server attached (not started by this run); "
        )
        + f"requests {case.requests_total}, "
        f"failed {case.requests_failed}"
        + (
            f", {case.requests_excess_tokens} with more tokens than allowed"
            if case.requests_excess_tokens
            else ""
        )
        + (
            f", interrupted {case.requests_interrupted} (cut by Ctrl-C or SIGTERM, not failures)"
            if case.requests_interrupted
            else ""
        )
        + f"; scrapes {scrapes.ticks} "
        f"(late {scrapes.late}, failed {scrapes.failed}, skipped {scrapes.skipped}"
        + (f", {scrapes.nan_dropped} NaN samples dropped" if scrapes.nan_dropped else "")
        + (
            f", {scrapes.duplicates_dropped} duplicate samples dropped"
            if scrapes.duplicates_dropped
            else ""
        )
        + ")."
    )


def _overall_lines(case: CaseSummary) -> list[str]:
    """The latency statistics of all phases together (ms), when the case sent requests."""
    if not case.requests_total:
        return []
    overall = case.all_phases
    labels = (("TTFT", "ttft_ms"), ("TPOT", "tpot_ms"), ("E2EL", "e2el_ms"),
              ("ITL (per token)", "itl_ms"), ("chunk gap (per step)", "chunk_gap_ms"))  # fmt: skip
    rows = [
        [label, *(f(getattr(getattr(overall, key), k)) for k in STAT_KEYS)] for label, key in labels
    ]
    return ["All phases together (ms):", "", table(["metric", *STAT_KEYS], rows), ""]


def _loop_lag_lines(case: CaseSummary) -> list[str]:
    """The load generator's worst event-loop lag over the case's phases."""
    lags = [p.loop_lag_max_ms or 0.0 for p in case.phases.values()]
    if not lags:
        return []
    return [
        f"Load-generator event-loop lag: max {f(max(lags), 2)} ms over all phases"
        + (" (the worst worker's)." if any(p.workers for p in case.phases.values()) else ".")
        + " 'conc. asked' is the concurrency the phase requested; 'server in flight peak' "
        "the most requests the server held at one scrape (running + waiting, sampled).",
        "",
    ]


def _data_notes(case: CaseSummary) -> list[str]:
    """Metric names matched by an alias, families the server lacks, data-quality notes."""
    out: list[str] = []
    if case.metric_aliases:
        renamed = {
            k: v
            for k, v in case.metric_aliases.items()
            if k in FAMILIES and v != FAMILIES[k].raw_names[0]
        }
        if renamed:
            out += ["Metric names matched by an older alias: "
                    + ", ".join(f"{k} ← `{v}`" for k, v in renamed.items()), ""]  # fmt: skip
    if case.missing_families:
        out += [
            "Metric families this server does not expose (figures from them stay empty, never "
            "0): " + ", ".join(case.missing_families),
            "",
        ]
    if case.data_quality:
        out += ["Data quality:", ""] + [f"- {line}" for line in case.data_quality] + [""]
    return out


def _case_lines(
    case: CaseSummary, phases: Sequence[str], report: ScenarioReport[Any], details: Any
) -> list[str]:
    out = [f"## Case {case.name}", "", _status_line(case), ""]
    out += _client_lines(case)
    headers, rows = phase_rows(case, case.planned_phases or phases, report.phase_columns(details))
    out += [table(headers, rows), ""]
    out += _overall_lines(case)
    out += _counter_table(case)
    out += histogram_table(case)
    out += _loop_lag_lines(case)
    out += _workers_lines(case)
    out += report.case_markdown(details, case.name)
    out += _data_notes(case)
    return out


@dataclass(frozen=True)
class ReportSections:
    """The parts of a report's Markdown, each a list of lines, in the order report.md shows
    them; report.html shows the same text in its own order (``analysis.html.report_page``).

    Attributes:
        title: ``# scenario`` and the description.
        run: command, run status, format, file problems, re-seals, model variant.
        sizing: the sizing list and the definitions.
        cases: per case, its section (``## Case NAME`` first).
        scenario: the scenario's own section (after the cases).
        verdicts: ``## Verdicts``, one line per verdict, the count, and the finding if any.
        plots: ``## Plots`` with an image per plot (empty without plots).
        closing: the lines the report ends with (the scenario's answer).
    """

    title: list[str]
    run: list[str]
    sizing: list[str]
    cases: dict[str, list[str]]
    scenario: list[str]
    verdicts: list[str]
    plots: list[str]
    closing: list[str]

    def lines(self) -> list[str]:
        """Every line in report.md's order."""
        out = self.title + self.run + self.sizing
        for lines in self.cases.values():
            out += lines
        return out + self.scenario + self.verdicts + self.plots + self.closing


VERDICT_MARKS = {True: "PASS", False: "FAIL", None: "UNDECIDED"}


def headline(summary: RunSummary) -> str:
    """The verdict count: ``9 passed, 1 failed, 0 undecided.``"""
    s = summary.verdict_summary
    return f"{s.passed} passed, {s.failed} failed, {s.undecided} undecided."


def finding(summary: RunSummary) -> str | None:
    """The sentence a run that did not show every declared effect gets, else ``None``."""
    s = summary.verdict_summary
    if s.failed or s.undecided:
        return "The scenario did not show every effect it declares: that is a finding, see above."
    return None


def _run_lines(summary: RunSummary) -> list[str]:
    out: list[str] = []
    run = summary.run
    if run.command:
        out += [f"Command: `{' '.join(run.command)}`", ""]
    if run.status:
        out += [
            f"Run status: **{run.status}**"
            + (f", wall time {run.wall_s:.0f} s" if run.wall_s else ""),
            "",
        ]
    migrated = " (written before versions were recorded; read through its migration)"
    out += [f"Run format: version {run.format_version}"
            + (migrated if run.format_version == 0 else ""), ""]  # fmt: skip
    if run.file_problems:
        out += [f"Run file problem: {p}" for p in run.file_problems] + [""]
    if run.resealed:
        out += [f"**Resealed** at {r.at}: {r.reason} ({_reseal_detail(r)})"
                for r in run.resealed] + [""]  # fmt: skip
    if run.model_variant:
        out += [
            f"Embedded model variant: **{run.model_variant.get('variant')}** "
            f"({run.model_variant.get('reason', '')})",
            "",
        ]
    return out


def report_sections(
    summary: RunSummary, report: ScenarioReport[Any], details: Any
) -> ReportSections:
    """The report's Markdown in parts (``ReportSections``)."""
    sizing = ["## Sizing (from the server's real KV capacity)", ""]
    sizing += [f"- {k}: {v}" for k, v in summary.sizing.items()] + [""]
    sizing += [
        "Definitions: TTFT = first token-carrying chunk − send; TPOT = (E2EL − TTFT)/(tokens − 1); "
        "E2EL = last token − send; ITL = gap between token-carrying chunks split evenly over the "
        "later chunk's tokens; chunk gap = the gap itself (time per engine step). All in ms, over "
        "successful requests. Counter figures are deltas over each phase window. Peaks are "
        "sampled every scrape, so they are lower bounds.",
        "",
    ]
    verdicts = ["## Verdicts", ""]
    verdicts += [f"- **{VERDICT_MARKS[v.passed]}** {v.case}: {v.check} — {v.detail}"
                 for v in summary.verdicts]  # fmt: skip
    verdicts += ["", headline(summary), ""]
    if (found := finding(summary)) is not None:
        verdicts += [f"**{found}**", ""]
    plots = ["## Plots", ""] + [f"![{p}]({p})" for p in summary.plots] + [""]
    cases = summary.cases.values()
    return ReportSections(
        title=[f"# {summary.scenario}", "", summary.description, ""],
        run=_run_lines(summary),
        sizing=sizing,
        cases={c.name: _case_lines(c, summary.phases, report, details) for c in cases},
        scenario=report.markdown(details),
        verdicts=verdicts,
        plots=plots if summary.plots else [],
        closing=report.closing(details),
    )


def render_markdown(summary: RunSummary, report: ScenarioReport[Any], details: Any) -> str:
    """The whole report as Markdown."""
    return "\n".join(report_sections(summary, report, details).lines())


def _reseal_detail(reseal: ResealFact) -> str:
    """What a re-seal's line says in brackets: that there was no manifest to check against
    (:data:`UNVERIFIED_SEAL_REASON`), what differed from the manifest, or that nothing did."""
    if reseal.reason == UNVERIFIED_SEAL_REASON:
        return "; ".join(reseal.changed) or "there was no manifest"
    if reseal.changed:
        return ("its files were sealed again although they no longer matched the manifest: "
                + "; ".join(reseal.changed))  # fmt: skip
    return "sealed again with every file as the manifest had it"
