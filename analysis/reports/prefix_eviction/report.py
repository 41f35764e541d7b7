"""prefix-eviction's report: hit rates per phase, probe requests, TTFT ratios, its verdicts.

- **Prefix-cache hit rate (counters)** = Δ``prefix_cache_hits`` / Δ``prefix_cache_queries``
  over the phase window (both in tokens; vLLM ``vllm:prefix_cache_{hits,queries}_total``).
- **Hit rate (requests)** = Σ cached tokens / Σ prompt tokens over the phase's successful
  requests that reported cached tokens (``usage.prompt_tokens_details.cached_tokens``), the
  client-side twin (``PhaseSummary.cached_token_rate``); "–" when none reported.
- **Lifetime hit rate** = the lifetime counters' hits / queries at a time: the number people
  usually watch, shown to contrast with phase deltas (it moves little while probes regress).
- **Probe** = the first request (by index) of each prefix group in a phase: within a phase only
  a probe can miss (it re-caches the prefix for the requests behind it), so probes carry the
  eviction signal. A probe decides its check only when it succeeded and reported its cached
  tokens: one that failed, or a server that does not report them (vLLM without
  ``--enable-prompt-tokens-details``), leaves the check undecided and says why, never failed.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import ClassVar

import matplotlib.pyplot as plt
import pandas as pd

from analysis.checks import fmt
from analysis.latency import request_frame
from analysis.load import CaseData, RunData
from analysis.markdown import f, table
from analysis.models import CaseSummary, Verdict
from analysis.plots import save
from analysis.reports import Evaluator, PhaseColumn, ScenarioReport
from metrics.samples import series, value_at
from scenarios.prefix_eviction import HitRateCompare, ProbeCache
from scenarios.workloads import AnchoredPrompts
from server.frozen import FrozenModel

#: The counters the hit rate (counters) is made of.
_HIT_COUNTERS = ("prefix_cache_hits", "prefix_cache_queries")
#: (phase, baseline) pairs whose TTFT mean and p95 ratios the report shows.
TTFT_RATIOS = (("revisit", "warm"), ("revisit", "rewarm"))


class HitRates(FrozenModel):
    """A phase's hit rates (fractions 0–1; ``None`` when a count was missing or zero)."""

    hit_rate_counters: float | None
    hit_rate_requests: float | None
    lifetime_hit_rate_at_end: float | None


class Probe(FrozenModel):
    """A probe request: the first request of a prefix group in a phase."""

    phase: str
    group: str
    request_id: str
    status: str
    cached_tokens: int | None
    prompt_tokens: int
    ttft_ms: float | None


class TtftRatio(FrozenModel):
    """TTFT mean and p95 of ``phase`` over those of ``baseline``."""

    phase: str
    baseline: str
    ttft_mean_ratio: float | None
    ttft_p95_ratio: float | None


class PrefixCase(FrozenModel):
    phases: dict[str, HitRates]
    probes: list[Probe]
    ratios: list[TtftRatio]
    lifetime_hit_rate: float | None


class PrefixEvictionDetails(FrozenModel):
    cases: dict[str, PrefixCase]


def _ratio(num: float | None, den: float | None) -> float | None:
    if num is None or den is None or den == 0:
        return None
    return num / den


def probe_rows(frame: pd.DataFrame, phases: tuple[str, ...]) -> list[Probe]:
    """Probe requests of ``phases`` (see the module docstring), in phase then group order."""
    if frame.empty:
        return []
    out = []
    grouped = frame[frame["group"].notna() & frame["phase"].isin(phases)]
    for (phase, group), rows in grouped.sort_values("index").groupby(
        ["phase", "group"], sort=False
    ):
        first = rows.iloc[0]
        out.append(
            Probe(
                phase=str(phase),
                group=str(group),
                request_id=str(first["request_id"]),
                status=str(first["status"]),
                cached_tokens=None
                if pd.isna(first["cached_tokens"])
                else int(first["cached_tokens"]),
                prompt_tokens=int(first["prompt_tokens_sent"]),
                ttft_ms=None if pd.isna(first["ttft_ms"]) else float(first["ttft_ms"]),
            )
        )
    order = {p: i for i, p in enumerate(phases)}
    return sorted(out, key=lambda r: (order[r.phase], r.group))


def _lifetime(case: CaseData, t_ns: int) -> float | None:
    return _ratio(
        value_at(series(case.samples, "prefix_cache_hits"), t_ns),
        value_at(series(case.samples, "prefix_cache_queries"), t_ns),
    )


def _case(data: CaseData, summary: CaseSummary, probe_phases: tuple[str, ...]) -> PrefixCase:
    frame = request_frame(data.records)
    rates = {}
    for phase in data.phases:
        name = str(phase.phase)
        p = summary.phases[name]
        rates[name] = HitRates(
            hit_rate_counters=_ratio(
                p.counter_deltas.get("prefix_cache_hits"),
                p.counter_deltas.get("prefix_cache_queries"),
            ),
            hit_rate_requests=p.cached_token_rate,
            lifetime_hit_rate_at_end=_lifetime(data, int(phase.end_ns)),
        )
    ratios = [
        TtftRatio(
            phase=a,
            baseline=b,
            ttft_mean_ratio=_ratio(summary.phases[a].ttft_ms.mean, summary.phases[b].ttft_ms.mean),
            ttft_p95_ratio=_ratio(summary.phases[a].ttft_ms.p95, summary.phases[b].ttft_ms.p95),
        )
        for a, b in TTFT_RATIOS
        if a in summary.phases and b in summary.phases
    ]
    last = max((s.t_ns for s in data.samples), default=None)
    return PrefixCase(
        phases=rates,
        probes=probe_rows(frame, probe_phases),
        ratios=ratios,
        lifetime_hit_rate=None if last is None else _lifetime(data, last),
    )


#: Why a successful request has no cached-token count, and the fix.
NOT_REPORTED_HINT = (
    "the server did not report usage.prompt_tokens_details.cached_tokens (vLLM reports it "
    "only when started with --enable-prompt-tokens-details)"
)


def _undecided_probes(probes: list[Probe]) -> list[str]:
    """Why each probe that cannot decide a check cannot (failed, or no cached-token count)."""
    failed = [f"{p.request_id} ({p.status})" for p in probes if p.status != "ok"]
    silent = [p.request_id for p in probes if p.status == "ok" and p.cached_tokens is None]
    out = []
    if failed:
        out.append(f"probe(s) that did not succeed: {', '.join(failed)}")
    if silent:
        out.append(f"probe(s) without a cached-token count: {', '.join(silent)}; "
                   + NOT_REPORTED_HINT)  # fmt: skip
    return out


def _probe_verdict(check: ProbeCache, case: CaseSummary, details: PrefixEvictionDetails) -> Verdict:
    """PASS when every probe succeeded, reported its cached tokens and meets the rule; FAIL
    when one that did breaks it (evidence, whatever the others did); otherwise UNDECIDED,
    naming the probes that failed or did not report."""
    probes = [p for p in details.cases[case.name].probes if p.phase == check.phase]
    name = f"{check.phase} probes {check.expect}"
    if not probes:
        return Verdict(
            case=check.case,
            check=name,
            passed=None,
            detail=f"no probe requests recorded in {check.phase}",
        )
    cached = [p.cached_tokens for p in probes]
    decided = [c for p, c in zip(probes, cached, strict=True) if p.status == "ok" and c is not None]
    if check.expect == "hit":
        good = [c >= check.min_cached_tokens for c in decided]
        rule = f"cached tokens ≥ {check.min_cached_tokens}"
    else:
        good = [c <= check.max_cached_tokens for c in decided]
        rule = f"cached tokens ≤ {check.max_cached_tokens}"
    undecided = len(probes) - len(decided)
    detail = (
        f"{sum(good)}/{len(probes)} probes {check.expect} ({rule})"
        + (f", {undecided} cannot tell" if undecided else "")
        + f"; cached tokens: {cached}"
    )
    if not all(good):
        passed: bool | None = False
        if check.why:
            detail += f" — {check.why}"
    elif undecided:
        passed = None
        detail += " — cannot decide: " + "; ".join(_undecided_probes(probes))
    else:
        passed = True
    return Verdict(case=check.case, check=name, passed=passed, detail=detail)


def _hit_rate_verdict(
    check: HitRateCompare, case: CaseSummary, details: PrefixEvictionDetails
) -> Verdict:
    phases = details.cases[case.name].phases
    a = phases[check.phase].hit_rate_counters if check.phase in phases else None
    b = phases[check.other].hit_rate_counters if check.other in phases else None
    if check.relation == "below":
        name = f"{check.phase} hit rate below {check.other}"
        passed = None if a is None or b is None else a < b - check.tolerance
    else:
        name = f"{check.phase} hit rate close to {check.other}"
        passed = None if a is None or b is None else abs(a - b) <= check.tolerance
    detail = f"{check.phase} {fmt(a)} vs {check.other} {fmt(b)} (tolerance {check.tolerance})"
    unread = [
        phase
        for phase in (check.phase, check.other)
        if phase in case.phases
        and any(
            c in (deltas := case.phases[phase].counter_deltas) and deltas[c] is None
            for c in _HIT_COUNTERS
        )
    ]
    if unread:
        detail += (
            f"; prefix-cache counters not read inside the window of {', '.join(unread)} "
            "(see data quality)"
        )
    return Verdict(case=check.case, check=name, passed=passed, detail=detail)


def hit_rate_plot(details: PrefixEvictionDetails, phases: list[str], out: Path) -> Path:
    """Grouped bars: prefix-cache hit rate per phase (counter deltas), one bar per case."""
    fig, ax = plt.subplots(figsize=(8, 4))
    width = 0.8 / max(len(details.cases), 1)
    for i, (name, case) in enumerate(details.cases.items()):
        rates = [
            (case.phases[p].hit_rate_counters if p in case.phases else None) or 0.0 for p in phases
        ]
        xs = [j + i * width for j in range(len(phases))]
        bars = ax.bar(xs, rates, width=width, label=name)
        ax.bar_label(bars, labels=[f"{r:.3f}" for r in rates], fontsize=7)
    ax.set_xticks([j + width * (len(details.cases) - 1) / 2 for j in range(len(phases))], phases)
    ax.set_ylim(0, 1.1)
    ax.set_ylabel("hit rate (Δhits / Δqueries)")
    ax.set_title("Prefix-cache hit rate per phase")
    ax.legend()
    return save(fig, out)


class PrefixEvictionReport(ScenarioReport[PrefixEvictionDetails]):
    evaluators: ClassVar[dict[type, Evaluator]] = {
        ProbeCache: _probe_verdict,
        HitRateCompare: _hit_rate_verdict,
    }

    def details(self, run: RunData, cases: dict[str, CaseSummary]) -> PrefixEvictionDetails:
        # Probes exist in phases whose requests share anchor prefixes.
        probe_phases = tuple(
            name
            for name in run.plan.phase_names()
            if any(
                p.name == name and isinstance(p.workload, AnchoredPrompts)
                for c in run.plan.cases
                for p in run.plan.phases_of(c)
            )
        )
        return PrefixEvictionDetails(
            cases={c.name: _case(c, cases[c.name], probe_phases) for c in run.cases}
        )

    def phase_columns(self, details: PrefixEvictionDetails | None) -> list[PhaseColumn]:
        if details is None:
            return []

        def rate(key: str) -> Callable[[str, str], str]:
            def cell(case: str, phase: str) -> str:
                rates = details.cases[case].phases.get(phase)
                return f(getattr(rates, key) if rates else None, 3)

            return cell

        return [
            PhaseColumn("hit rate (counters)", "failed", rate("hit_rate_counters")),
            PhaseColumn("hit rate (requests)", "failed", rate("hit_rate_requests")),
            PhaseColumn("lifetime hit rate", "failed", rate("lifetime_hit_rate_at_end")),
        ]

    def case_markdown(self, details: PrefixEvictionDetails | None, case: str) -> list[str]:
        if details is None or case not in details.cases:
            return []
        c = details.cases[case]
        out = [
            "Hit rate (counters) = Δprefix_cache_hits / Δprefix_cache_queries over the phase "
            "window; hit rate (requests) = Σ cached tokens / Σ prompt tokens over the "
            "successful requests that reported cached tokens ('–' when none did).",
            "",
        ]
        answered = [p for p in c.probes if p.status == "ok"]
        if answered and all(p.cached_tokens is None for p in answered):
            out += [f"No successful request reported cached tokens: {NOT_REPORTED_HINT}.", ""]
        if c.probes:
            rows = [
                [p.phase, p.group, p.request_id, f(p.cached_tokens), str(p.prompt_tokens),
                 f(p.ttft_ms)]
                for p in c.probes
            ]  # fmt: skip
            headers = ["phase", "prefix group", "request", "cached tokens", "prompt tokens",
                       "TTFT ms"]  # fmt: skip
            out += ["Probe requests (first request per prefix group):", "",
                    table(headers, rows), ""]  # fmt: skip
        if c.ratios:
            rows = [
                [f"{r.phase}/{r.baseline}", f(r.ttft_mean_ratio, 2), f(r.ttft_p95_ratio, 2)]
                for r in c.ratios
            ]
            out += [table(["TTFT ratio", "mean", "p95"], rows), ""]
        out += [f"Lifetime hit rate at the end of the case: {f(c.lifetime_hit_rate, 3)}", ""]
        return out

    def plots(
        self,
        run: RunData,
        cases: dict[str, CaseSummary],
        details: PrefixEvictionDetails | None,
        out_dir: Path,
    ) -> list[Path]:
        if details is None or not any(c.records for c in run.cases):
            return []
        path = out_dir / "hit_rate_by_phase.png"
        return [hit_rate_plot(details, run.plan.phase_names(), path)]


REPORT = PrefixEvictionReport()
