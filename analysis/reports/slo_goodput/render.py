"""slo-goodput's Markdown: capacity answer, definitions, SLOs, saturation, sweep, collapse."""

from __future__ import annotations

from analysis.markdown import bucket_text, f, pct, placed_in, table
from analysis.models import ServerHistogram
from analysis.reports.slo_goodput.models import Quantiles, SLOGoodputDetails

DEFINITIONS = [
    "A request is **good** when it succeeded and every given SLO holds with ≤ (a value exactly "
    "on the limit is good). TPOT exists only for outputs of 2+ tokens: a 1-token output is "
    "judged on its other SLOs.",
    "Each rate's **measurement window** is [t0 + warm-up, t0 + duration) of its schedule; the "
    "warm-up's requests are sent and recorded but not counted (each phase starts on an idle "
    "server). **Counted** requests are those scheduled inside the window, whatever happened to "
    "them later.",
    "**SLO attainment** = good ÷ all counted requests (failures, time-outs and aborts count "
    "against it); per SLO: succeeded and met that SLO ÷ all counted.",
    "**Rates** count events inside the window ÷ its length: offered = scheduled, achieved = "
    "sent, completed = successful completions, goodput = completions of good requests. "
    "Completions, because past saturation the backlog completes after the window at the "
    "server's maximum rate. **Completed pro rata** credits each success with the share of its "
    "tokens that arrived in the window (a batch finishing at an edge moves it by a fraction, "
    "not a whole batch); the collapse check compares it with saturation.",
    "**Percentiles** are over successful counted requests, with the failures beside them; the "
    "error-adjusted view ranks failures above every success ('fail' where a quantile falls "
    "on one).",
    "**Maximum sustainable rate** = the highest offered rate with attainment ≥ the target, "
    "interpolated linearly in attainment between the two measured rates that bracket it.",
]


def _q(q: Quantiles | None, key: str, digits: int = 0) -> str:
    """One quantile of ``q``."""
    return "–" if q is None else f(q.get(key), digits)


def _buckets(h: ServerHistogram | None) -> str:
    """A server histogram's p50/p99 as the buckets that hold them."""
    if h is None:
        return "–"
    return "/".join(bucket_text(h.buckets.get(k)) for k in ("p50", "p99"))


def _placed(q: Quantiles, h: ServerHistogram | None) -> str:
    """The client's p50/p99 and where each lies against the server's bucket for it."""
    return "/".join(
        placed_in(q.get(k), None if h is None else h.buckets.get(k), 0) for k in ("p50", "p99")
    )


def _adj(q: Quantiles, key: str) -> str:
    value = q.get(key)
    return "fail" if value is None else f(value, 0)


def _answer_lines(d: SLOGoodputDetails) -> list[str]:
    a = d.answer
    out = ["## The capacity-planning answer", "", f"**{a.statement}**", ""]
    if a.target_rps is not None:
        if a.replicas is not None:
            out += [
                f"For {f(a.target_rps, 2)} req/s: **{a.replicas} replica(s)** = ⌈"
                f"{f(a.target_rps, 2)} ÷ {f(a.max_rate_rps, 2)}⌉, assuming {a.assumption}.",
                "",
            ]
        else:
            out += [f"For {f(a.target_rps, 2)} req/s: no replica count (no sustainable rate).", ""]
    return out


def _slo_lines(d: SLOGoodputDetails) -> list[str]:
    out = ["## SLOs", ""]
    for s in d.slo:
        out.append(f"- {s.metric.upper()} ≤ {f(s.limit_ms, 1)} ms — {s.source}")
    if d.unloaded is not None:
        u = d.unloaded
        out += [
            "",
            f"Unloaded probe (one request at a time, {u.requests} requests after a "
            f"{u.warmup_s:g} s warm-up): TTFT p50 {f(u.ttft_p50_ms)} ms, TPOT p50 "
            f"{f(u.tpot_p50_ms)} ms, E2EL p50 {f(u.e2el_p50_ms)} ms.",
        ]
    return [*out, ""]


def _saturation_lines(d: SLOGoodputDetails) -> list[str]:
    s = d.saturation
    if s is None:
        return []
    return [
        "## Saturation",
        "",
        f"Closed loop at {s.concurrency} in flight: **{f(s.closed_loop_rps, 2)} req/s** = "
        f"{s.concurrency} ÷ mean time in flight {f(s.mean_in_flight_s, 3)} s over "
        f"{s.requests} requests (Little's law; window {f(s.window_s)} s after a "
        f"{d.warmup_s:g} s warm-up). Direct count of completions in the window: "
        f"{f(s.window_completed_rps, 2)} req/s (off by up to one batch: completions come in "
        f"bursts). TTFT p50 {f(s.ttft_p50_ms, 0)} ms, TPOT p50 {f(s.tpot_p50_ms)} ms; running "
        f"peak {f(s.running_peak, 0)}, waiting peak {f(s.waiting_peak, 0)}.",
        "",
    ]


def _sweep_lines(d: SLOGoodputDetails) -> list[str]:
    slos = [s.metric for s in d.slo]
    headers = ["phase", "rate", "offered", "achieved", "completed whole/pro rata", "goodput",
               "attainment %", *(f"{m.upper()} att. %" for m in slos), "counted", "failed",
               "late p50/p99/max ms", "TTFT p50/p90/p99", "TPOT p50/p90/p99", "E2EL p50/p90/p99",
               "waiting mean/peak", "KV peak %", "preempt."]  # fmt: skip
    rows = []
    for p in d.points:
        rows.append([
            p.phase, f"{f(p.rate_rps, 2)} ({p.rate_source})", f(p.offered_rps, 2),
            f(p.achieved_rps, 2), f"{f(p.completed_rps, 2)}/{f(p.completed_prorata_rps, 2)}",
            f(p.goodput_rps, 2), pct(p.attainment),
            *(pct(p.attainment_by_slo.get(m)) for m in slos), str(p.counted), str(p.failed),
            f"{_q(p.lateness_ms, 'p50', 2)}/{_q(p.lateness_ms, 'p99', 2)}/"
            f"{f(p.lateness_max_ms, 1)}",
            f"{_q(p.ttft_ms, 'p50')}/{_q(p.ttft_ms, 'p90')}/{_q(p.ttft_ms, 'p99')}",
            f"{_q(p.tpot_ms, 'p50', 1)}/{_q(p.tpot_ms, 'p90', 1)}/{_q(p.tpot_ms, 'p99', 1)}",
            "/".join(_q(p.e2el_ms, k) for k in ("p50", "p90", "p99")),
            f"{f(p.waiting_mean, 1)}/{f(p.waiting_peak, 0)}", pct(p.kv_peak),
            f(p.preemptions, 0),
        ])  # fmt: skip
    out = [
        "## The sweep",
        "",
        f"Rates in req/s over each rate's window ({d.duration_s or 0:g} s of sending minus a "
        f"{d.warmup_s:g} s warm-up); latencies in ms over successful counted requests.",
        "",
        table(headers, rows),
        "",
    ]
    detail_headers = ["phase", "ITL p50/p90/p99", "TTFT adj. p50/p90/p99", "E2EL adj. p50/p90/p99",
                      "server TTFT p50/p99 bucket",
                      "client TTFT p50/p99 (first token in window)",
                      "server queue p50/p99 bucket", "running peak",
                      "slot wait p50/p99"]  # fmt: skip
    detail_rows = [
        [p.phase, "/".join(_q(p.itl_ms, k, 1) for k in ("p50", "p90", "p99")),
         "/".join(_adj(p.ttft_adjusted_ms, k) for k in ("p50", "p90", "p99")),
         "/".join(_adj(p.e2el_adjusted_ms, k) for k in ("p50", "p90", "p99")),
         _buckets(p.server_ttft_ms),
         _placed(p.client_ttft_first_token_in_window_ms, p.server_ttft_ms),
         _buckets(p.server_queue_ms),
         f(p.running_peak, 0),
         "–" if p.slot_wait_ms is None else f"{_q(p.slot_wait_ms, 'p50')}/"
                                            f"{_q(p.slot_wait_ms, 'p99')}"]
        for p in d.points
    ]  # fmt: skip
    out += [
        "Error-adjusted latencies and the server's own view over the same windows (ms): vLLM's "
        "TTFT and queue-time histograms (bucket deltas over the window; their observations are "
        "the requests whose first token, or whose scheduling, fell in the window), each "
        "quantile shown as the bucket that holds it ('[a, b]'; '> a' above the largest finite "
        "bound), beside the client's TTFT of the requests whose first token came in the "
        "window, marked inside, below or above the server's bucket for the same quantile. "
        "Slot wait = time an arrival waited for a --max-concurrency slot at the client (not "
        "server time).",
        "",
        table(detail_headers, detail_rows),
        "",
    ]
    return out


def _late_lines(d: SLOGoodputDetails) -> list[str]:
    if not d.late_figures:
        return []
    rows = [[x.name, x.inputs, f(x.used, 4), f(x.recomputed, 4),
             {True: "yes", False: "NO", None: "–"}[x.agrees]] for x in d.late_figures]  # fmt: skip
    return [
        "## Figures resolved while the run ran",
        "",
        "Rates and SLOs the plan left to the run (written in plan.json as 'factor × statistic of "
        "a phase'), as the run resolved and recorded them in phases.jsonl, and as recomputed "
        "here from the raw records; the report uses the recomputed values.",
        "",
        table(["figure", "from", "used by the run", "recomputed", "agree"], rows),
        "",
    ]


def markdown_lines(d: SLOGoodputDetails) -> list[str]:
    """The section after the cases: answer, definitions, SLOs, saturation, sweep, collapse."""
    out = _answer_lines(d)
    out += ["## Definitions", ""] + [f"- {line}" for line in DEFINITIONS] + [""]
    out += _slo_lines(d) + _saturation_lines(d) + _sweep_lines(d)
    if d.top_rate_text:
        out += ["## The collapse at the top rate", "", d.top_rate_text, ""]
    out += _late_lines(d)
    return out
