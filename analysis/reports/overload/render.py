"""overload's Markdown: the per-arm, per-load table, the limits, the answer."""

from __future__ import annotations

from analysis.markdown import f, pct, table
from analysis.reports.overload.models import LoadPoint, OverloadDetails


def _reasons(p: LoadPoint) -> str:
    parts = [f"{n} {why}" for why, n in sorted(p.reasons.items())]
    parts += [f"{n} {why}" for why, n in sorted(p.failures.items())]
    if p.vllm_rejections:
        counted = ", ".join(f"{k} {v:g}" for k, v in sorted(p.vllm_rejections.items()) if v)
        parts.append(f"vLLM counted over the whole phase: {counted or 'none'}")
    return "; ".join(parts) or "–"


def goodput_table(d: OverloadDetails) -> list[str]:
    """Goodput (req/s) per arm (rows) and load (columns)."""
    loads = sorted({p.load for p in d.points})
    arms = list(dict.fromkeys(p.arm for p in d.points))
    cell = {(p.arm, p.load): p for p in d.points}
    rows = [
        [arm, *(f(cell[(arm, x)].goodput_rps, 2) if (arm, x) in cell else "–" for x in loads)]
        for arm in arms
    ]
    return [table(["arm \\ load", *(f"{x:g}×" for x in loads)], rows)]


def markdown_lines(d: OverloadDetails) -> list[str]:
    """The section: inputs, limits, the table of every arm and load, the accounting."""
    out = ["## Overload and admission", ""]
    out.append(
        f"Sustainable rate (1×) {f(d.sustainable_rps, 2)} req/s; SLOs: TTFT ≤ "
        f"{f(d.slo_ttft_ms, 1)} ms (from the scheduled time), TPOT ≤ {f(d.slo_tpot_ms, 1)} ms; "
        f"prefill throughput {f(d.prefill_tokens_per_s, 0)} prompt tokens/s; unloaded TTFT "
        f"p50 {f(d.unloaded_ttft_p50_ms, 1)} ms, E2EL p50 {f(d.unloaded_e2el_p50_ms, 1)} ms."
    )
    out += ["", "### Limits", ""]
    out.append(table(
        ["arm", "flag", "limit used", "rule of thumb (1×)"],
        [[a.arm, a.flag or "–", str(a.used) if a.used else "–",
          str(a.rule_of_thumb) if a.rule_of_thumb else "–"] for a in d.limits],
    ))  # fmt: skip
    out += ["", "### Every arm at every load", ""]
    out.append(table(
        ["arm", "load", "offered req/s", "goodput req/s", "completed req/s",
         "attainment (admitted)", "rejected", "rejection p50/p99 ms", "Retry-After (valid)",
         "TTFT p50/p99 ms", "send late p99 ms", "KV peak", "waiting peak", "why refused"],
        [[p.arm, f"{p.load:g}×", f(p.offered_rps, 2), f(p.goodput_rps, 2), f(p.completed_rps, 2),
          pct(p.attainment), pct(p.rejected_share),
          f"{f(p.rejection_p50_ms, 1)} / {f(p.rejection_p99_ms, 1)}",
          f"{p.retry_after} ({p.retry_after_valid})",
          f"{f(p.ttft_p50_ms, 0)} / {f(p.ttft_p99_ms, 0)}", f(p.send_lateness_p99_ms, 1),
          pct(p.kv_usage_peak), f(p.waiting_peak, 0), _reasons(p)] for p in d.points],
    ))  # fmt: skip
    lost = [a for a in d.accounting if not a.whole]
    total = sum(a.planned for a in d.accounting)
    out += [
        "",
        f"Accounting: {total} planned requests over {len(d.accounting)} loads; "
        + ("every one ended once as a completion, a rejection or a failure with its reason."
           if not lost else "not whole: " + "; ".join(
               f"{a.arm} {a.phase}: {a.records} records of {a.planned}, {a.duplicates} "
               f"twice, {a.unsent} unsent, {a.unexplained} without a reason" for a in lost)),
    ]  # fmt: skip
    return out


def _why_they_differ(d: OverloadDetails) -> list[str]:
    """Why the best limit and the rule of thumb's differ, for each kind where they do."""
    kinds = {a.arm: a.kind for a in d.limits}
    differ = {kinds.get(r.arm or "") for r in d.recommendations if r.arm and r.rule_arm != r.arm}
    out = []
    if differ & {"vllm-reqs", "gateway"}:
        out.append(
            "- Why the request limit differs from λ × E2EL bound: the rule takes every request "
            "at its SLO bound, but per-token time grows with the batch (TPOT p50 "
            f"{f(d.unloaded_tpot_p50_ms, 1)} ms alone, {f(d.saturation_tpot_p50_ms, 1)} ms "
            "with the batch full), so the requests in flight that still meet the SLOs are "
            "fewer than Little's law with the bound says."
        )
    if "vllm-tokens" in differ or any(
        kinds.get(r.arm or "") != "vllm-tokens" and r.rule_arm for r in d.recommendations
    ):
        out.append(
            "- Why the token limit does not decide it here: vLLM counts the prompt tokens of "
            "requests not yet past prefill; when decode is the bottleneck (a full batch of "
            "max_num_seqs), a waiting request waits for a batch slot, not for prefill, so a "
            "backlog limit sized by prefill throughput bounds the queue but not the batch's "
            "per-token time."
        )
    return out


def closing_lines(d: OverloadDetails) -> list[str]:
    """The answer: goodput per arm and load, the recommended limit beside the rule of thumb."""
    out = ["## The answer: which limit to set", ""]
    out += goodput_table(d)
    out += ["", f"Peak goodput: {f(d.peak_goodput_rps, 2)} req/s ({d.peak_at})."]
    for r in d.recommendations:
        if r.arm is None:
            continue
        same = r.rule_arm == r.arm
        out.append(
            f"- At {r.load:g}×: **{r.arm}** (limit {r.limit}) keeps goodput highest among "
            "the limits whose admitted requests meet the attainment target, "
            f"{f(r.goodput_rps, 2)} req/s; the rule of thumb gives {r.rule_limit}"
            + (" (the same arm)." if same else
               f" (its nearest arm, {r.rule_arm}: {f(r.rule_goodput_rps, 2)} req/s).")
        )  # fmt: skip
    out += _why_they_differ(d)
    out += [
        "",
        "Clients of a server with admission control get 429/503 answers instead of late "
        "ones: retry within a budget after the Retry-After (vLLM's 503 carries none: back off "
        "on your own clock), or fail over to another replica; the gateway's breaker does not "
        "open on admission rejections (docs/gateway.md).",
    ]
    return out
