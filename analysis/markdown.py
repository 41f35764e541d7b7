"""Rendering the report dict as Markdown (reads the summary only; computes nothing new)."""

from __future__ import annotations

from typing import Any


def _f(x: Any, digits: int = 1) -> str:
    if x is None:
        return "–"
    if isinstance(x, float):
        return f"{x:.{digits}f}"
    return str(x)


STAT_KEYS = ["mean", "std", "p50", "p90", "p95", "p99"]


def _pct(fraction: float | None) -> str:
    return _f(fraction * 100 if fraction is not None else None)


def _table(headers: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


def _phase_table(case: dict[str, Any], phases: list[str]) -> str:
    headers = [
        "phase", "req", "failed", "hit rate (counters)", "hit rate (requests)", "lifetime hit rate",
        "TTFT mean", "TTFT p50", "TTFT p95", "TTFT p99", "TPOT mean", "E2EL p95",
        "out tok/s", "KV peak %", "running peak", "waiting peak", "preemptions",
    ]  # fmt: skip
    rows = []
    for name in phases:
        p = case["phases"].get(name)
        if p is None:
            rows.append([name, "not run"] + [""] * (len(headers) - 2))
            continue
        kv = p["gauge_peaks"]["kv_cache_usage_perc"]
        rows.append(
            [
                name,
                str(p["requests"]),
                str(p["failed"]),
                _f(p["hit_rate_counters"], 3),
                _f(p["hit_rate_requests"], 3),
                _f(p["lifetime_hit_rate_at_end"], 3),
                _f(p["ttft_ms"]["mean"]),
                _f(p["ttft_ms"]["p50"]),
                _f(p["ttft_ms"]["p95"]),
                _f(p["ttft_ms"]["p99"]),
                _f(p["tpot_ms"]["mean"]),
                _f(p["e2el_ms"]["p95"]),
                _f(p["output_throughput_tok_s"]),
                _f(kv * 100 if kv is not None else None),
                _f(p["gauge_peaks"]["num_requests_running"], 0),
                _f(p["gauge_peaks"]["num_requests_waiting"], 0),
                _f(p["counter_deltas"]["num_preemptions"], 0),
            ]
        )
    return _table(headers, rows)


def _probe_table(case: dict[str, Any]) -> str:
    rows = [
        [
            p["phase"],
            p["group"],
            p["request_id"],
            _f(p["cached_tokens"]),
            str(p["prompt_tokens"]),
            _f(p["ttft_ms"]),
        ]
        for p in case["probes"]
    ]
    return _table(
        ["phase", "prefix group", "request", "cached tokens", "prompt tokens", "TTFT ms"], rows
    )


def _preemption_section(section: dict[str, Any]) -> list[str]:
    out = ["## Hand calculation (from each case's real capacity)", ""]
    rows = []
    for r in section["rows"]:
        c = r["hand_calculation"]
        rows.append(
            [
                r["case"],
                f"{c['capacity_tokens']} ({c['capacity_blocks']}×{c['block_size']})",
                str(c["concurrency"]),
                str(c["initial_working_set_tokens"]),
                str(c["headroom_tokens"]),
                _f(c["growth_per_request_tokens"]),
                f"{c['final_working_set_tokens']} ({c['final_working_set_blocks']} blocks)",
                "preempts" if c["predicted_preemption"] else "fits",
                _f(c["predicted_kv_peak"] * 100),
            ]
        )
    out += [
        _table(
            [
                "case",
                "capacity tokens (blocks×B)",
                "C",
                "initial C×P",
                "headroom",
                "growth/request",
                "final C×(P+O)",
                "prediction",
                "expected KV peak %",
            ],
            rows,
        ),
        "",
        "Block rounding: each request holds whole blocks, ceil((P+O)/B) at the end of decode; "
        "the prediction compares C×ceil((P+O)/B) with the usable blocks (capacity − 1: vLLM "
        "reserves a null block).",
        "",
        "## Comparison across cases",
        "",
    ]
    rows = [
        [
            r["case"], _f(r["kv_peak"] * 100 if r["kv_peak"] is not None else None),
            _f(r["preemptions"], 0), _f(r["running_peak"], 0), _f(r["waiting_peak"], 0),
            _f(r["ttft_mean_ms"]), _f(r["ttft_p95_ms"]), _f(r["tpot_mean_ms"]),
            _f(r["itl_p95_ms"]), _f(r["e2el_p95_ms"]), _f(r["output_throughput_tok_s"]),
            _f(r["wall_s"]), str(r["failed"]),
        ]
        for r in section["rows"]
    ]  # fmt: skip
    out += [
        _table(
            [
                "case",
                "KV peak % (sampled)",
                "preemptions",
                "running peak",
                "waiting peak",
                "TTFT mean",
                "TTFT p95",
                "TPOT mean",
                "ITL p95",
                "E2EL p95",
                "out tok/s",
                "wall s",
                "failed",
            ],
            rows,
        ),
        "",
    ]
    if section["tradeoffs"]:
        out += ["Trade-offs:", ""] + [f"- {t}" for t in section["tradeoffs"]] + [""]
    return out


def _disconnect_section(rows: list[dict[str, Any]]) -> list[str]:
    table = [
        [
            r["case"], str(r["requests"]), str(r["disconnected"]),
            ",".join(str(x) for x in r["received_tokens_at_disconnect"]),
            _f(r["running_after_last_disconnect"], 0), _f(r["time_to_free_s"], 2),
            _f(r["wasted_tokens"], 0), str(r["orphan_budget_tokens"]),
            _pct(r["wasted_fraction"]), _f(r["zombie_s"], 2), _pct(r["kv_after_last_disconnect"]),
            _f(r["kv_release_s"], 2),
        ]
        for r in rows
    ]  # fmt: skip
    return [
        "## Disconnects",
        "",
        _table(
            [
                "case",
                "requests",
                "disconnected",
                "tokens at disconnect",
                "running just after",
                "time to free s",
                "wasted tokens",
                "orphan budget",
                "wasted %",
                "zombie s",
                "KV % just after",
                "KV release s",
            ],
            table,
        ),
        "",
        "'Just after' = the first scrape after the last disconnect. "
        "Time to free and KV release are read from scrapes (upper bounds at the scrape "
        "period's resolution). Wasted tokens = Δgeneration_tokens − tokens the clients "
        "received; the orphan budget is what the abandoned requests had left to generate.",
        "",
    ]


def _breaker_section(episodes: list[dict[str, Any]]) -> list[str]:
    out = ["## Breaker episode", ""]
    for ep in episodes:
        out += [
            f"Phase {ep['phase']}: {ep['ok']}/{ep['requests']} requests ok "
            f"({_pct(ep['success_ratio'])} %), goodput {_f(ep['goodput_req_s'], 2)} req/s; "
            "successful requests by upstream: "
            + ", ".join(f"{u} {n}" for u, n in sorted(ep["ok_by_upstream"].items())),
            "",
        ]
        events = [
            [_f(f.get("killed_s", f.get("healthy_s")), 2), "fault", f"replica {f['replica']} "
             + ("stopped" if "killed_s" in f else f"healthy again (start {f.get('startup_s')} s)"),
             f["url"]]
            for f in ep["faults"]
        ] + [
            [_f(t["t_s"], 2), "breaker", f"{t['from']} → {t['to']} ({t['reason']})", t["upstream"]]
            for t in ep["transitions"]
        ]  # fmt: skip
        events.sort(key=lambda row: float(row[0]))
        out += [_table(["t (s from phase start)", "what", "event", "upstream"], events), ""]
        buckets: list[list[str]] = []
        per_second = ep["per_second"]
        for start in range(0, len(per_second), 5):
            chunk = per_second[start : start + 5]
            ups: dict[str, int] = {}
            for b in chunk:
                for u, n in b["by_upstream"].items():
                    ups[u] = ups.get(u, 0) + n
            buckets.append(
                [f"{start}–{start + len(chunk)}", str(sum(b["ok"] for b in chunk)),
                 str(sum(b["failed"] for b in chunk)),
                 ", ".join(f"{u.rsplit(':', 1)[-1]}: {n}" for u, n in sorted(ups.items()))]
            )  # fmt: skip
        out += [
            "Requests by send time (5 s buckets; upstreams by port):",
            "",
            _table(["seconds", "ok", "failed", "ok by upstream"], buckets),
            "",
        ]
    return out


def render_markdown(report: dict[str, Any]) -> str:
    """The whole report as Markdown."""
    out: list[str] = [f"# {report['scenario']}", "", report["description"], ""]
    run = report.get("run") or {}
    if run.get("command"):
        out += [f"Command: `{' '.join(run['command'])}`", ""]
    if run.get("status"):
        out += [
            f"Run status: **{run['status']}**"
            + (f", wall time {run['wall_s']:.0f} s" if run.get("wall_s") else ""),
            "",
        ]
    out += ["## Sizing (from the server's real KV capacity)", ""]
    out += [f"- {k}: {v}" for k, v in report["sizing"].items()] + [""]
    out += [
        "Definitions: TTFT = first token-carrying chunk − send; TPOT = (E2EL − TTFT)/(tokens − 1); "
        "E2EL = last token − send (ms). Hit rate (counters) = Δprefix_cache_hits / "
        "Δprefix_cache_queries over the phase window; hit rate (requests) = Σ cached tokens / "
        "Σ prompt tokens. Peaks are sampled every scrape, so they are lower bounds.",
        "",
    ]
    phases = report["phases"]
    for name, case in report["cases"].items():
        server = case.get("server") or {}
        cap = server.get("capacity") or {}
        out += [f"## Case {name}", ""]
        out += [
            f"Status: **{case['status']}**"
            + (f" — {case['error']}" if case.get("error") else "")
            + f"; vLLM {server.get('version', '?')}; KV capacity {cap.get('tokens', '?')} tokens "
            f"(block size {cap.get('block_size', '?')}, {cap.get('num_blocks', '?')} blocks); "
            f"server start {_f(server.get('startup_s'))} s; requests {case['requests_total']}, "
            f"failed {case['requests_failed']}; scrapes {case['scrapes']['total']} "
            f"(late {case['scrapes']['late']}, failed {case['scrapes']['failed']}).",
            "",
            _phase_table(case, case.get("planned_phases") or phases),
            "",
        ]
        overall = case.get("all_phases")
        if overall:
            rows = [
                [m.removesuffix("_ms").upper(), *(_f(overall[m][k]) for k in STAT_KEYS)]
                for m in ("ttft_ms", "tpot_ms", "e2el_ms", "itl_ms")
            ]
            out += ["All phases together (ms):", "", _table(["metric", *STAT_KEYS], rows), ""]
        if case["probes"]:
            out += ["Probe requests (first request per prefix group):", "", _probe_table(case), ""]
        if case["ratios"]:
            rows = [
                [
                    f"{r['phase']}/{r['baseline']}",
                    _f(r["ttft_mean_ratio"], 2),
                    _f(r["ttft_p95_ratio"], 2),
                ]
                for r in case["ratios"]
            ]
            out += [_table(["TTFT ratio", "mean", "p95"], rows), ""]
        lags = [(p["loop_lag_max_ms"] or 0.0) for p in case["phases"].values()]
        if lags:
            out += [
                f"Load-generator event-loop lag: max {_f(max(lags), 2)} ms over all phases.",
                "",
            ]
        out += [f"Lifetime hit rate at the end of the case: {_f(case['lifetime_hit_rate'], 3)}", ""]
    disconnects = [r for case in report["cases"].values() for r in case.get("disconnects", [])]
    if disconnects:
        out += _disconnect_section(disconnects)
    episodes = [e for case in report["cases"].values() for e in case.get("breaker", [])]
    if episodes:
        out += _breaker_section(episodes)
    if report.get("preemption"):
        out += _preemption_section(report["preemption"])
    out += ["## Verdicts", ""]
    for v in report["verdicts"]:
        mark = {True: "PASS", False: "FAIL", None: "UNDECIDED"}[v["passed"]]
        out.append(f"- **{mark}** {v['case']}: {v['check']} — {v['detail']}")
    s = report["verdict_summary"]
    out += ["", f"{s['passed']} passed, {s['failed']} failed, {s['undecided']} undecided.", ""]
    if s["failed"] or s["undecided"]:
        out += [
            "**The scenario did not show every effect it declares: that is a finding, see above.**",
            "",
        ]
    if report.get("plots"):
        out += ["## Plots", ""] + [f"![{p}]({p})" for p in report["plots"]] + [""]
    return "\n".join(out)
