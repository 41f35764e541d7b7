"""trace-replay's Markdown: the trace and slice, per case a phase table of hit rates, rates,
latency, goodput and server state, and the capacity answer."""

from __future__ import annotations

from analysis.fleet import FleetFunnel
from analysis.fleet_capacity import FleetCapacity
from analysis.fleet_kv import kv_lines
from analysis.fleet_latency import latency_lines
from analysis.markdown import f, pct, table
from analysis.reports.trace_replay.details import CaseFigures, TraceReplayDetails

DEFINITIONS = (
    "Hit rate (counters) = Δprefix_cache_hits / Δprefix_cache_queries over the phase; "
    "per request = Σ cached tokens / Σ prompt tokens (usage.prompt_tokens_details); "
    "predicted = the offline model of vLLM's prefix cache (scenarios.prefix_cache_model) on "
    "the phase's sent requests with the case's real usable blocks and block size, in the "
    "start (sent) / end order of the records; maximum = the same with an unbounded cache; "
    "sequential = real capacity, one request at a time. Scheduled rate = (n − 1) ÷ span of "
    "the timed requests' offsets ÷ speedup; achieved = (sent − 1) ÷ span of their sends. "
    "Goodput and attainment as slo-goodput (analysis.goodput) over [first, last scheduled]."
)


def trace_lines(d: TraceReplayDetails) -> list[str]:
    """The trace, the slice and what the length rule did."""
    slo = ", ".join(f"{k} ≤ {v:g} ms" for k, v in d.slo_ms.items())
    return [
        "## Trace",
        "",
        f"File {d.trace_path} (sha256 {d.trace_sha256[:16]}…), token scale {d.token_scale}; "
        f"{d.slice_requests} requests in the slice, {d.sent_per_phase} sent per phase; "
        f"longer than max_model_len {d.max_model_len}: {d.skipped} skipped, {d.truncated} "
        f"truncated (--too-long {d.too_long}; lines in plan.json's sizing). SLOs: {slo}; "
        f"hit-rate tolerance {d.hit_rate_tolerance:g}.",
        "",
        DEFINITIONS,
        "",
    ]


HIT_HEADERS = ["phase", "hit (counters)", "hit (requests)", "predicted", "gap", "sequential",
               "maximum", "requests = prediction", "started short"]  # fmt: skip
RATE_HEADERS = ["phase", "sent", "failed", "sched. req/s", "achieved req/s", "rate err %",
                "lateness p99 ms", "TTFT p50", "TTFT p99", "TPOT p50", "ITL p99", "E2EL p99",
                "goodput req/s", "attainment", "KV peak %", "preemptions",
                "waiting peak"]  # fmt: skip


FUNNEL_HEADERS = ["phase", "policy", "pooled bound", "spread bound", "one replica",
                  "predicted", "measured (counters)", "measured (requests)",
                  "requests/replica (counters)", "requests/replica (per request)",
                  "prefill tokens/replica", "req max/mean",
                  "prefill max/mean"]  # fmt: skip


def _per_replica(values: list[float | None]) -> str:
    return " / ".join(f(v, 0) for v in values)


def kill_lines(c: CaseFigures) -> list[str]:
    """A fleet case whose replica was killed: its requests, and the keys that moved."""
    k = c.kill
    if k is None:
        return []
    rows = [[r.key, str(r.home), ", ".join(map(str, r.moved_to)), str(r.decisions),
             f(r.first_after_kill_s, 3)] for r in k.remapped_keys]  # fmt: skip
    reasons = "; ".join(f"{n} × {why}" for why, n in k.failure_reasons.items()) or "none"
    lines = [
        f"Replica {k.replica} ({k.url}) killed: {k.planned} requests planned, {k.completed} "
        f"completed, {k.failed} failed ({reasons}), {k.not_sent} not sent, {len(k.lost)} lost, "
        f"{len(k.counted_twice)} counted twice. After the kill: {k.decisions_after_kill} "
        f"routing decisions, {k.to_killed_after_kill} still to the killed replica (before its "
        f"breaker opened), {k.retries} retries; {len(k.remapped_keys)} keys remapped "
        "(routing_decisions.jsonl, `passed-on-breaker`):",
        "",
    ]
    if rows:
        lines += [table(["key", "home", "moved to", "decisions", "first (s after kill)"], rows), ""]
    return lines


def _served(fl: FleetFunnel) -> str:
    """The requests each replica served, counted request by request; ``–`` when unknown."""
    per = fl.served_per_replica
    return "–" if per is None else " / ".join(map(str, per))


def funnel_lines(c: CaseFigures) -> list[str]:
    """A fleet case's cache funnel per phase (``analysis.fleet``); nothing for one server."""
    rows = []
    served = "Requests per replica are not counted request by request."
    for p in c.phases.values():
        if p.fleet is None:
            continue
        fl = p.fleet
        if fl.served_basis and fl.served_per_replica is not None:
            served = f"Requests per replica counted request by request from {fl.served_basis}."
        elif fl.served_basis:
            served = f"Requests per replica are not counted request by request: {fl.served_basis}."
        predicted = (
            f(fl.predicted, 4)
            if fl.predicted is not None
            else f"[{f(fl.predicted_low, 4)}, {f(fl.predicted_high, 4)}]"
        )
        rows.append(
            [p.phase, fl.policy, f(fl.pooled, 4), f(fl.spread, 4), f(fl.single, 4), predicted,
             f(p.hit_rate_counters, 4), f(p.hit_rate_requests, 4),
             _per_replica(fl.requests_per_replica), _served(fl),
             _per_replica(fl.prefill_tokens_per_replica),
             f(fl.requests_imbalance, 2), f(fl.prefill_imbalance, 2)]
        )  # fmt: skip
    if not rows:
        return []
    return [
        "Cache funnel (every replica's counters summed; docs/fleet.md): what one cache of "
        "N × C would reuse, what a router that spreads every group gets, one replica alone, "
        "the model's prediction for this policy (a bracket where the policy is not "
        f"deterministic), and what the engines delivered. {served}",
        "",
        table(FUNNEL_HEADERS, rows),
        "",
    ]


def case_lines(c: CaseFigures) -> list[str]:
    """A case's hit-rate table, its cache funnel on a fleet, rate and latency table, and its
    capacity answer."""
    hit_rows = [
        [p.phase, f(p.hit_rate_counters, 4), f(p.hit_rate_requests, 4), f(p.predicted_hit_rate, 4),
         f(p.prediction_gap, 4), f(p.sequential_hit_rate, 4), f(p.max_hit_rate, 4),
         f"{f(p.requests_matching_prediction)}/{p.sent}", f(p.predicted_short_requests)]
        for p in c.phases.values()
    ]  # fmt: skip
    rate_rows = [
        [p.phase, f"{p.sent}/{p.planned}", str(p.failed), f(p.scheduled_rate_rps, 4),
         f(p.achieved_rate_rps, 4), pct(p.rate_error), f(p.lateness_ms.p99, 3),
         f(p.ttft_ms.p50), f(p.ttft_ms.p99), f(p.tpot_ms.p50), f(p.itl_ms.p99),
         f(p.e2el_ms.p99), f(p.goodput_rps, 3), f(p.attainment, 3), pct(p.kv_usage_peak),
         f(p.preemptions, 0), f(p.waiting_peak, 0)]
        for p in c.phases.values()
    ]  # fmt: skip
    return [
        f"Capacity: {f(c.capacity_blocks)} usable blocks of {f(c.block_size)} tokens.",
        "",
        table(HIT_HEADERS, hit_rows),
        "",
        *funnel_lines(c),
        *kv_lines(c.kv_events),
        *kill_lines(c),
        *latency_lines(c.router_latency),
        table(RATE_HEADERS, rate_rows),
        "",
        f"Capacity answer: {c.answer.text}.",
        "",
    ]


def fleet_capacity_lines(d: TraceReplayDetails) -> list[str]:
    """The fleet capacity answer (``analysis.fleet_capacity``): the step costs fitted, per
    policy the predicted hit rate and sustainable speedup at each N, then the prediction
    beside each case's measurement."""
    fc = d.fleet_capacity
    if fc is None:
        return []
    c = fc.cost
    ns = [p.replicas for p in fc.policies[0].points] if fc.policies else []
    rows = [
        [a.policy, *(f"{f(p.hit_rate, 3)} / "
                     f"{_range(p.sustainable_speedup, p.sustainable_speedup_shared, 2)}"
                     for p in a.points),
         f"{f(a.replicas_needed)} ({f(a.replicas_needed_shared)})"]
        for a in fc.policies
    ]  # fmt: skip
    slo = ", ".join(f"{k} ≤ {v:g} ms" for k, v in fc.slo_ms.items()) or "none"
    return [
        "## Fleet capacity (predicted)",
        "",
        f"Each replica is simulated engine step by engine step as vLLM's scheduler batches "
        f"(running requests' decode tokens and prompt chunks, up to {c.budget_tokens} tokens "
        f"and {c.max_seqs} sequences a step). A step takes {c.step_s * 1e3:.2f} ms + "
        f"{c.prefill_s_per_token * 1e3:.4f} ms per prompt token computed + "
        f"{c.decode_s_per_seq * 1e3:.2f} ms per decode sequence (fitted on {c.gaps} gaps "
        f"between tokens and the first tokens of {c.requests} requests sent to an idle "
        f"replica); a request reaches its engine {c.overhead_s * 1e3:.1f} ms after it is sent; "
        f"replicas sharing one machine's cores slow each other's steps by "
        f"{c.contention:.2f} (a step computing prompt tokens) and {c.contention_decode:.2f} "
        "(a decode-only step) × the other replicas in a step. The fleet model places the "
        "slice's requests and gives their hits (one after another, file order), except the "
        "gateway's least-loaded and prefix-hash, placed in the simulation itself from the "
        "requests each replica holds at each send (hits from that replica's cache); the "
        "replicas then serve them at the trace's arrivals sped up X times (span "
        f"{fc.span_s:.1f} s at speedup 1), and the sustainable speedup is the highest X "
        f"whose predicted attainment ≥ {fc.attainment:g} (SLOs: {slo}) and whose busiest "
        "replica's least time in steps, however its requests are batched, fits the time "
        "the slice's traffic stands for, sped up (utilisation 1) (docs/fleet.md). Each "
        "cell: predicted fleet hit rate (least-loaded's and prefix-hash's at the speedup "
        "sustained on cores of their own) / sustainable speedup with each replica on cores "
        "of its own – sharing one machine's cores as the run's replicas did; replicas for "
        "the target likewise. A larger N can sustain less when its hit rate is lower: the "
        "answer is the smallest N that meets the target.",
        "",
        table(["policy", *(f"N={n}" for n in ns), "replicas for target"], rows),
        "",
        f"Fleet capacity answer: {fc.text}.",
        "",
        *capacity_check_lines(fc),
    ]


def _range(low: float, high: float, digits: int) -> str:
    """``low–high×`` (one figure when they agree at ``digits``)."""
    a, b = f(low, digits), f(high, digits)
    return f"{a}×" if a == b else f"{a}–{b}×"


CHECK_HEADERS = ["case", "policy", "N", "hit (model)", "predicted (case's fit)",
                 "on own cores", "all cases' fit", "measured bracket", "interpolated",
                 "pred ÷ interp", "within"]  # fmt: skip


def capacity_check_lines(fc: FleetCapacity) -> list[str]:
    """The prediction at each case's N and policy beside its measured sustainable speedup."""
    if not fc.checks:
        return []
    rows = []
    for k in fc.checks:
        m = k.measured
        bracket = f"[{f(m.lower_speedup, 3) if m.lower_speedup is not None else '0'}, " + (
            f"{f(m.upper_speedup, 3)})" if m.upper_speedup is not None else "∞)"
        )
        rows.append([
            m.case, m.policy or "one server", str(m.replicas), f(k.hit_rate, 3),
            f"{f(k.predicted, 3)}×" + ("" if k.own_fit else " (all cases' fit)"),
            f"{f(k.predicted_own, 3)}×", f"{f(k.answer_predicted, 3)}×", bracket,
            f(m.interpolated, 3), f(k.ratio, 2), "yes" if k.within else "no",
        ])  # fmt: skip
    inside = sum(k.within for k in fc.checks)
    return [
        "Predicted against measured: each case predicted with the step costs fitted on its "
        "own records (it ran under its own load on the machine) and its replicas sharing "
        "cores as the run's did; beside it the same on cores of their own, and the table's "
        "value (all cases' fit). Within when the prediction lies in the measured bracket "
        "[highest speedup that met the target, next speedup measured, which did not): the "
        "tolerance is the measurement's own resolution. The interpolation between the two "
        "assumes attainment falls linearly, so predicted ÷ interpolated is shown, not judged.",
        "",
        table(CHECK_HEADERS, rows),
        "",
        f"{inside} of {len(fc.checks)} case(s) predicted within their measured bracket.",
        "",
    ]


def closing_lines(d: TraceReplayDetails) -> list[str]:
    """Per case, the capacity answer (the sentence a reader came for), and the fleet's."""
    out = [f"Case {name}: {c.answer.text}." for name, c in d.cases.items()]
    if d.fleet_capacity is not None:
        out.append(f"Fleet: {d.fleet_capacity.text}.")
    return out
