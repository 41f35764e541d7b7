"""Generic per-phase and per-case summaries: what every run has, whatever its scenario.

Phase-level claims use counter *deltas* over the phase window, never lifetime totals
(docs/reports.md). Window of a phase: [start, end] where start = first request sent and end =
last request finished + settle wait (the ``end_ns`` the run recorded). Throughput = output
tokens (of successful requests) / duration and successful requests / duration, where the
duration is last request finished − first request sent, in s. Latency statistics are over
successful requests only; failures and aborts are counted beside them, and requests the
user's interrupt cut (status ``interrupted``) apart from both: they are no failure of the
server, so no failure count or rate includes them.

Cached-token rate (the client-side prefix-cache hit rate) = Σ cached tokens / Σ prompt tokens
over the successful requests that reported cached tokens
(``usage.prompt_tokens_details.cached_tokens``; vLLM reports it only with
``--enable-prompt-tokens-details``): numerator and denominator from the same requests, so a
failed request or a server that does not report counts neither as a miss nor as a hit; with
no such request the rate is ``None``, never 0.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Mapping
from typing import Any

import pandas as pd

from analysis import server_side, timing_trust
from analysis.latency import (
    chunk_gaps,
    describe,
    itl_per_token_ms,
    records_of,
    request_frame,
    tokens_per_chunk,
)
from analysis.load import CaseData
from analysis.models import CaseSummary, LatencyStats, PhaseSummary, ScrapeAccounting, Stats
from loadgen.runformat import PhaseRow
from metrics.ticks import count_ticks, size_drop_warning


def stats(values: Any) -> Stats:
    """:class:`Stats` of ``values`` (NaNs dropped), see ``analysis.latency.describe``."""
    return Stats.model_validate(describe(values))


def latency_stats(ok: pd.DataFrame) -> LatencyStats:
    """TTFT/TPOT/E2EL/ITL statistics of the successful requests in ``ok``."""
    if ok.empty:
        return LatencyStats()
    records = records_of(ok)
    gaps, _ = chunk_gaps(records)
    return LatencyStats(
        ttft_ms=stats(ok["ttft_ms"]),
        tpot_ms=stats(ok["tpot_ms"]),
        e2el_ms=stats(ok["e2el_ms"]),
        itl_ms=stats(itl_per_token_ms(records)),
        chunk_gap_ms=stats(gaps),
        tokens_per_chunk=stats(tokens_per_chunk(records)),
    )


def _count(rows: pd.DataFrame, status: str) -> int:
    return int((rows["status"] == status).sum()) if not rows.empty else 0


def _timing_counts(rows: pd.DataFrame) -> dict[str, int]:
    if rows.empty:
        return {}
    return dict(sorted(Counter(t for t in rows["timing"] if isinstance(t, str)).items()))


def _cached_figures(ok: pd.DataFrame) -> dict[str, Any]:
    """Cached-token figures of the successful requests ``ok`` (module docstring)."""
    if ok.empty or "cached_tokens" not in ok:
        return {"cached_tokens": None, "cached_reported": 0, "cached_prompt_tokens": 0,
                "cached_token_rate": None}  # fmt: skip
    reported = ok[ok["cached_tokens"].notna()]
    prompt = int(reported["prompt_tokens_sent"].sum()) if not reported.empty else 0
    cached = int(reported["cached_tokens"].sum()) if not reported.empty else None
    return {
        "cached_tokens": cached,
        "cached_reported": len(reported),
        "cached_prompt_tokens": prompt,
        "cached_token_rate": cached / prompt if cached is not None and prompt > 0 else None,
    }


def phase_summary(
    case: CaseData,
    phase: PhaseRow,
    frame: pd.DataFrame,
    unusable: Collection[str] | None = None,
) -> PhaseSummary:
    """Summary of one phase of one case (see the module docstring for definitions); malformed
    server histograms (``unusable``, or ``server_side.unusable_histograms`` of the case when
    not given) are left out."""
    name = phase.phase
    rows = frame[frame["phase"] == name] if not frame.empty else frame
    ok = rows[rows["status"] == "ok"] if not rows.empty else rows
    start, end = phase.start_ns, phase.end_ns
    duration_s = (phase.last_end_ns - start) / 1e9
    deltas, resets = server_side.counter_figures(case.samples, start, end)
    peaks, per_engine, gauge_points = server_side.gauge_figures(case.samples, start, end)
    out_tokens = int(ok["output_tokens"].sum()) if not ok.empty else 0
    positive = duration_s > 0
    return PhaseSummary(
        **dict(latency_stats(ok)),
        phase=name,
        requests=len(rows),
        ok=len(ok),
        failed=_count(rows, "error"),
        aborted=_count(rows, "aborted"),
        not_sent=_count(rows, "not_sent"),
        interrupted=_count(rows, "interrupted"),
        duration_s=duration_s,
        output_tokens=out_tokens,
        output_throughput_tok_s=out_tokens / duration_s if positive else None,
        request_throughput_req_s=len(ok) / duration_s if positive else None,
        prompt_tokens=int(rows["prompt_tokens_sent"].sum()) if not rows.empty else 0,
        **_cached_figures(ok),
        token_timing=_timing_counts(rows),
        send_lateness_ms=stats(rows["send_lateness_ms"]) if not rows.empty else Stats(),
        counter_deltas=deltas,
        counter_resets=resets,
        gauge_peaks=peaks,
        gauge_peaks_by_engine=per_engine,
        gauge_samples=gauge_points,
        server_histograms=server_side.histogram_figures(case.samples, start, end, unusable),
        deltas_flag=server_side.deltas_flag(case, phase),
        loop_lag_max_ms=phase.loop_lag_max_ms,
        loop_lag_p99_ms=phase.loop_lag_p99_ms,
        late_sends=phase.late_sends,
        requested_concurrency=phase.requested_concurrency,
        server_in_flight_peak=server_side.in_flight_peak(case.samples, start, end),
        workers=len(phase.workers) if phase.workers else None,
        clock_offset_bound_ms=_offset_bound_ms(case, name),
        incomplete=incomplete_reason(phase),
    )


#: Why a phase row marks its phase incomplete (``analysis.load`` / ``loadgen.execute``).
REBUILT = (
    "the run ended during it (killed: no phases.jsonl row); its window was rebuilt from its "
    "records, first send → last end, without settle, and requests unfinished then are absent"
)
INTERRUPTED = "interrupted (Ctrl-C or SIGTERM) while it ran: its figures cover the part before"
SERVER_DIED = "its server died while it ran ({reason}): its figures cover the part before"
FAILED = "the load generator failed while it ran ({reason}): its figures cover the part before"
#: A row of a run written before ``ended_by`` was recorded: the cause is not known.
CUT_SHORT = (
    "cut short (server gone or Ctrl-C: the run did not record which): its figures cover the "
    "part before"
)


def incomplete_reason(phase: PhaseRow) -> str | None:
    """Why a phase row's figures cover only part of its phase, or ``None``: the cause its row
    names (``ended_by``: the user's interrupt, the server's death, an error)."""
    if phase.rebuilt_from_records:
        return REBUILT
    if phase.ended_by == "interrupt":
        return INTERRUPTED
    if phase.ended_by == "server_died":
        return SERVER_DIED.format(reason=phase.end_reason or "no reason recorded")
    if phase.ended_by == "error":
        return FAILED.format(reason=phase.end_reason or "no reason recorded")
    if phase.interrupted:
        return CUT_SHORT
    return None


def _offset_bound_ms(case: CaseData, phase: str) -> float | None:
    bounds = [o.bound_ns for o in case.clock_offsets if o.phase == phase]
    return max(bounds) / 1e6 if bounds else None


def scrape_accounting(case: CaseData) -> ScrapeAccounting:
    """Counts of the case's scrape ticks by outcome, late ticks and NaN samples dropped
    (by the scraper, or by the reader from a corrupt samples file)."""
    counts = count_ticks(case.scrapes)
    return ScrapeAccounting(
        ticks=counts.ticks,
        ok=counts.ok,
        failed=counts.failed,
        skipped=counts.skipped,
        late=counts.late,
        nan_dropped=counts.nan_dropped + case.nonfinite_samples,
        duplicates_dropped=counts.duplicates_dropped + case.duplicate_samples,
    )


def metric_aliases(case: CaseData) -> tuple[dict[str, str], list[str]]:
    """(canonical family → the exposition name it matched, families the server lacked), as
    the scraper last recorded them."""
    aliases: dict[str, str] = {}
    missing: list[str] = []
    for s in case.scrapes:
        if s.aliases is not None:
            aliases = dict(s.aliases)
            missing = list(s.missing or [])
    return dict(sorted(aliases.items())), sorted(missing)


def data_quality(
    case: CaseData, phases: dict[str, PhaseSummary], unusable: Mapping[str, str] | None = None
) -> list[str]:
    """What a reader of this case's figures must know (empty when nothing is off);
    ``unusable``: malformed server histograms and why (``server_side.unusable_histograms``)."""
    out = list(case.file_problems)
    for family, why in (unusable or {}).items():
        out.append(f"server histogram {family} unusable ({why}): its quantiles are left out")
    ticks = count_ticks(case.scrapes)
    if case.nonfinite_samples:
        out.append(f"{case.nonfinite_samples} non-finite metric samples dropped")
    if ticks.nan_dropped:
        out.append(
            f"{ticks.nan_dropped} NaN/±Inf metric sample(s) dropped by the scraper: a gauge "
            "peak or a counter read at those scrapes comes from the other scrapes"
        )
    if ticks.negative_dropped:
        out.append(
            f"{ticks.negative_dropped} negative metric sample(s) dropped by the scraper (no "
            "recorded family can be below 0: the server's exporter is broken there): a gauge "
            "peak or a counter read at those scrapes comes from the other scrapes"
        )
    if too_large := size_drop_warning(case.scrapes):
        out.append(too_large)
    duplicates = ticks.duplicates_dropped + case.duplicate_samples
    if duplicates:
        out.append(
            f"{duplicates} duplicate series sample(s) dropped (a /metrics page repeated a name "
            "and label set; the first kept, as Prometheus does)"
        )
    sampled = {s.name for s in case.samples}  # a family never sampled is "missing" instead
    for name, p in phases.items():
        if p.incomplete:
            out.append(f"phase {name} is incomplete: {p.incomplete}")
        if p.deltas_flag:
            out.append(f"phase {name}: {p.deltas_flag}")
        unknown = [c for c, v in p.counter_deltas.items() if v is None and c in sampled]
        if unknown and not (p.deltas_flag and "no successful scrape ended inside" in p.deltas_flag):
            out.append(
                f"phase {name}: counter(s) {', '.join(unknown)} not read inside the phase "
                "window: their deltas are unknown (–)"
            )
        final_only = p.token_timing.get("final_only", 0)
        if final_only:
            out.append(
                f"phase {name}: {final_only} request(s) received all their tokens in one chunk "
                "(the server or a proxy buffered the stream): their TTFT equals their E2EL"
            )
        if p.token_timing.get("text", 0):
            out.append(
                f"phase {name}: {p.token_timing['text']} request(s) had no running usage from "
                "the server; their token stamps come from text chunks"
            )
        for counter, n in p.counter_resets.items():
            out.append(f"phase {name}: counter {counter} reset {n}× (a server restart)")
    multi_token = timing_trust.multi_token_events(sampled)
    out += timing_trust.warnings(case.phases, case.records, multi_token)
    return out


def client_rows(value: Any) -> list[dict[str, Any] | None]:
    """``case.json``'s ``client`` (how each sending thread ran, ``loadgen.placement``) as
    the report shows it: per thread ``policy`` and ``reason`` (strings), ``cpus`` (a list of
    ints or ``None``), ``problem`` (string or ``None``); ``None`` for a worker left as Ray
    started it. Anything else is dropped: a display field never fails a report."""
    if not isinstance(value, list):
        return []

    def text(v: Any) -> str | None:
        return v if isinstance(v, str) else None

    rows: list[dict[str, Any] | None] = []
    for row in value:
        if row is None:
            rows.append(None)
        elif isinstance(row, dict):
            cpus = row.get("cpus")
            ok = isinstance(cpus, list) and all(type(c) is int for c in cpus)
            rows.append({"policy": text(row.get("policy")) or "?",
                         "cpus": cpus if ok else None, "reason": text(row.get("reason")) or "",
                         "problem": text(row.get("problem"))})  # fmt: skip
    return rows


def case_summary(case: CaseData, label: str = "", planned: list[str] | None = None) -> CaseSummary:
    """All generic summaries of one case."""
    frame = request_frame(case.records)
    unusable = server_side.unusable_histograms(case.samples)
    phases = {p.phase: phase_summary(case, p, frame, unusable) for p in case.phases}
    ok = frame[frame["status"] == "ok"] if not frame.empty else frame
    aliases, missing = metric_aliases(case)
    return CaseSummary(
        name=case.name,
        label=label,
        role=case.spec.role if case.spec is not None else "test",
        status=case.info.status or "missing",
        error=case.info.error,
        server=case.info.server or {},
        client=client_rows(case.info.client),
        planned_phases=planned or list(phases),
        phases=phases,
        all_phases=latency_stats(ok),
        requests_total=len(case.records),
        requests_failed=sum(1 for r in case.records if r.status == "error"),
        requests_aborted=sum(1 for r in case.records if r.status == "aborted"),
        requests_excess_tokens=sum(1 for r in case.records if r.excess_tokens),
        requests_interrupted=sum(1 for r in case.records if r.status == "interrupted"),
        token_timing=_timing_counts(frame),
        scrapes=scrape_accounting(case),
        metric_aliases=aliases,
        missing_families=missing,
        unusable_histograms=unusable,
        data_quality=data_quality(case, phases, unusable),
    )
