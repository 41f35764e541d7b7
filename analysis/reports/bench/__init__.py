"""bench's report: per phase the latency table, throughputs, goodput, failures by kind and
in-flight figures (``figures``), the throughput–latency curve for sweeps (``plots``), and
the verdicts of its four checks; per fleet case what its router adds to TTFT and its
replicas' KV-cache events beside the model (``analysis.fleet_kv``, the comparison
trace-replay's fleet cases get). The server's counter deltas and histograms beside the
client's figures come from the generic report."""

from __future__ import annotations

from functools import partial
from pathlib import Path
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict

from analysis.fleet import FleetData, fleet_in_flight_at_scrapes, load_fleet
from analysis.fleet_kv import ReplicaKv, case_kv_comparison, kv_lines, kv_verdict
from analysis.fleet_latency import RouterLatency, case_router_latency, latency_lines
from analysis.goodput import SLOLimits
from analysis.latency import request_frame
from analysis.load import CaseData, RunData
from analysis.markdown import f, table
from analysis.models import CaseSummary, Verdict
from analysis.reports import Evaluator, ScenarioReport
from analysis.reports.bench.figures import BenchPhase, bench_phase
from analysis.reports.bench.plots import throughput_latency
from analysis.server_side import in_flight_at_scrapes
from analysis.summaries import INTERRUPTED
from scenarios.arrivals import ArrivalPattern
from scenarios.bench import (
    WARMUP_PHASE,
    ExactConcurrency,
    NoFailures,
    OutputsExact,
    RequestsSent,
)
from scenarios.fleet_cases import FleetKvEventsMatch
from scenarios.prefix_cache_model import usable_blocks
from scenarios.values import parse_slo


class BenchCase(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    case: str
    phases: list[BenchPhase]
    #: A fleet case: what its router adds to TTFT per phase (``analysis.fleet_latency``).
    router_latency: dict[str, RouterLatency] = {}
    #: A fleet case: its replicas' KV-cache events beside the model (``analysis.fleet_kv``).
    kv_events: list[ReplicaKv] | None = None


class BenchDetails(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    slo: dict[str, float]
    cases: list[BenchCase]


def _slo(params: dict[str, Any]) -> SLOLimits | None:
    text = params.get("slo")
    if not text:
        return None
    limits = parse_slo(str(text))
    return SLOLimits(limits.get("ttft"), limits.get("tpot"), limits.get("e2el"))


def _load(arrival: ArrivalPattern) -> tuple[str, int | None, float | None]:
    """(the load in words, a closed loop's C, an open loop's λ in req/s)."""
    return arrival.describe(), arrival.steady_concurrency, arrival.open_rate()


def _phase(details: BenchDetails | None, case: str, phase: str) -> BenchPhase | None:
    for c in details.cases if details else []:
        if c.case == case:
            for p in c.phases:
                if p.phase == phase:
                    return p
    return None


def _sent(check: RequestsSent, case: CaseSummary, details: BenchDetails | None) -> Verdict:
    p = _phase(details, check.case, check.phase)
    name = f"{check.requests} requests sent in {check.phase}"
    if p is None:
        return Verdict(case=check.case, check=name, passed=None, detail="the phase did not run")
    sent = p.requests - p.not_sent
    detail = f"{p.requests} records, {sent} sent, {p.not_sent} not sent"
    summary = case.phases.get(check.phase)
    if sent < check.requests and summary is not None and summary.incomplete == INTERRUPTED:
        # Cut by the user (as "no failures" says): not the server's failing, no proof either
        return Verdict(case=check.case, check=name, passed=None,
                       detail=detail + ": the phase was cut by Ctrl-C or SIGTERM")  # fmt: skip
    return Verdict(
        case=check.case, check=name, passed=p.requests == check.requests == sent, detail=detail
    )


def _concurrency(
    check: ExactConcurrency, case: CaseSummary, details: BenchDetails | None
) -> Verdict:
    p = _phase(details, check.case, check.phase)
    c = check.concurrency
    name = f"exactly {c} in flight in {check.phase}"
    if p is None:
        return Verdict(case=check.case, check=name, passed=None, detail="the phase did not run")
    server, steady = p.server_in_flight_peak, p.server_in_flight_steady
    detail = (
        f"client records: at most {p.client_in_flight_max} in flight; server: running + waiting "
        f"peak {f(server, 0)} (running {f(p.server_running_peak, 0)}; sampled every scrape, a "
        f"lower bound), {f(max(steady), 0) if steady else 'no scrape'} at the {len(steady)} "
        f"scrape(s) taken while the client had exactly {c} streaming"
    )
    if server is not None and server > c:  # more than C held at any scrape refutes it
        return Verdict(case=check.case, check=name, passed=False, detail=detail)
    if not steady:  # every scrape fell in the ramp or drain: no evidence either way
        return Verdict(case=check.case, check=name, passed=None, detail=detail)
    return Verdict(
        case=check.case, check=name, passed=p.client_in_flight_max == c and max(steady) == c,
        detail=detail,
    )  # fmt: skip


def _exact(check: OutputsExact, case: CaseSummary, details: BenchDetails | None) -> Verdict:
    p = _phase(details, check.case, check.phase)
    name = f"outputs exact in {check.phase}"
    if p is None or p.ok == 0:
        return Verdict(case=check.case, check=name, passed=None, detail="no successful request")
    return Verdict(
        case=check.case, check=name, passed=p.outputs_not_exact == 0,
        detail=f"{p.ok - p.outputs_not_exact} of {p.ok} successful requests got exactly "
        "max_tokens generated tokens (usage)",
    )  # fmt: skip


def _no_failures(check: NoFailures, case: CaseSummary, details: BenchDetails | None) -> Verdict:
    p = _phase(details, check.case, check.phase)
    name = f"no failures in {check.phase}"
    if p is None:
        return Verdict(case=check.case, check=name, passed=None, detail="the phase did not run")
    kinds = ", ".join(f"{k} × {n}" for k, n in p.failures_by_kind.items())
    if p.interrupted and p.failed + p.aborted == 0:
        # Cut by the user before it ended: no failure, but no proof that there were none.
        return Verdict(case=check.case, check=name, passed=None,
                       detail=f"{p.interrupted} interrupted by Ctrl-C or SIGTERM before they "
                       "ended: the phase did not run to its end")  # fmt: skip
    return Verdict(
        case=check.case, check=name, passed=p.failed + p.aborted + p.not_sent == 0,
        detail=f"{p.failed} failed, {p.aborted} aborted, {p.not_sent} not sent"
        + (f" ({kinds})" if kinds else ""),
    )  # fmt: skip


def _kv_events(check: FleetKvEventsMatch, _: CaseSummary, details: BenchDetails | None) -> Verdict:
    """The case's KV events beside the model (:func:`analysis.fleet_kv.kv_verdict`)."""
    case = next((c for c in details.cases if c.case == check.case), None) if details else None
    return kv_verdict(check.case, case.kv_events if case is not None else None)


def _kv_comparison(
    run: RunData, data: CaseData, summary: CaseSummary, fleet: FleetData | None
) -> list[ReplicaKv] | None:
    """A fleet case's KV events beside the model (``None``: not a fleet case recording them,
    or no capacity numbers: the server's ``num_blocks`` and ``block_size``)."""
    spec = next(c for c in run.plan.cases if c.name == data.name)
    cap = summary.server.get("capacity") or {}
    if fleet is None or not spec.record_kv_events:
        return None
    try:
        num_blocks, block = int(cap["num_blocks"]), int(cap["block_size"])
    except (KeyError, TypeError, ValueError, OverflowError):
        return None
    if num_blocks < 2 or block < 1:
        return None
    cdir = run.run_dir / "cases" / data.name
    frame = request_frame(data.records)
    capacity = (usable_blocks(num_blocks), block)
    return case_kv_comparison(cdir, data.name, run.plan, frame, fleet, capacity)


def _fleet_peaks(phase: BenchPhase, fleet: FleetData, window: tuple[int, int]) -> BenchPhase:
    """``phase`` with the server's in-flight and running peaks of the whole fleet (every
    replica's gauges summed: :func:`analysis.fleet.fleet_gauge_peak`), not replica 0's."""
    return phase.model_copy(
        update={
            "server_in_flight_peak": fleet.in_flight_peak(*window),
            "server_running_peak": fleet.running_peak(*window),
        }
    )


STAT_COLUMNS = ("mean", "p50", "p90", "p99")


class BenchReport(ScenarioReport[BenchDetails]):
    evaluators: ClassVar[dict[type, Evaluator]] = {
        RequestsSent: _sent,
        ExactConcurrency: _concurrency,
        OutputsExact: _exact,
        NoFailures: _no_failures,
        FleetKvEventsMatch: _kv_events,
    }

    def details(self, run: RunData, cases: dict[str, CaseSummary]) -> BenchDetails:
        slo = _slo(run.plan.params)
        out = []
        for data, spec in zip(run.cases, run.plan.cases, strict=True):
            summary = cases.get(data.name)
            if summary is None:
                continue
            phases = []
            fleet = load_fleet(run.run_dir, data)
            windows = {row.phase: (row.start_ns, row.end_ns) for row in data.phases}
            for planned in run.plan.phases_of(spec):
                ps = summary.phases.get(planned.name)
                if ps is None:
                    continue
                records = [r for r in data.records if r.phase == planned.name]
                steady = (
                    partial(in_flight_at_scrapes, data.samples, data.scrapes)
                    if fleet is None
                    else partial(fleet_in_flight_at_scrapes, fleet, data.scrapes)
                )
                phase = bench_phase(ps, records, _load(planned.arrival), slo, steady)
                if fleet is not None and planned.name in windows:
                    phase = _fleet_peaks(phase, fleet, windows[planned.name])
                phases.append(phase)
            latency = case_router_latency(run.run_dir, data)
            kv = _kv_comparison(run, data, summary, fleet)
            out.append(
                BenchCase(case=data.name, phases=phases, router_latency=latency, kv_events=kv)
            )
        return BenchDetails(slo=slo.given() if slo else {}, cases=out)

    def case_markdown(self, details: BenchDetails | None, case: str) -> list[str]:
        rows = next((c.phases for c in details.cases if c.case == case), []) if details else []
        if not rows:
            return []
        out = ["### Benchmark (per phase)", ""]
        load = [
            [p.phase, p.load, str(p.requests), str(p.ok), str(p.failed), f(p.duration_s, 2),
             f(p.request_throughput_req_s, 3), f(p.input_throughput_tok_s),
             f(p.output_throughput_tok_s), f(p.total_token_throughput_tok_s),
             f(p.goodput_req_s, 3) if p.good is not None else "–",
             str(p.client_in_flight_max), f(p.server_in_flight_peak, 0)]
            for p in rows
        ]  # fmt: skip
        out += [
            table(
                [
                    "phase",
                    "load",
                    "requests",
                    "ok",
                    "failed",
                    "duration s",
                    "req/s",
                    "in tok/s",
                    "out tok/s",
                    "total tok/s",
                    "goodput req/s",
                    "client in flight max",
                    "server in flight peak",
                ],
                load,
            ),
            "",
        ]
        lat = []
        for p in rows:
            for label, st in (("TTFT", p.ttft_ms), ("TPOT", p.tpot_ms), ("ITL", p.itl_ms),
                              ("E2EL", p.e2el_ms)):  # fmt: skip
                lat.append([p.phase, label, *(f(getattr(st, k), 2) for k in STAT_COLUMNS)])
        out += ["Latency (ms, successful requests):", "",
                table(["phase", "metric", *STAT_COLUMNS], lat), ""]  # fmt: skip
        failures = [[p.phase, kind, str(n)] for p in rows for kind, n in p.failures_by_kind.items()]
        if failures:
            out += ["Failures by kind:", "", table(["phase", "kind", "requests"], failures), ""]
        notes = [
            f"{p.phase}: {p.prompt_lengths_differing} prompts measured differently by the "
            "server than planned (usage.prompt_tokens; the input tokens above are the server's)"
            for p in rows
            if p.prompt_lengths_differing
        ]
        out += [f"- {n}" for n in notes] + ([""] if notes else [])
        found = next((c for c in details.cases if c.case == case), None) if details else None
        if found is None:
            return out
        return out + latency_lines(found.router_latency) + kv_lines(found.kv_events)

    def markdown(self, details: BenchDetails | None) -> list[str]:
        if details is None:
            return []
        slo = ", ".join(f"{k} ≤ {v:g} ms" for k, v in details.slo.items())
        return [
            "Bench definitions: duration = first request sent → last finished; throughputs "
            "divide by it; input tokens are the server's usage counts; goodput = successful "
            "requests meeting every SLO (≤) ÷ duration"
            + (f" (SLOs: {slo})" if slo else " (no --slo given)")
            + "; in flight = requests between send and end, from the client's records, and "
            "running + waiting from the server's gauges (sampled, a lower bound). The "
            f"{WARMUP_PHASE} phase, if any, has no checks.",
            "",
        ]

    def plots(
        self,
        run: RunData,
        cases: dict[str, CaseSummary],
        details: BenchDetails | None,
        out_dir: Path,
    ) -> list[Path]:
        written = []
        for c in details.cases if details else []:
            measured = [p for p in c.phases if p.phase != WARMUP_PHASE and p.ok]
            if measured:
                written.append(
                    throughput_latency(measured, out_dir / f"throughput_latency_{c.case}.png")
                )
        return written

    def phase_goodput(self, details: BenchDetails | None) -> dict[tuple[str, str], float | None]:
        """Each phase's goodput under ``--slo`` (none without SLOs: ``BenchPhase.good``)."""
        return {(c.case, p.phase): p.goodput_req_s
                for c in (details.cases if details else []) for p in c.phases
                if p.good is not None}  # fmt: skip


REPORT = BenchReport()
