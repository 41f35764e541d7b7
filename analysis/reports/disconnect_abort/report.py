"""disconnect-abort's report: what client disconnects did to the server, and its verdicts.

From the request records (send, disconnect and end stamps) and the 250 ms samples, per phase:

- **open clients** at t = requests sent at or before t whose connection (until disconnect or
  end) is still open at t;
- **time to free** = first scrape at or after the last disconnect where
  ``num_requests_running`` (summed over engines) ≤ running before the phase + open clients,
  minus the last disconnect, in s. Sampled, so an upper bound at the scrape period's
  resolution;
- **wasted tokens** = Δ``generation_tokens`` over the phase window − tokens the clients
  received: tokens generated for nobody. The **orphan budget** is what the abandoned requests
  would still have generated (Σ max_tokens − received over disconnected requests);
- **zombie time** = time during which the server ran more requests than before the phase
  while no client was connected at all, in s;
- **KV release** = first scrape after the last disconnect where ``kv_cache_usage_perc``
  (largest over engines) is back to its value before the phase (+0.005), minus the last
  disconnect, in s.

A check fails only on evidence (a scrape that shows the server still busy, a wasted fraction
over its limit). When the server counted more prompt tokens over the phase than the phase
sent, another client shared it and every figure holds its work too: the check is undecided
and says so. When a figure it needs is undefined — no ``num_requests_running`` sample after
the last disconnect, no ``generation_tokens`` delta, no orphan budget — it is undecided and
says which.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import pairwise
from typing import ClassVar

from pydantic import Field

from analysis.load import CaseData, RunData
from analysis.markdown import f, pct, table
from analysis.models import CaseSummary, Verdict
from analysis.reports import Evaluator, ScenarioReport
from analysis.server_side import max_over_engines
from loadgen.runformat import PhaseRow, ReadRecord
from metrics.samples import counter_delta, series, value_at
from scenarios.disconnect_abort import DisconnectFreesServer, OrphansRunOn
from server.frozen import FrozenModel


class DisconnectRow(FrozenModel):
    """The figures of the module docstring for one phase of one case."""

    case: str
    phase: str
    requests: int
    disconnected: int
    received_tokens_at_disconnect: list[int]
    last_disconnect_ns: int
    running_after_last_disconnect: float | None
    running_samples_after: int = 0
    time_to_free_s: float | None
    generation_tokens: float | None
    received_tokens: int
    wasted_tokens: float | None
    orphan_budget_tokens: int
    wasted_fraction: float | None
    zombie_s: float
    kv_after_last_disconnect: float | None
    kv_release_s: float | None
    server_idle_after: bool | None
    #: Δprompt_tokens over the phase window, and the prompt tokens this phase's requests sent:
    #: more on the server than sent means other traffic shared it (nothing is attributable).
    prompt_tokens: float | None = None
    prompt_tokens_sent: int = 0


class PathExpectation(FrozenModel):
    """What a case's path (``label``: client → … → vLLM) is expected to do on a mid-stream
    disconnect (``frees`` or ``orphans``), and why (the check's ``expected_because``)."""

    case: str
    label: str
    expect: str
    because: str


class DisconnectDetails(FrozenModel):
    rows: list[DisconnectRow]
    paths: list[PathExpectation] = Field(default_factory=list)


def path_expectations(run: RunData) -> list[PathExpectation]:
    """One :class:`PathExpectation` per disconnect check of the plan, in plan order."""
    labels = {c.name: c.label for c in run.plan.cases}
    out = []
    for check in run.plan.checks:
        if isinstance(check, DisconnectFreesServer | OrphansRunOn):
            expect = "frees" if isinstance(check, DisconnectFreesServer) else "orphans"
            label = labels.get(check.case, "")
            out.append(PathExpectation(case=check.case, label=label, expect=expect,
                                       because=check.expected_because))  # fmt: skip
    return out


def _open_clients(records: Sequence[ReadRecord], t: int) -> int:
    n = 0
    for r in records:
        sent = r.sent_ns
        closed = r.disconnect_ns or r.end_ns
        if sent is not None and sent <= t and (closed is None or t < closed):
            n += 1
    return n


def _first_at_or_after(points: Sequence[tuple[int, float]], t_ns: int) -> float | None:
    """The first sampled value at or after ``t_ns`` (what the server showed right after)."""
    return next((v for t, v in points if t >= t_ns), None)


def disconnect_row(case: CaseData, phase: PhaseRow) -> DisconnectRow | None:
    """The module docstring's figures for one phase, or ``None`` if nobody disconnected."""
    name = phase.phase
    records = [r for r in case.records if r.phase == name]
    cuts = [(r, r.disconnect_ns) for r in records if r.disconnect_ns]
    if not cuts:
        return None
    cut = [r for r, _ in cuts]
    start, end = phase.start_ns, phase.end_ns
    last = max(t for _, t in cuts)
    running = series(case.samples, "num_requests_running")
    kv = max_over_engines(case.samples, "kv_cache_usage_perc")
    run_base = value_at(running, start) or 0.0
    kv_base = value_at(kv, start) or 0.0

    time_to_free = None
    for t, v in running:
        if last <= t <= end and v <= run_base + _open_clients(records, t):
            time_to_free = (t - last) / 1e9
            break
    kv_release = next(
        ((t - last) / 1e9 for t, v in kv if last <= t <= end and v <= kv_base + 0.005), None
    )
    zombie_ns = 0
    window = [(t, v) for t, v in running if start <= t <= end]
    for (t0, v0), (t1, _) in pairwise(window):
        if v0 > run_base and _open_clients(records, t0) == 0:
            zombie_ns += t1 - t0

    received = sum(sum(r.chunk_tokens or []) for r in records)
    generated = counter_delta(series(case.samples, "generation_tokens"), start, end)
    budget = sum(r.max_tokens - sum(r.chunk_tokens) for r in cut)
    wasted = None if generated is None else generated - received
    prompted = counter_delta(series(case.samples, "prompt_tokens"), start, end)
    sent = sum(r.prompt_tokens_sent for r in records if r.sent_ns is not None)
    return DisconnectRow(
        case=case.name,
        phase=name,
        requests=len(records),
        disconnected=len(cut),
        received_tokens_at_disconnect=sorted({sum(r.chunk_tokens or []) for r in cut}),
        last_disconnect_ns=last,
        running_after_last_disconnect=_first_at_or_after(running, last),
        running_samples_after=sum(1 for t, _ in running if last <= t <= end),
        time_to_free_s=time_to_free,
        generation_tokens=generated,
        received_tokens=received,
        wasted_tokens=wasted,
        orphan_budget_tokens=budget,
        wasted_fraction=None if wasted is None or budget == 0 else wasted / budget,
        zombie_s=zombie_ns / 1e9,
        kv_after_last_disconnect=_first_at_or_after(kv, last),
        kv_release_s=kv_release,
        server_idle_after=phase.server_idle_after,
        prompt_tokens=prompted,
        prompt_tokens_sent=sent,
    )


def other_traffic(row: DisconnectRow) -> str | None:
    """Why ``row``'s figures are not this phase's alone, or ``None``: the server counted more
    prompt tokens over the phase window than its requests sent (vLLM's ``prompt_tokens``
    counts each request's prompt once), so another client shared the server and its tokens
    and running requests are in every figure."""
    if row.prompt_tokens is None or row.prompt_tokens <= row.prompt_tokens_sent:
        return None
    return (
        f"the server served other traffic during the phase (Δprompt_tokens "
        f"{row.prompt_tokens:.0f}, this phase sent {row.prompt_tokens_sent})"
    )


def _row(details: DisconnectDetails, case: str, phase: str) -> DisconnectRow | None:
    return next((r for r in details.rows if r.case == case and r.phase == phase), None)


def _undefined(row: DisconnectRow, need_running: bool) -> list[str]:
    """Which figures a check needs are undefined for ``row`` (module docstring)."""
    out = []
    if need_running and row.running_samples_after == 0:
        out.append("no num_requests_running sample between the last disconnect and the "
                   "phase's end")  # fmt: skip
    if row.generation_tokens is None:
        out.append("no generation_tokens delta over the phase")
    elif row.orphan_budget_tokens == 0:
        out.append("the disconnected requests had no tokens left to generate (no orphan budget)")
    return out


def _frees(check: DisconnectFreesServer, case: CaseSummary, details: DisconnectDetails) -> Verdict:
    row = _row(details, case.name, check.phase)
    name = f"server freed within {check.within_s} s of the last disconnect"
    if row is None:
        return Verdict(case=check.case, check=name, passed=None, detail="no disconnect recorded")
    seen_busy = row.time_to_free_s is None and row.running_samples_after > 0
    late = seen_busy or (row.time_to_free_s is not None and row.time_to_free_s > check.within_s)
    wasteful = row.wasted_fraction is not None and row.wasted_fraction > check.max_wasted_fraction
    if seen_busy:
        free = "server never seen free"
    elif row.time_to_free_s is None:
        free = "server not sampled after the last disconnect"
    else:
        free = f"running back after {row.time_to_free_s:.2f} s (sampled)"
    detail = (
        f"{free}; wasted {f(row.wasted_tokens, 0)} of a {row.orphan_budget_tokens} token "
        f"orphan budget ({pct(row.wasted_fraction)} %, limit {check.max_wasted_fraction:.0%})"
    )
    undefined = _undefined(row, need_running=True)
    passed: bool | None
    if (shared := other_traffic(row)) is not None:
        passed, detail = None, f"{detail}; cannot decide: {shared}"
    elif late or wasteful:
        passed = False
    elif undefined:
        passed, detail = None, f"{detail}; cannot decide: {'; '.join(undefined)}"
    else:
        passed = True
    return Verdict(case=check.case, check=name, passed=passed, detail=detail)


def _orphans(check: OrphansRunOn, case: CaseSummary, details: DisconnectDetails) -> Verdict:
    row = _row(details, case.name, check.phase)
    name = "orphaned requests run on after the disconnect"
    if row is None:
        return Verdict(case=check.case, check=name, passed=None, detail="no disconnect recorded")
    detail = (
        f"wasted {f(row.wasted_tokens, 0)} of a {row.orphan_budget_tokens} token orphan "
        f"budget ({pct(row.wasted_fraction)} %, expected ≥ {check.min_wasted_fraction:.0%}); "
        f"zombie time {row.zombie_s:.1f} s"
    )
    if (shared := other_traffic(row)) is not None:
        return Verdict(case=check.case, check=name, passed=None,
                       detail=f"{detail}; cannot decide: {shared}")  # fmt: skip
    if row.wasted_fraction is None:
        undefined = "; ".join(_undefined(row, need_running=False))
        return Verdict(case=check.case, check=name, passed=None,
                       detail=f"{detail}; cannot decide: {undefined}")  # fmt: skip
    passed = row.wasted_fraction >= check.min_wasted_fraction
    return Verdict(case=check.case, check=name, passed=passed, detail=detail)


class DisconnectAbortReport(ScenarioReport[DisconnectDetails]):
    evaluators: ClassVar[dict[type, Evaluator]] = {
        DisconnectFreesServer: _frees,
        OrphansRunOn: _orphans,
    }

    def details(self, run: RunData, cases: dict[str, CaseSummary]) -> DisconnectDetails:
        rows = [
            row
            for case in run.cases
            for phase in case.phases
            if (row := disconnect_row(case, phase)) is not None
        ]
        return DisconnectDetails(rows=rows, paths=path_expectations(run))

    def markdown(self, details: DisconnectDetails | None) -> list[str]:
        if details is None or not details.rows:
            return []
        rows = [
            [
                r.case, str(r.requests), str(r.disconnected),
                ",".join(str(x) for x in r.received_tokens_at_disconnect),
                f(r.running_after_last_disconnect, 0), f(r.time_to_free_s, 2),
                f(r.wasted_tokens, 0), str(r.orphan_budget_tokens), pct(r.wasted_fraction),
                f(r.zombie_s, 2), pct(r.kv_after_last_disconnect), f(r.kv_release_s, 2),
            ]
            for r in details.rows
        ]  # fmt: skip
        headers = ["case", "requests", "disconnected", "tokens at disconnect",
                   "running just after", "time to free s", "wasted tokens", "orphan budget",
                   "wasted %", "zombie s", "KV % just after", "KV release s"]  # fmt: skip
        return [
            "## Disconnects",
            "",
            table(headers, rows),
            "",
            "'Just after' = the first scrape after the last disconnect. "
            "Time to free and KV release are read from scrapes (upper bounds at the scrape "
            "period's resolution). Wasted tokens = Δgeneration_tokens − tokens the clients "
            "received; the orphan budget is what the abandoned requests had left to generate.",
            "",
            *_paths_markdown(details.paths),
        ]


def _paths_markdown(paths: list[PathExpectation]) -> list[str]:
    if not any(p.because for p in paths):
        return []  # a run planned before expectations were recorded
    rows = [[p.case, p.label, p.expect, p.because or "–"] for p in paths]
    return [
        "Each path's expectation on a mid-stream disconnect (frees: the server drops the "
        "request; orphans: it generates on for nobody), and its source:",
        "",
        table(["case", "path", "expected", "because"], rows),
        "",
    ]


REPORT = DisconnectAbortReport()
