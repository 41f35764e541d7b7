"""Per-phase and per-case summaries: client latency stats, throughput, counter deltas, peaks.

Phase-level claims use counter *deltas* over the phase window, never lifetime totals
(SCENARIOS.md §3). Window of a phase: [start, end] where start = first request sent and end =
last request finished + settle wait (the ``end_ns`` the run recorded).

- **Prefix-cache hit rate** = Δ``prefix_cache_hits`` / Δ``prefix_cache_queries`` (both in
  tokens; vLLM ``vllm:prefix_cache_{hits,queries}_total``). The client-side twin is
  Σ cached_tokens / Σ prompt tokens over the phase's requests (``usage.prompt_tokens_details``).
- **Throughput** = output tokens / phase duration and requests / phase duration, where the
  duration is last request finished − first request sent, in s.
- **KV-cache usage** = ``vllm:kv_cache_usage_perc`` (a 0–1 fraction); its sampled peak is a
  lower bound of the true peak.
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from analysis.latency import describe, itl_gaps, request_frame
from analysis.load import CaseData
from metrics.samples import counter_delta, gauge_peak, series, value_at

COUNTERS = (
    "prefix_cache_queries",
    "prefix_cache_hits",
    "num_preemptions",
    "prompt_tokens",
    "generation_tokens",
    "request_success",
    "spec_decode_num_drafts",
    "spec_decode_num_draft_tokens",
    "spec_decode_num_accepted_tokens",
)
GAUGES = ("kv_cache_usage_perc", "num_requests_running", "num_requests_waiting")


def _ratio(num: float | None, den: float | None) -> float | None:
    if num is None or den is None or den == 0:
        return None
    return num / den


def phase_summary(case: CaseData, phase: dict[str, Any], frame: pd.DataFrame) -> dict[str, Any]:
    """Summary of one phase of one case (see module docstring for definitions)."""
    name = str(phase["phase"])
    rows = frame[frame["phase"] == name] if not frame.empty else frame
    start, end = int(phase["start_ns"]), int(phase["end_ns"])
    duration_s = (int(phase["last_end_ns"]) - start) / 1e9
    ok = rows[rows["status"] == "ok"] if not rows.empty else rows
    recs = rows.to_dict("records") if not rows.empty else []
    gaps, _ = itl_gaps(recs)
    deltas = {c: counter_delta(series(case.samples, c), start, end) for c in COUNTERS}
    peaks = {g: gauge_peak(series(case.samples, g), start, end) for g in GAUGES}
    prompt_sum = float(rows["prompt_tokens_sent"].sum()) if not rows.empty else 0.0
    cached_sum = float(rows["cached_tokens"].fillna(0).sum()) if not rows.empty else 0.0
    out_tokens = int(ok["output_tokens"].sum()) if not ok.empty else 0
    return {
        "phase": name,
        "requests": len(rows),
        "ok": len(ok),
        "failed": int((rows["status"] == "error").sum()) if not rows.empty else 0,
        "aborted": int((rows["status"] == "aborted").sum()) if not rows.empty else 0,
        "duration_s": duration_s,
        "output_throughput_tok_s": out_tokens / duration_s if duration_s > 0 else None,
        "request_throughput_req_s": len(ok) / duration_s if duration_s > 0 else None,
        "ttft_ms": describe(ok["ttft_ms"]) if not ok.empty else describe([]),
        "tpot_ms": describe(ok["tpot_ms"]) if not ok.empty else describe([]),
        "e2el_ms": describe(ok["e2el_ms"]) if not ok.empty else describe([]),
        "itl_ms": describe(gaps),
        "hit_rate_counters": _ratio(deltas["prefix_cache_hits"], deltas["prefix_cache_queries"]),
        "hit_rate_requests": _ratio(cached_sum, prompt_sum),
        "cached_tokens": cached_sum,
        "counter_deltas": deltas,
        "gauge_peaks": peaks,
        # Lifetime counters at the phase end: how the number people usually watch moves.
        "lifetime_hit_rate_at_end": _ratio(
            value_at(series(case.samples, "prefix_cache_hits"), end),
            value_at(series(case.samples, "prefix_cache_queries"), end),
        ),
        "loop_lag_max_ms": phase.get("loop_lag_max_ms"),
        "loop_lag_p99_ms": phase.get("loop_lag_p99_ms"),
    }


def probe_rows(frame: pd.DataFrame, phases: tuple[str, ...]) -> list[dict[str, Any]]:
    """Probe requests: the first request (by index) of each prefix group in each phase.

    Within a phase only a probe can miss (it re-caches the prefix for the requests behind it),
    so probes carry the eviction signal.
    """
    if frame.empty:
        return []
    out = []
    grouped = frame[frame["group"].notna() & frame["phase"].isin(phases)]
    for (phase, group), rows in grouped.sort_values("index").groupby(
        ["phase", "group"], sort=False
    ):
        first = rows.iloc[0]
        out.append(
            {
                "phase": phase,
                "group": group,
                "request_id": first["request_id"],
                "status": first["status"],
                "cached_tokens": None
                if pd.isna(first["cached_tokens"])
                else int(first["cached_tokens"]),
                "prompt_tokens": int(first["prompt_tokens_sent"]),
                "ttft_ms": None if pd.isna(first["ttft_ms"]) else float(first["ttft_ms"]),
            }
        )
    order = {p: i for i, p in enumerate(phases)}
    return sorted(out, key=lambda r: (order[r["phase"]], r["group"]))


def lifetime_hit_rate(case: CaseData) -> float | None:
    """Hits / queries of the server's lifetime counters at the case's last scrape.

    Shown only to contrast with phase deltas: it moves little while probes regress a lot.
    """
    if not case.samples:
        return None
    t_end = max(s.t_ns for s in case.samples)
    hits = value_at(series(case.samples, "prefix_cache_hits"), t_end)
    queries = value_at(series(case.samples, "prefix_cache_queries"), t_end)
    return _ratio(hits, queries)


def latency_summary(frame: pd.DataFrame) -> dict[str, Any]:
    """TTFT/TPOT/E2EL/ITL statistics over every successful request of ``frame`` (all phases)."""
    if frame.empty:
        return {m: describe([]) for m in ("ttft_ms", "tpot_ms", "e2el_ms", "itl_ms")}
    ok = frame[frame["status"] == "ok"]
    gaps, _ = itl_gaps(ok.to_dict("records"))
    return {
        "ttft_ms": describe(ok["ttft_ms"]),
        "tpot_ms": describe(ok["tpot_ms"]),
        "e2el_ms": describe(ok["e2el_ms"]),
        "itl_ms": describe(gaps),
    }


def case_summary(
    case: CaseData, probe_phases: tuple[str, ...], compare: tuple[tuple[str, str], ...]
) -> dict[str, Any]:
    """All summaries of one case: per phase, probes, phase ratios, lifetime hit rate, scrapes."""
    frame = request_frame(case.records)
    phases = {str(p["phase"]): phase_summary(case, p, frame) for p in case.phases}
    ratios = []
    for phase, base in compare:
        if phase in phases and base in phases:
            a, b = phases[phase]["ttft_ms"], phases[base]["ttft_ms"]
            ratios.append(
                {
                    "phase": phase,
                    "baseline": base,
                    "ttft_mean_ratio": _ratio(a["mean"], b["mean"]),
                    "ttft_p95_ratio": _ratio(a["p95"], b["p95"]),
                }
            )
    late = sum(1 for s in case.scrapes if s.get("late"))
    failed_scrapes = sum(1 for s in case.scrapes if not s.get("ok"))
    server = case.info.get("server") or {}
    return {
        "name": case.name,
        "status": case.info.get("status", "missing"),
        "error": case.info.get("error"),
        "server": server,
        "phases": phases,
        "probes": probe_rows(frame, probe_phases),
        "ratios": ratios,
        "lifetime_hit_rate": lifetime_hit_rate(case),
        "all_phases": latency_summary(frame),
        "requests_total": len(case.records),
        "requests_failed": sum(1 for r in case.records if r.get("status") == "error"),
        "scrapes": {"total": len(case.scrapes), "late": late, "failed": failed_scrapes},
    }
