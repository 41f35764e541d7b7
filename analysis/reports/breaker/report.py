"""breaker's report: the episode (faults, gateway transitions, traffic per second), its verdict.

Transitions come from the gateway's events file (``t_ns`` on the monotonic clock the whole run
uses), faults from ``faults.jsonl``, requests from the records (``upstream`` = the gateway's
``X-Gateway-Upstream`` header). Every time in the report is seconds from the phase start.
**Goodput** here = requests that completed successfully per second of the episode (no latency
SLO applied). The **success ratio** is over the requests that were sent: one never sent (the
run was cut short) is neither a success nor a failure. The verdict is undecided, saying why,
when nothing was sent or no breaker transition could be recorded (no gateway events file and
no gateway log), never failed for want of data.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, ClassVar

import matplotlib.pyplot as plt

from analysis.load import CaseData, RunData
from analysis.markdown import f, pct, table
from analysis.models import CaseSummary, Verdict
from analysis.plots import save
from analysis.reports import Evaluator, ScenarioReport
from loadgen.runformat import PhaseRow
from scenarios.breaker import BreakerEpisode
from server.frozen import FrozenModel


class FaultEvent(FrozenModel):
    """An injected fault or a restart, seconds from the phase start."""

    fault: str
    replica: int
    url: str
    killed_s: float | None = None
    stopped_s: float | None = None
    healthy_s: float | None = None
    startup_s: float | None = None


class TransitionEvent(FrozenModel):
    """A breaker transition, ``t_s`` seconds from the phase start."""

    upstream: str
    from_state: str
    to_state: str
    t_s: float
    reason: str


class SecondBin(FrozenModel):
    """Requests sent during one second of the episode: ok (per upstream) and failed."""

    second: int
    ok: int
    failed: int
    by_upstream: dict[str, int]


class Episode(FrozenModel):
    case: str
    phase: str
    requests: int
    ok: int
    failed: int
    success_ratio: float | None
    not_sent: int = 0
    goodput_req_s: float | None
    last_send_s: float | None
    ok_by_upstream: dict[str, int]
    faults: list[FaultEvent]
    transitions: list[TransitionEvent]
    transitions_source: str | None
    per_second: list[SecondBin]


class BreakerDetails(FrozenModel):
    episodes: list[Episode]


def episode(case: CaseData, phase: PhaseRow) -> Episode:
    """Faults, transitions and per-second request outcomes of one phase."""
    start = phase.start_ns
    records = [r for r in case.records if r.phase == phase.phase]
    seconds = max(1, math.ceil((phase.last_end_ns - start) / 1e9))
    bins: list[dict[str, Any]] = [
        {"second": s, "ok": 0, "failed": 0, "by_upstream": {}} for s in range(seconds + 1)
    ]
    for r in records:
        if r.sent_ns is None:
            continue
        b = bins[min(seconds, max(0, (r.sent_ns - start) // 1_000_000_000))]
        ok = r.status == "ok"
        b["ok" if ok else "failed"] += 1
        if ok and r.upstream:
            b["by_upstream"][r.upstream] = b["by_upstream"].get(r.upstream, 0) + 1

    def rel(t_ns: int) -> float:
        return (t_ns - start) / 1e9

    def rel_or_none(t_ns: int | None) -> float | None:
        return None if t_ns is None else rel(t_ns)

    ok_total = sum(1 for r in records if r.status == "ok")
    sent = [r for r in records if r.status != "not_sent"]
    by_upstream: dict[str, int] = {}
    for r in records:
        if r.status == "ok" and r.upstream:
            by_upstream[r.upstream] = by_upstream.get(r.upstream, 0) + 1
    duration_s = (phase.last_end_ns - start) / 1e9
    faults = [
        FaultEvent(
            fault=x.fault, replica=x.replica, url=x.url, startup_s=x.startup_s,
            killed_s=rel_or_none(x.killed_ns), stopped_s=rel_or_none(x.stopped_ns),
            healthy_s=rel_or_none(x.healthy_ns),
        )
        for x in case.faults
    ]  # fmt: skip
    return Episode(
        case=case.name,
        phase=phase.phase,
        requests=len(sent),
        ok=ok_total,
        failed=len(sent) - ok_total,
        success_ratio=ok_total / len(sent) if sent else None,
        not_sent=len(records) - len(sent),
        goodput_req_s=ok_total / duration_s if duration_s > 0 else None,
        last_send_s=max((rel(r.sent_ns) for r in records if r.sent_ns), default=None),
        ok_by_upstream=by_upstream,
        faults=faults,
        transitions=[
            TransitionEvent(
                upstream=t.upstream,
                from_state=t.from_state,
                to_state=t.to_state,
                t_s=rel(t.t_ns),
                reason=t.reason,
            )
            for t in case.transitions
            if t.t_ns >= start
        ],
        transitions_source=case.transitions_source,
        per_second=[SecondBin.model_validate(b) for b in bins],
    )


def _at(t: float | None) -> str:
    return "never" if t is None else f"{t:.2f} s"


def _verdict(check: BreakerEpisode, case: CaseSummary, details: BreakerDetails) -> Verdict:
    ep = next((e for e in details.episodes if e.case == case.name and e.phase == check.phase), None)
    name = f"breaker opens, probes and closes around replica {check.replica}'s outage"
    if ep is None:
        return Verdict(case=check.case, check=name, passed=None, detail="no breaker episode")
    mine = [x for x in ep.faults if x.replica == check.replica]
    kill = next((x for x in mine if x.killed_s is not None), None)
    back = next((x for x in mine if x.healthy_s is not None), None)
    if kill is None or kill.killed_s is None:
        detail = "the fault was not injected"
        return Verdict(case=check.case, check=name, passed=None, detail=detail)
    if ep.success_ratio is None:
        return Verdict(case=check.case, check=name, passed=None,
                       detail="no request was sent in the episode")  # fmt: skip
    if ep.transitions_source is None:
        detail = "no breaker transitions recorded (no gateway events file, no gateway log)"
        return Verdict(case=check.case, check=name, passed=None, detail=detail)
    killed_s = kill.killed_s
    seq = [t for t in ep.transitions if t.upstream == kill.url and t.t_s >= killed_s]
    opened = next((t for t in seq if t.to_state == "open"), None)
    probed = next(
        (t for t in seq if t.to_state == "half_open" and opened and t.t_s > opened.t_s), None
    )
    # A probe can only succeed once the replica answers, so the first close after the open
    # is the recovery. It is not compared with ``healthy_s``: that stamp is taken when the
    # restart's health poll returned, which can be after the breaker's own probe succeeded.
    closed = None
    if back is not None and opened is not None:
        closed = next((t for t in seq if t.to_state == "closed" and t.t_s > opened.t_s), None)
    ratio = ep.success_ratio
    recovered = closed is not None or back is None
    ok = opened is not None and probed is not None and recovered
    ok = ok and ratio >= check.min_success_ratio
    detail = (
        f"killed at {_at(killed_s)}, back at {_at(back.healthy_s if back else None)}; open "
        f"{_at(opened.t_s if opened else None)}, first half-open "
        f"{_at(probed.t_s if probed else None)}, closed {_at(closed.t_s if closed else None)}; "
        f"{ep.ok}/{ep.requests} requests ok ({ratio:.1%}, need ≥ {check.min_success_ratio:.0%})"
    )
    if (
        back is not None
        and back.healthy_s is not None
        and closed is None
        and ep.last_send_s is not None
        and back.healthy_s > ep.last_send_s
    ):
        detail += "; the replica came back after the last request was sent: lengthen the episode"
    return Verdict(case=check.case, check=name, passed=ok, detail=detail)


def episode_plot(ep: Episode, out: Path) -> Path:
    """Requests per second of send time (ok by upstream, failed) with faults and transitions."""
    fig, ax = plt.subplots(figsize=(10, 4))
    seconds = [b.second for b in ep.per_second]
    upstreams = sorted({u for b in ep.per_second for u in b.by_upstream})
    bottom = [0] * len(seconds)
    for u in upstreams:
        counts = [b.by_upstream.get(u, 0) for b in ep.per_second]
        ax.bar(seconds, counts, bottom=bottom, label=f"ok via {u}", width=0.9)
        bottom = [a + c for a, c in zip(bottom, counts, strict=True)]
    failed = [b.failed for b in ep.per_second]
    ax.bar(seconds, failed, bottom=bottom, label="failed", color="tab:red", width=0.9)
    top = max((a + n for a, n in zip(bottom, failed, strict=True)), default=1)
    for x in ep.faults:
        t = x.killed_s if x.killed_s is not None else x.healthy_s
        if t is None:
            continue
        what = "replica killed" if x.killed_s is not None else "replica back"
        ax.axvline(t, color="black", linestyle="--", linewidth=1)
        ax.annotate(what, (t, top), fontsize=7, rotation=90, va="top")
    colors = {"open": "tab:red", "half_open": "tab:orange", "closed": "tab:green"}
    for tr in ep.transitions:
        ax.axvline(tr.t_s, color=colors.get(tr.to_state, "gray"), linestyle=":", linewidth=1)
        ax.annotate(f"→{tr.to_state}", (tr.t_s, top * 0.75), fontsize=7, rotation=90, va="top")
    ax.set_xlabel("seconds from phase start (by send time)")
    ax.set_ylabel("requests")
    ax.set_title("Breaker episode: where requests went, faults and breaker transitions")
    ax.legend(fontsize=7, loc="upper right")
    return save(fig, out)


def _episode_lines(ep: Episode) -> list[str]:
    out = [
        f"Phase {ep.phase}: {ep.ok}/{ep.requests} requests sent were ok "
        f"({pct(ep.success_ratio)} %"
        + (f"; {ep.not_sent} never sent" if ep.not_sent else "")
        + "), "
        f"goodput {f(ep.goodput_req_s, 2)} req/s; successful requests by upstream: "
        + ", ".join(f"{u} {n}" for u, n in sorted(ep.ok_by_upstream.items())),
        "",
    ]
    events = [
        [f(x.killed_s if x.killed_s is not None else x.healthy_s, 2), "fault",
         f"replica {x.replica} "
         + ("stopped" if x.killed_s is not None else f"healthy again (start {x.startup_s} s)"),
         x.url]
        for x in ep.faults
    ] + [
        [f(t.t_s, 2), "breaker", f"{t.from_state} → {t.to_state} ({t.reason})", t.upstream]
        for t in ep.transitions
    ]  # fmt: skip
    events.sort(key=lambda row: float(row[0]))
    out += [table(["t (s from phase start)", "what", "event", "upstream"], events), ""]
    if ep.transitions_source == "log":
        out += ["(Transitions read from the gateway's log: this run predates its events file.)", ""]
    buckets: list[list[str]] = []
    for start in range(0, len(ep.per_second), 5):
        chunk = ep.per_second[start : start + 5]
        ups: dict[str, int] = {}
        for b in chunk:
            for u, n in b.by_upstream.items():
                ups[u] = ups.get(u, 0) + n
        buckets.append(
            [f"{start}–{start + len(chunk)}", str(sum(b.ok for b in chunk)),
             str(sum(b.failed for b in chunk)),
             ", ".join(f"{u.rsplit(':', 1)[-1]}: {n}" for u, n in sorted(ups.items()))]
        )  # fmt: skip
    out += [
        "Requests by send time (5 s buckets; upstreams by port):",
        "",
        table(["seconds", "ok", "failed", "ok by upstream"], buckets),
        "",
    ]
    return out


class BreakerReport(ScenarioReport[BreakerDetails]):
    evaluators: ClassVar[dict[type, Evaluator]] = {BreakerEpisode: _verdict}

    def details(self, run: RunData, cases: dict[str, CaseSummary]) -> BreakerDetails:
        return BreakerDetails(
            episodes=[
                episode(case, phase)
                for case, spec in zip(run.cases, run.plan.cases, strict=True)
                if spec.gateway is not None and spec.replicas > 1
                for phase in case.phases
            ]
        )

    def markdown(self, details: BreakerDetails | None) -> list[str]:
        if details is None or not details.episodes:
            return []
        out = ["## Breaker episode", ""]
        for ep in details.episodes:
            out += _episode_lines(ep)
        return out

    def plots(
        self,
        run: RunData,
        cases: dict[str, CaseSummary],
        details: BreakerDetails | None,
        out_dir: Path,
    ) -> list[Path]:
        if details is None:
            return []
        return [
            episode_plot(ep, out_dir / f"breaker_{ep.case}_{ep.phase}.png")
            for ep in details.episodes
        ]


REPORT = BreakerReport()
