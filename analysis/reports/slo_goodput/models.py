"""slo-goodput's report details: the typed figures its section holds (rates req/s, latencies ms)."""

from __future__ import annotations

from analysis.models import ServerHistogram
from server.frozen import FrozenModel

Quantiles = dict[str, float | None]


class SLOFigure(FrozenModel):
    """One SLO: its limit (ms) and where it came from (given, or derived with its inputs)."""

    metric: str
    limit_ms: float | None
    source: str


class UnloadedFigures(FrozenModel):
    """The unloaded probe over its window: successful requests and median latencies (ms)."""

    requests: int
    warmup_s: float
    ttft_p50_ms: float | None
    tpot_p50_ms: float | None
    e2el_p50_ms: float | None


class SaturationFigures(FrozenModel):
    """The closed-loop saturation phase over its window.

    ``closed_loop_rps`` = C ÷ mean time in flight (``loadgen.measure``); ``window_completed_rps``
    = successful completions in the window ÷ its length, the direct count (off by up to a
    batch when completions come in bursts).
    """

    concurrency: int
    window_s: float | None
    requests: int
    mean_in_flight_s: float | None
    closed_loop_rps: float | None
    window_completed_rps: float | None
    ttft_p50_ms: float | None
    tpot_p50_ms: float | None
    running_peak: float | None
    waiting_peak: float | None


class SweepPoint(FrozenModel):
    """One rate of the sweep over its measurement window (rates req/s, latencies ms).

    ``rate_rps`` is the nominal λ the schedule was drawn with, ``rate_source`` how it was set;
    ``offered_rps`` what the schedule put in the window; ``carried_in`` the requests already in
    flight when the window opened (sent in the warm-up), which may complete inside it. Latency
    quantiles are over the successful counted requests; ``*_adjusted_ms`` rank failures above
    them (``None`` = a failure). Server figures are over the window: vLLM's TTFT and queue-time
    histograms (bucket deltas; each quantile with the bucket that holds it), beside the
    client's TTFT of the requests whose first token came in it.
    """

    phase: str
    rate_rps: float | None
    rate_source: str
    window_s: float
    carried_in: int
    counted: int
    sent: int
    ok: int
    failed: int
    good: int
    offered_rps: float
    achieved_rps: float
    completed_rps: float
    completed_prorata_rps: float
    goodput_rps: float
    attainment: float | None
    attainment_by_slo: dict[str, float]
    lateness_ms: Quantiles
    lateness_max_ms: float | None
    slot_wait_ms: Quantiles | None
    ttft_ms: Quantiles
    tpot_ms: Quantiles
    itl_ms: Quantiles
    e2el_ms: Quantiles
    ttft_adjusted_ms: Quantiles
    e2el_adjusted_ms: Quantiles
    waiting_mean: float | None
    waiting_peak: float | None
    running_peak: float | None
    kv_peak: float | None
    preemptions: float | None
    server_ttft_ms: ServerHistogram | None
    server_queue_ms: ServerHistogram | None
    client_ttft_first_token_in_window_ms: Quantiles


class LateFigure(FrozenModel):
    """A figure the run resolved while it ran, and the same figure recomputed from raw files."""

    name: str
    used: float | None
    recomputed: float | None
    inputs: str
    agrees: bool | None


class BracketPoint(FrozenModel):
    phase: str
    offered_rps: float
    attainment: float


class CapacityAnswer(FrozenModel):
    """The maximum sustainable rate, its bracket, and the replicas for ``target_rps``."""

    target_attainment: float
    max_rate_rps: float | None
    lower: BracketPoint | None
    upper: BracketPoint | None
    bracketed: bool
    statement: str
    target_rps: float | None
    replicas: int | None
    assumption: str


class SLOGoodputDetails(FrozenModel):
    case: str
    slo: list[SLOFigure]
    warmup_s: float
    duration_s: float | None
    unloaded: UnloadedFigures | None
    saturation: SaturationFigures | None
    points: list[SweepPoint]
    answer: CapacityAnswer
    late_figures: list[LateFigure]
    top_rate_text: str
