"""Typed summaries: what a report holds, as frozen pydantic models (``report.json`` is their dump).

The generic part is what every run has: per case and per phase, client latency statistics,
throughput, server counter deltas, gauge peaks, server-side histogram quantiles, scrape
accounting, loop lag and data-quality findings; then the verdicts. A scenario adds its own
typed section under ``RunSummary.details`` (see ``analysis.reports``). Units are in field names;
fractions stay fractions (0–1).
"""

from __future__ import annotations

from typing import Any

from pydantic import Field

from server.frozen import FrozenModel


class Stats(FrozenModel):
    """count, mean, population std and p50/p90/p95/p99 of a sample (``None`` when empty)."""

    count: int = 0
    mean: float | None = None
    std: float | None = None
    p50: float | None = None
    p90: float | None = None
    p95: float | None = None
    p99: float | None = None


class LatencyStats(FrozenModel):
    """Client-side latency statistics over successful requests, in ms (see analysis.latency).

    ``itl_ms`` is per token (a k-token chunk's gap split into k values); ``chunk_gap_ms`` is per
    chunk (time per engine step under speculative decoding); ``tokens_per_chunk`` in tokens.
    """

    ttft_ms: Stats = Stats()
    tpot_ms: Stats = Stats()
    e2el_ms: Stats = Stats()
    itl_ms: Stats = Stats()
    chunk_gap_ms: Stats = Stats()
    tokens_per_chunk: Stats = Stats()


class QuantileBucket(FrozenModel):
    """The bucket of a server histogram that holds one quantile, in ms: the quantile lies in
    (``low_ms``, ``high_ms``], and a histogram says nothing finer. ``high_ms`` is ``None`` for
    the ``+Inf`` bucket (above the largest finite bound), ``low_ms`` ``None`` only below a
    first bound ≤ 0."""

    low_ms: float | None
    high_ms: float | None

    def holds(self, value_ms: float) -> bool:
        """Whether ``value_ms`` lies in the bucket (bounds included: a client figure measured
        a little differently may land on an edge)."""
        above_low = self.low_ms is None or value_ms >= self.low_ms
        return above_low and (self.high_ms is None or value_ms <= self.high_ms)


class ServerHistogram(FrozenModel):
    """A vLLM histogram over one phase: bucket deltas, then ``histogram_quantile`` (ms).

    ``count`` is the number of observations (requests, or steps for ITL) in the phase.
    ``p50_ms``… are Prometheus' interpolations inside a bucket; ``buckets`` holds, per
    quantile (``p50``, ``p90``, ``p99``), the bucket it lies in, which is all that can be
    compared with an exact client quantile. ``floors`` names the quantiles that fell in the
    ``+Inf`` bucket: they show the largest finite bound, a lower bound of the true value.
    """

    family: str
    count: float
    mean_ms: float | None
    p50_ms: float | None
    p90_ms: float | None
    p99_ms: float | None
    floors: list[str] = Field(default_factory=list)
    buckets: dict[str, QuantileBucket] = Field(default_factory=dict)


class ScrapeAccounting(FrozenModel):
    """Every scrape tick of a case: ok, failed, skipped (the previous scrape still ran), late
    (started more than half an interval after its deadline), NaN samples dropped, and samples
    dropped because the page repeated their series (name and label set)."""

    ticks: int = 0
    ok: int = 0
    failed: int = 0
    skipped: int = 0
    late: int = 0
    nan_dropped: int = 0
    duplicates_dropped: int = 0


class PhaseSummary(LatencyStats):
    """One phase of one case.

    Window: [start, end] = first request sent → last request finished + settle wait (the
    ``end_ns`` the run recorded). Throughput divides by ``duration_s`` = last request finished
    − first request sent (s). Counter deltas are summed over engines; gauge peaks are the
    largest sampled value of any engine (a lower bound of the true peak), per engine in
    ``gauge_peaks_by_engine``; ``gauge_samples`` counts the scrapes a peak was taken from.

    Attributes:
        deltas_flag: set when no successful scrape started after the phase's last request
            ended and before the window closed: counter deltas may miss the tail.
        prompt_tokens: prompt tokens of every request of the phase (sent or not).
        cached_tokens: Σ cached tokens over the successful requests that reported them
            (``None``: none did); ``cached_reported`` counts those requests,
            ``cached_prompt_tokens`` sums their prompt tokens and ``cached_token_rate`` is
            their ratio (``analysis.summaries``; ``None`` when undefined).
        token_timing: records by how their token stamps were obtained (usage/text/final_only).
        send_lateness_ms: sent − scheduled, over every sent request (open-loop accuracy).
        requested_concurrency: requests the phase asked to keep in flight (closed loop, all
            at once, an open loop's cap); ``None`` for an uncapped open loop.
        server_in_flight_peak: the most requests the server held at one scrape (running +
            waiting, summed over engines; sampled, a lower bound).
        workers: load-generator workers that sent the phase (``None``: one process).
        clock_offset_bound_ms: the largest error bound of the workers' clock offsets applied
            to this phase's records (Ray across hosts; ``None`` when the clock is shared).
        loop_lag_max_ms / loop_lag_p99_ms / late_sends: with workers, the worst worker's lag
            and the late sends of all of them.
        failed: ``error`` records (failures of the server or the network).
        interrupted: requests in flight when the user's Ctrl-C or SIGTERM cut the phase,
            counted apart: not in ``failed``, in no failure rate.
        incomplete: why the phase's figures cover only part of it (the run was interrupted,
            its server died, or it was killed during it), ``None`` for a phase that ran to
            its end.
    """

    phase: str
    requests: int
    ok: int
    failed: int
    aborted: int
    not_sent: int
    interrupted: int = 0
    duration_s: float | None
    output_tokens: int
    output_throughput_tok_s: float | None
    request_throughput_req_s: float | None
    prompt_tokens: int
    cached_tokens: int | None
    cached_reported: int = 0
    cached_prompt_tokens: int = 0
    cached_token_rate: float | None = None
    token_timing: dict[str, int] = Field(default_factory=dict)
    send_lateness_ms: Stats = Stats()
    counter_deltas: dict[str, float | None] = Field(default_factory=dict)
    counter_resets: dict[str, int] = Field(default_factory=dict)
    gauge_peaks: dict[str, float | None] = Field(default_factory=dict)
    gauge_peaks_by_engine: dict[str, dict[str, float]] = Field(default_factory=dict)
    gauge_samples: dict[str, int] = Field(default_factory=dict)
    server_histograms: dict[str, ServerHistogram] = Field(default_factory=dict)
    deltas_flag: str | None = None
    loop_lag_max_ms: float | None = None
    loop_lag_p99_ms: float | None = None
    late_sends: int | None = None
    requested_concurrency: int | None = None
    server_in_flight_peak: float | None = None
    workers: int | None = None
    clock_offset_bound_ms: float | None = None
    incomplete: str | None = None


class CaseSummary(FrozenModel):
    """One case: server facts, every phase, all phases together, data quality.

    Attributes:
        server: the server's facts as the run recorded them (version, capacity, start-up s,
            model variant, argv, the cores it computes on).
        client: how each sending thread ran (``loadgen.placement.AppliedPlacement`` as a
            dict: policy, pinned cores, reason, problem); one per worker, ``None`` for a
            worker left as Ray started it; empty for runs that did not record it.
        planned_phases: the phases the plan gave this case, in order (ran or not).
        all_phases: latency over every successful request of the case.
        requests_failed / requests_aborted / requests_interrupted: records ``error`` /
            ``aborted`` / ``interrupted`` (cut by the user, never counted as failed).
        metric_aliases: canonical metric family → the exposition name the server used.
        missing_families: recorded families the server did not expose at all.
        unusable_histograms: server histogram families left out because they break the
            histogram rules (no ``+Inf`` bucket, not cumulative, …): family → why.
        requests_excess_tokens: records flagged with more tokens than ``max_tokens`` or
            than the server's usage (``excess_tokens``).
        data_quality: findings a reader must know (torn files, dropped samples, flagged
            phases, records whose token stamps cannot give a TTFT).
    """

    name: str
    label: str = ""
    role: str = "test"
    status: str
    error: str | None = None
    server: dict[str, Any] = Field(default_factory=dict)
    client: list[dict[str, Any] | None] = Field(default_factory=list)
    planned_phases: list[str] = Field(default_factory=list)
    phases: dict[str, PhaseSummary] = Field(default_factory=dict)
    all_phases: LatencyStats = LatencyStats()
    requests_total: int = 0
    requests_failed: int = 0
    requests_aborted: int = 0
    requests_excess_tokens: int = 0
    requests_interrupted: int = 0
    token_timing: dict[str, int] = Field(default_factory=dict)
    scrapes: ScrapeAccounting = ScrapeAccounting()
    metric_aliases: dict[str, str] = Field(default_factory=dict)
    missing_families: list[str] = Field(default_factory=list)
    unusable_histograms: dict[str, str] = Field(default_factory=dict)
    data_quality: list[str] = Field(default_factory=list)


class Verdict(FrozenModel):
    """Outcome of one check: ``passed`` is ``None`` when the data to decide was missing."""

    case: str
    check: str
    passed: bool | None
    detail: str


class VerdictSummary(FrozenModel):
    passed: int
    failed: int
    undecided: int


class ResealFact(FrozenModel):
    """An explicit re-seal of the run (``manifest.json``'s ``resealed``): when (UTC, ISO
    8601), why, and what differed from the manifest before it."""

    at: str
    reason: str
    changed: list[str] = Field(default_factory=list)


class RunFacts(FrozenModel):
    """How the run went (from ``run.json``); ``file_problems`` when it could not be read;
    ``format_version`` the run format it was written in (0: read through the migration,
    ``loadgen.runformat.migrate_v0``); ``resealed`` its explicit re-seals, oldest first
    (empty: its files are as the run wrote them)."""

    command: list[str] = Field(default_factory=list)
    started_at: str | None = None
    status: str | None = None
    wall_s: float | None = None
    model_variant: dict[str, Any] | None = None
    format_version: int = 1
    file_problems: list[str] = Field(default_factory=list)
    resealed: list[ResealFact] = Field(default_factory=list)


#: The version of ``report.json``'s format (:class:`RunSummary`): raised, with a rule for
#: older files, by any change a reader of the previous version cannot read.
REPORT_FORMAT_VERSION = 1


class RunSummary(FrozenModel):
    """The whole report, as ``report.json`` holds it (``analysis.report_file`` reads it back).

    ``format_version`` is the version of this format (:data:`REPORT_FORMAT_VERSION`; a file
    written before it was recorded has none and is version 1); ``run.format_version`` is the
    run format of the run it was built from. ``details`` is the scenario's own section (its
    model's dump).
    """

    format_version: int = REPORT_FORMAT_VERSION
    scenario: str
    description: str
    run: RunFacts
    params: dict[str, Any]
    sizing: dict[str, Any]
    phases: list[str]
    cases: dict[str, CaseSummary]
    details: dict[str, Any] | None = None
    verdicts: list[Verdict]
    verdict_summary: VerdictSummary
    plots: list[str] = Field(default_factory=list)
