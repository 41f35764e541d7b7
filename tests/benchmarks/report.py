"""``RESULTS.md`` from the benchmarks' JSON files (pure: dicts in, Markdown out)."""

from __future__ import annotations

from typing import Any

TITLES = {
    "client_throughput": "1. Client throughput",
    "client_timing": "2. Client timestamps at scale",
    "open_loop": "3. Open-loop send accuracy",
    "scraper": "4. Scraper cadence and load-loop lag",
    "gateway": "5. Gateway overhead",
    "phase_memory": "6. Load-generator memory",
}

ANCHORS = {
    "client_throughput": "vLLM's `async_request_openai_completions`",
    "client_timing": "vLLM's `async_request_openai_completions`",
    "open_loop": "vLLM's `get_request`",
    "scraper": "same load, no scraping",
    "gateway": "nginx (added ms; streams/s)",  # results whose rows do not name their anchor
    "phase_memory": "none",
}


def _fmt(value: Any) -> str:
    if value is None:
        return "–"
    if isinstance(value, bool):
        return "yes" if value else "**no**"
    if isinstance(value, float):
        if abs(value) >= 1000:
            return f"{value:,.0f}"
        return f"{value:.3g}" if abs(value) < 10 else f"{value:.1f}"
    return str(value)


def _table(header: list[str], rows: list[list[Any]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(_fmt(c) for c in r) + " |" for r in rows]
    return lines


def summary_table(results: list[dict[str, Any]]) -> list[str]:
    """Every benchmark's rows: metric, ours, anchor, ratio (ours / anchor), target, met."""
    rows = []
    for result in results:
        name = result["benchmark"]
        if result.get("failed"):
            rows.append([TITLES.get(name, name), "failed", "", "", "", "", "", "**no**"])
            continue
        for r in result["rows"]:
            named = r.get("anchor_name")  # the gateway's rows name theirs: nginx, vllm-router
            anchor = named or ANCHORS.get(name, "")
            if r["anchor"] is None:
                anchor = f"{named} unavailable" if named else "unavailable"
            if name == "phase_memory":
                anchor = "none"
            met = r["met"]
            rows.append([
                TITLES.get(name, name), r["metric"], r["unit"], r["ours"],
                f"{_fmt(r['anchor'])} ({anchor})" if r["anchor"] is not None else anchor,
                r["ratio"], r["target"] or "", "–" if met is None else met,
            ])  # fmt: skip
    header = ["benchmark", "figure", "unit", "ours", "anchor", "ratio", "target", "met"]
    return _table(header, rows)


def _details_throughput(r: dict[str, Any]) -> list[str]:
    def rows_of(summary: dict[str, Any]) -> list[list[Any]]:
        rows = []
        for c, per in summary.items():
            for name, s in per.items():
                rows.append([
                    c, name, s["tokens_per_s"]["median"],
                    f"{_fmt(s['tokens_per_s']['min'])}–{_fmt(s['tokens_per_s']['max'])}",
                    s["requests_per_s"]["median"], s["tokens_per_cpu_s"]["median"],
                    s["client_cpu_share"]["median"], s["tokens_per_stamp"]["median"],
                    s["server_cpu_share"]["median"],
                ])  # fmt: skip
        return rows

    header = ["in flight", "client", "tokens/s (median)", "spread", "requests/s",
              "tokens per client CPU-s", "client CPU share", "tokens per stamp",
              "server CPU share"]  # fmt: skip
    cap = [[name, x["streams"], "yes" if x["held"] else "**no**",
            ", ".join(_fmt(t) for t in x.get("tries_p99", [x["token"]["p99"]])),
            x["token"]["p50"],
            x["token"]["p99"], x["ttft"]["p99"], x["itl"]["p99"], x["lateness"]["p99"],
            x["coalesced_share"], x["client_cpu_share"], x.get("loop_lag_p99_ms")]
           for name, levels in r.get("capacity", {}).items() for x in levels]  # fmt: skip
    return [
        "One SSE event per write, zero ITL (the server writes like vLLM, as fast as it can):",
        "", *_table(header, rows_of(r["summary"])), "",
        "Parser ceiling (each whole response in ONE write: no real server does this; what "
        "parsing alone allows):", "", *_table(header, rows_of(r.get("parser_ceiling", {}))), "",
        "Paced capacity (ITL 10/20 ms, phases spread; after the first wave; ms; a level is "
        "held when the token stamp error p99 ≤ 1 ms in one of two tries; each client stops at "
        "the first level it missed twice; the figures are its last try's):",
        "",
        *_table(["client", "streams", "held", "token error p99 per try", "token error p50",
                 "p99", "TTFT error p99",
                 "ITL error p99", "server lateness p99", "stamps with > 1 token",
                 "client CPU share", "loop lag p99 ms"], cap),
    ]  # fmt: skip


def _details_timing(r: dict[str, Any]) -> list[str]:
    parts = ["ttft", "itl", "token", "lateness"]
    rows = []
    for c, per in r["summary"].items():
        for name, waves in per.items():
            for wave in ("steady", "first"):
                s = waves.get(wave)
                if not s:
                    continue
                lag = waves.get("loop_lag_p99_ms") if name == "ours" else None
                rows.append([c, name, wave] + [
                    f"{_fmt(s[p]['p50'])} / {_fmt(s[p]['p99'])}" for p in parts
                ] + [s["coalesced_share"], lag])  # fmt: skip
    workers = r.get("workers", {})
    lines = [
        "p50 / p99 in ms, against the fake server's own write log (CLOCK_MONOTONIC, same "
        "machine). `first`: the requests sent at once when a run starts; `steady`: the rest "
        "(output lengths vary, so streams desynchronize). TTFT = client first-token stamp − "
        "server first write; ITL = client gap − server gap; token = every token's stamp − its "
        "write; lateness = the server's write − its deadline (its own share).",
        "",
        f"Load-generator processes: {workers.get('used', '?')} ({workers.get('why', '')}).",
        "",
    ]
    header = ["streams", "client", "wave", "TTFT error", "ITL error", "token error",
              "server lateness", "stamps with > 1 token", "loop lag p99 ms"]  # fmt: skip
    cpu = [
        [c, name, s["cpu_share"]["median"], s["cpu_us_per_chunk"]["median"]]
        for c, per in r.get("client_cpu", {}).items() for name, s in per.items()
    ]  # fmt: skip
    return [
        *lines, *_table(header, rows), "",
        "The client's CPU during the runs (median of rounds; per token: all of its work divided "
        "by tokens):", "",
        *_table(["streams", "client", "CPU share of its core", "µs per token"], cpu),
    ]  # fmt: skip


def _details_open_loop(r: dict[str, Any]) -> list[str]:
    rows = []
    for rate, per in r["summary"].items():
        for name, s in per.items():
            rows.append([
                rate, name, ", ".join(_fmt(x) for x in s["achieved_rps"]),
                ", ".join(_fmt(x) for x in s["scheduled_rps"]),
                ", ".join(f"{x * 100:+.2f} %" for x in s["achieved_vs_nominal"]),
                s["lateness_ms"]["p50"], s["lateness_ms"]["p99"], s["lateness_ms"]["max"],
            ])  # fmt: skip
    return _table(
        ["req/s", "client", "achieved (per round)", "schedule's rate", "achieved vs nominal",
         "lateness p50 ms", "p99", "max"],
        rows,
    )  # fmt: skip


def _details_scraper(r: dict[str, Any]) -> list[str]:
    cad = r["cadence"]
    lag = r["loop_lag_ms"]
    lines = [
        f"Scrapes: {cad['ok']} ok, {cad['failed']} failed, {cad['skipped']} skipped, "
        f"{cad['late']} late; interval p50 {_fmt(cad['interval_ms']['p50'])} ms, p99 "
        f"{_fmt(cad['interval_ms']['p99'])} ms, max {_fmt(cad['interval_ms']['max'])} ms.",
        f"Parse time per page: whole page {r['parse_costs']['whole_page_ms']} ms, what the "
        f"scraper parses {r['parse_costs']['scraper_parse_page_ms']} ms.",
        "",
    ]
    rows = [[k, v["p50"], v["p99"], v["max"], v["count"]] for k, v in lag.items()]
    return lines + _table(["load loop", "lag p50 ms", "p99", "max", "samples"], rows)


#: The gateway benchmark's proxies, in the side-by-side table's column order.
GATEWAY_PROXIES = ("gateway", "nginx", "vllm-router")


def _side_by_side(r: dict[str, Any]) -> list[str]:
    """Each proxy's added latency (ms, per-request differences from direct) and streams/s,
    one column per proxy (``–``: not measured)."""
    anchors = r.get("anchors") or {"nginx": {}}  # older results: nginx only
    proxies = [p for p in GATEWAY_PROXIES if p == "gateway" or p in anchors]
    rows = []
    for c, per in r["summary"].items():
        for key, label in (("ttft_ms", "TTFT"), ("e2el_ms", "E2EL")):
            for q in ("p50", "p99"):
                rows.append([c, f"added {label} {q}"] + [
                    per.get(p, {}).get("added", {}).get(f"{key}_{q}") for p in proxies
                ])  # fmt: skip
    cap = r["capacity"]
    rows.append(["64", "streams/s, one process"] + [
        cap.get(p, {}).get("streams_per_s") for p in proxies
    ])  # fmt: skip
    missing = [
        f"{name} was unavailable on this machine: {about['why_unavailable']}"
        for name, about in r.get("anchors", {}).items()
        if not about["available"]
    ]
    versions = ", ".join(
        f"{name} {about['version']}"
        for name, about in r.get("anchors", {}).items()
        if about["available"] and about["version"]
    )
    return [
        "The three proxies side by side (added ms: quantiles of the per-request "
        "differences, each request through the proxy minus the same request direct; "
        "vllm-router is a peer, the targets are set against nginx"
        + (f"; {versions}" if versions else "") + "):", "",
        *[f"{line}." for line in missing], *([""] if missing else []),
        *_table(["streams", "figure", *proxies], rows), "",
    ]  # fmt: skip


def _details_gateway(r: dict[str, Any]) -> list[str]:
    rows = []
    for c, per in r["summary"].items():
        for name, s in per.items():
            added = s.get("added", {})
            rows.append([
                c, name, s["ttft_ms"]["p50"], s["ttft_ms"]["p99"], s["e2el_ms"]["p50"],
                s["e2el_ms"]["p99"], added.get("ttft_ms_p50"), added.get("e2el_ms_p50"),
                added.get("to_server_ms_p50"), added.get("to_client_ms_p50"),
            ])  # fmt: skip
    lines = _table(
        ["streams", "path", "TTFT p50 ms", "p99", "E2EL p50 ms", "p99", "added TTFT p50",
         "added E2EL p50", "added send → server read p50", "added server write → client p50"],
        rows,
    )  # fmt: skip
    first = [[c, name, s["ttft_ms"]["p50"], s["ttft_ms"]["p99"], s["e2el_ms"]["p50"]]
             for c, per in r.get("first_wave", {}).items() for name, s in per.items()]  # fmt: skip
    cap = [[k, v["streams_per_s"], v["proxy_cpu_share"], v["client_cpu_share"]]
           for k, v in r["capacity"].items()]  # fmt: skip
    return [
        *_side_by_side(r),
        "After the first wave (the figures above and in the summary):", "", *lines, "",
        "First wave (C requests sent at once):", "",
        *_table(["streams", "path", "TTFT p50 ms", "p99", "E2EL p50 ms"], first), "",
        "Capacity (zero-delay server, 16-token streams, 64 in flight):", "",
        *_table(["proxy", "streams/s", "proxy CPU share", "client + server core share"], cap),
        "", "Where the gateway's CPU goes under that load (cProfile, CPU time, own time):", "",
        *_table(["function", "calls", "share of the gateway's CPU"],
                [[p["function"], p["calls"], p["own_cpu_share"]]
                 for p in r.get("gateway_cpu_profile", [])]),
    ]  # fmt: skip


def _details_memory(r: dict[str, Any]) -> list[str]:
    rows = [[x["requests"], "eager" if x["eager"] else "lazy", x["baseline_mib"], x["peak_mib"],
             x["growth_mib"], x["max_in_flight"], x["wall_s"], x["statuses"]]
            for x in r["runs"]]  # fmt: skip
    return _table(["requests", "plan", "baseline MiB", "peak MiB", "growth MiB", "max in flight",
                   "wall s", "statuses"], rows)  # fmt: skip


def _q(stats: dict[str, Any], part: str, q: str) -> str:
    return _fmt(stats.get(part, {}).get(q))


def _why_measured(r: dict[str, Any]) -> str:
    """The benchmark's own account of where the time went (its ``why`` lines)."""
    return " ".join(r.get("why", []))


def _cost_text(cost: dict[str, dict[str, Any]]) -> str:
    """Each proxy's CPU per request and per wake-up in the latency runs, per streams level,
    and how much more a request costs the gateway at one stream than at the most streams."""
    parts = []
    for c, per in cost.items():
        each = ", ".join(
            f"{name} {_fmt(v['cpu_us_per_request'])} µs over {_fmt(v['wakeups_per_request'])} "
            f"wake-ups ({_fmt(v['cpu_us_per_wakeup'])} µs each)"
            for name, v in per.items()
        )
        parts.append(f"at {c} streams {each}")
    if not parts:
        return ""
    text = (
        " CPU each proxy ran per request in the latency runs (exact, from schedstat): "
        + "; ".join(parts)
        + "."
    )
    levels = sorted(cost, key=int)
    one, most = cost.get("1", {}).get("gateway"), cost[levels[-1]].get("gateway")
    if one and most and levels[-1] != "1" and most["cpu_us_per_request"]:
        ratio = one["cpu_us_per_request"] / most["cpu_us_per_request"]
        text += (
            f" The same requests cost the gateway {ratio:.1f}× the CPU at one stream that "
            f"they cost at {levels[-1]} ({_fmt(one['cpu_us_per_request'])} vs "
            f"{_fmt(most['cpu_us_per_request'])} µs): at one stream every wake-up finds its "
            "core idle and its caches cold, so the added latency there is its own code run "
            "cold, not waiting."
        )
    return text


def _why_gateway(r: dict[str, Any]) -> str:
    cap = r["capacity"]
    gw = cap.get("gateway", {})
    per_stream_ms = 1e3 * gw.get("proxy_cpu_share", 0) / max(gw.get("streams_per_s", 1), 1)
    top = ", ".join(
        f"{p['function'].rsplit('/', 1)[-1]} {p['own_cpu_share']:.0%}"
        for p in r.get("gateway_cpu_profile", [])[:5]
    )
    legs = "; ".join(
        f"at {c} streams {_fmt(added.get('ttft_ms_p50'))} ms (send → server read "
        f"+{_fmt(added.get('to_server_ms_p50'))}, server write → client "
        f"+{_fmt(added.get('to_client_ms_p50'))})"
        for c, per in r["summary"].items()
        if (added := per.get("gateway", {}).get("added"))
    )
    text = (
        f"Where the added TTFT p50 goes (each leg's per-request difference from direct, "
        f"p50): {legs}. Each leg of a "
        "request crosses the gateway's Python once: the request is parsed, routed and re-sent "
        "through aiohttp's client, the first chunk read, watched and re-written. "
        f"One gateway process relays {_fmt(gw.get('streams_per_s'))} streams/s at "
        f"{_fmt(gw.get('proxy_cpu_share'))} of its core: ≈ {per_stream_ms:.2f} ms of CPU per "
        "16-token stream (request parsed and re-sent, every chunk read, watched and re-written, "
        "two event-loop wake-ups per chunk, on aiohttp and uvloop)."
    )
    if "nginx" in cap:
        text += (
            f" nginx relays {_fmt(cap['nginx']['streams_per_s'])} streams/s at "
            f"{_fmt(cap['nginx']['proxy_cpu_share'])} of its core (there the client and server "
            "core is the limit, so its figure is a lower bound)."
        )
    if "vllm-router" in cap:
        router = cap["vllm-router"]
        added_ttft = "; ".join(
            f"at {c} streams {_fmt(added.get('ttft_ms_p50'))} ms"
            for c, per in r["summary"].items()
            if (added := per.get("vllm-router", {}).get("added"))
        )
        text += (
            f" vllm-router (Rust, its defaults) adds to TTFT p50 {added_ttft}, and relays "
            f"{_fmt(router['streams_per_s'])} streams/s at {_fmt(router['proxy_cpu_share'])} "
            "of its core" + (" (a lower bound too)." if router["proxy_cpu_share"] < 0.9 else ".")
        )
    if cost := _cost_text(r.get("proxy_cost", {})):
        text += cost
    if top:
        text += f" The gateway's CPU, by own time: {top}."
    return text + (
        " A Python proxy on aiohttp does not come within 1.5× of nginx's added latency; "
        "what is left above 1 ms is per-request and per-chunk interpreter work."
    )


def _why_open_loop(r: dict[str, Any]) -> str:
    parts = []
    for rate, per in r["summary"].items():
        ours, anchor = per["ours"]["lateness_ms"], per.get("anchor", {}).get("lateness_ms", {})
        if rate != "500" or ours["p99"] is None or ours["p99"] < 2.0:
            continue
        parts.append(
            f"At {rate} req/s our send lateness is p50 {_fmt(ours['p50'])} ms but p99 "
            f"{_fmt(ours['p99'])} ms, max {_fmt(ours['max'])} ms (the anchor's p99 "
            f"{_fmt(anchor.get('p99'))} ms, max {_fmt(anchor.get('max'))} ms). A send falls due "
            "while the one loop is reading and stamping the other requests' chunks; the tail is "
            "the longest such stretch, plus any time the process waits for its core (load "
            f"average at the start: {r.get('machine', {}).get('load_average_1m')})."
        )
    return " ".join(parts)


def _why_scraper(r: dict[str, Any]) -> str:
    lag = r["loop_lag_ms"]
    interval = r["cadence"]["interval_ms"]
    outside = interval.get("outside_target")
    cadence = ""
    if outside is not None:
        cadence = (
            f"Scrape intervals outside 250 ± 5 ms: {len(outside)} of {interval['count']} "
            f"({', '.join(_fmt(x) for x in outside) or 'none'} ms). With this few intervals "
            "p99 is the largest but at most one, so "
            + ("one scrape that started late decides it" if len(outside) <= 2 else
               "several late starts decide it")
            + " (the scraper process shares the other core with the fake server). "
        )  # fmt: skip
    return cadence + (
        "Benchmark 1's load saturates the load generator's core (a throughput test), so the "
        "loop's lag is the load's own: p99 "
        f"{_fmt(lag['no scraping']['p99'])} ms without scraping, "
        f"{_fmt(lag['scraping']['p99'])} ms with; its rounds spread widely "
        f"(load wall times {r['load_wall_s']}). The scraper runs on the other core, beside the "
        "fake server, and never on the load loop; what it parses per page: "
        f"{r['parse_costs']['scraper_parse_page_ms']} ms."
    )


def _why_memory(r: dict[str, Any]) -> str:
    parts = []
    for run in r.get("runs", []):
        failed = sum(n for status, n in run["statuses"].items() if status != "ok")
        parts.append(
            f"{run['requests']:,} requests: peak {_fmt(run['peak_mib'])} MiB, at most "
            f"{run['max_in_flight']:,} in flight, {run.get('late_sends', 0):,} sends late, "
            f"{failed:,} failed"
        )
    return (
        "; ".join(parts) + ". The memory a phase needs grows with the requests in flight "
        "(each holds its record, its connection and its buffers), not with the plan: when the "
        "load generator's core is taken, sends and responses fall behind, the in-flight count "
        "grows, and past the open-file limit (here "
        f"{r.get('machine', {}).get('open_files_limit', 'unknown')}) connections fail; such a "
        "run measures that backlog."
    )


WHY = {
    "phase_memory": _why_memory,
    "client_throughput": _why_measured,
    "client_timing": _why_measured,
    "open_loop": _why_open_loop,
    "gateway": _why_gateway,
    "scraper": _why_scraper,
}


def headline(results: list[dict[str, Any]], machine: dict[str, Any]) -> list[str]:
    """The figures that have a target, one line each (the headline of docs/benchmarks.md)."""
    lines = [
        f"Measured {machine['date_utc']} on {machine['cpu_model']}, {machine['cores']} cores "
        f"(AVX-512{', AMX' if any(f.startswith('amx') for f in machine['cpu_flags']) else ''}"
        f"), Python {machine['python']}; ratio = ours / anchor:",
        "",
    ]
    for result in results:
        name = result["benchmark"]
        for r in result.get("rows", []):
            if not r["target"]:
                continue
            anchor = "" if r["anchor"] is None else f" vs {_fmt(r['anchor'])}"
            ratio = "" if r["ratio"] is None else f" ({_fmt(r['ratio'])}×)"
            met = "met" if r["met"] else "**missed**"
            lines.append(
                f"- {TITLES.get(name, name)}, {r['metric']}: {_fmt(r['ours'])}{anchor} "
                f"{r['unit']}{ratio}; target {r['target']}: {met}"
            )
    return lines


def misses(results: list[dict[str, Any]]) -> list[str]:
    """Every target not met, by how much, and why (from the run's own figures)."""
    lines: list[str] = []
    for result in results:
        name = result["benchmark"]
        missed = [r for r in result.get("rows", []) if r["met"] is False]
        if not missed:
            continue
        lines.append(f"- **{TITLES.get(name, name)}**: " + "; ".join(
            f"{r['metric']}: ours {_fmt(r['ours'])} {r['unit']}, target {r['target']}"
            for r in missed
        ) + ".")  # fmt: skip
        if name in WHY:
            lines += ["", "  " + WHY[name](result), ""]
    return lines or ["Every target was met."]


DETAILS = {
    "client_throughput": _details_throughput,
    "client_timing": _details_timing,
    "open_loop": _details_open_loop,
    "scraper": _details_scraper,
    "gateway": _details_gateway,
    "phase_memory": _details_memory,
}


def _placement(pinned: bool) -> str:
    if pinned:
        return "load generator on core 0, fake server (or proxy) on core 1 (taskset)"
    return "not pinned (fewer than 2 cores, no taskset, or a smoke run)"


def render(
    results: list[dict[str, Any]],
    machine: dict[str, Any],
    total_s: float,
    tiny: bool,
    lock: bool,
    reruns: list[dict[str, Any]] | None = None,
) -> str:
    """The whole ``RESULTS.md``; ``reruns``: benchmarks run again after the full run."""
    flags = ", ".join(machine["cpu_flags"]) or "none"
    amx = [f for f in machine["cpu_flags"] if f.startswith("amx")]
    lines = [
        "# Benchmark results",
        "",
        f"Generated by `make bench` (`tests/benchmarks/run_all.py`) on {machine['date_utc']}"
        f"{' — TINY smoke sizes, not figures' if tiny else ''}; all six took {total_s:.0f} s.",
        "",
        f"- Machine: {machine['cpu_model']}, {machine['cores']} cores; AVX-512 flags: {flags}; "
        f"AMX: {'yes' if amx else 'none'}; AVX2: {'yes' if machine['avx2'] else 'no'}.",
        f"- Software: Python {machine['python']}, aiohttp {machine['aiohttp']}, "
        f"vLLM {machine['vllm'] or 'not installed'} (the anchors' code is loaded from it).",
        f"- Placement: {_placement(machine['pinned'])}; both clients on uvloop.",
        f"- Priority: nice {machine.get('niceness', 0)} (`make bench` asks for -10 so that "
        "work outside the machine lock takes less of the benchmarks' cores; without root it "
        "stays 0).",
        f"- Load average (1 min) before the run: {machine['load_average_1m']}; the machine lock "
        f"(`/tmp/serving-testbed-vllm.lock`) was {'held' if lock else 'NOT held'} for the run. "
        "Figures from a loaded machine (other processes on these cores) are not comparable "
        "with these: rerun on an idle machine.",
        *[
            f"- Rerun on {x['date_utc']} (load average {x['load_average_1m']}, lock "
            f"{'held' if x['lock_held'] else 'NOT held'}): {', '.join(x['benchmarks'])}; "
            "their sections below give their own date and load."
            for x in reruns or []
        ],
        "- Same-run ratios: ours and the anchor alternate (A B A B) within one run, against "
        "the same fake server, pinned the same way. Ratio = ours / anchor (for errors and "
        "added latency, lower is better).",
        "",
        "## Headline",
        "",
        *headline(results, machine),
        "",
        "## Summary",
        "",
        *summary_table(results),
        "",
        "## Targets missed, and why",
        "",
        *misses(results),
        "",
    ]
    for result in results:
        name = result["benchmark"]
        lines += [f"## {TITLES.get(name, name)}", ""]
        if result.get("failed"):
            lines += ["Failed:", "", "```", result["error"].strip()[-1500:], "```", ""]
            continue
        lines += [
            f"Config: `{result.get('config')}`; took {result.get('duration_s')} s.",
            "",
        ]
        if result.get("anchor_available") is False and "anchors" not in result:
            lines += ["The anchor was unavailable on this machine.", ""]
        lines += [*DETAILS[name](result), ""]
    lines += [
        "## Rerun",
        "",
        "```",
        "make bench            # all six (installs nginx with apt-get when missing)",
        ".venv/bin/python tests/benchmarks/run_all.py --only client_throughput,gateway",
        ".venv/bin/python tests/benchmarks/bench_client_timing.py   # one, JSON to runs/bench-*/",
        "```",
        "",
    ]
    return "\n".join(lines)
