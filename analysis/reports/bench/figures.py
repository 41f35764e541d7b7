"""bench's per-phase figures from the records and the generic phase summaries (pure).

Definitions (the report prints them):

- **duration** = first request sent → last request finished (s), the generic phase duration
  (vLLM bench's ``duration``); request and token throughputs divide by it.
- **input tokens** = Σ over successful requests of the server's ``usage.prompt_tokens`` (a
  text or chat prompt is measured in the server's tokens), the planned length where a record
  has no usage; **output tokens** = Σ streamed tokens of successful requests.
- **goodput** = successful requests meeting every ``--slo`` (``analysis.goodput.judge``: ≤,
  TPOT of a 1-token output counts as met) ÷ duration; ``None`` without ``--slo``.
- **client in flight, max** = the most requests between their send and their end at once,
  from the records' ``sent_ns``/``end_ns`` (an end before a send at the same ns counts first).
- **streaming windows** of a closed loop at C = the spans where exactly C requests had their
  first token and not yet their end (``chunk_ns[0]`` → ``end_ns``): the server holds each of
  them, so a scrape wholly inside such a span should see C running + waiting.
- **outputs not exact** = successful requests whose usage counted other than ``max_tokens``
  generated tokens; **prompt lengths differing** = successful requests whose server count
  differs from the planned one (token-ID prompts cannot: that is a failure).
- **failure kind**: the leading words of a failed request's error (``HTTP 400``, ``stalled``,
  an exception's type, ``usage.completion_tokens``…), so one cause is one row.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Iterable, Sequence

import pandas as pd
from pydantic import BaseModel, ConfigDict, Field

from analysis.goodput import SLOLimits, judge
from analysis.models import PhaseSummary, Stats
from loadgen.runformat import ReadRecord


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class BenchPhase(_Frozen):
    """One phase's benchmark figures (module docstring); times in ms, rates per second."""

    phase: str
    load: str
    concurrency: int | None = None
    rate_rps: float | None = None
    requests: int
    ok: int
    failed: int
    aborted: int
    not_sent: int
    interrupted: int = 0
    duration_s: float | None
    input_tokens: int
    output_tokens: int
    request_throughput_req_s: float | None
    input_throughput_tok_s: float | None
    output_throughput_tok_s: float | None
    total_token_throughput_tok_s: float | None
    good: int | None = None
    goodput_req_s: float | None = None
    ttft_ms: Stats = Stats()
    tpot_ms: Stats = Stats()
    itl_ms: Stats = Stats()
    e2el_ms: Stats = Stats()
    failures_by_kind: dict[str, int] = Field(default_factory=dict)
    client_in_flight_max: int = 0
    server_in_flight_peak: float | None = None
    server_running_peak: float | None = None
    server_in_flight_steady: list[float] = Field(default_factory=list)
    outputs_not_exact: int = 0
    prompt_lengths_differing: int = 0


_KIND = re.compile(r"^(HTTP \d+|[A-Za-z_.]+(?:Error|Exception)|stalled|timed out|cancelled|"
                   r"error event in stream|no usage reported|counted|usage\.\w+)")  # fmt: skip


def failure_kind(error: str | None) -> str:
    """The kind of a failed request's ``error`` (module docstring); ``unknown`` when empty."""
    if not error:
        return "unknown"
    m = _KIND.match(error)
    return m.group(1) if m else error.split(":")[0][:60]


def max_in_flight(records: Iterable[ReadRecord]) -> int:
    """The most requests in flight at once between ``sent_ns`` and ``end_ns`` (ends first on
    equal stamps: a closed loop's next send follows the end that freed its slot)."""
    events = []
    for r in records:
        sent, end = r.sent_ns, r.end_ns
        if sent is None:
            continue
        events.append((int(sent), 1))
        if end is not None:
            events.append((int(end), -1))
    events.sort()
    level = peak = 0
    for _, step in events:
        level += step
        peak = max(peak, level)
    return peak


def streaming_windows(records: Iterable[ReadRecord], c: int) -> list[tuple[int, int]]:
    """[start_ns, end_ns] spans (monotonic ns) where exactly ``c`` requests were streaming:
    past their first token chunk and before their end (ends first on equal stamps, as in
    ``max_in_flight``). Requests without a token chunk or an end are left out."""
    events = []
    for r in records:
        if r.chunk_ns and r.end_ns is not None:
            events.append((int(r.chunk_ns[0]), 1))
            events.append((int(r.end_ns), -1))
    events.sort()
    windows: list[tuple[int, int]] = []
    level, opened = 0, None
    for t, step in events:
        level += step
        if level == c and opened is None:
            opened = t
        elif level != c and opened is not None:
            if t > opened:
                windows.append((opened, t))
            opened = None
    return windows


def _rate(x: float, duration: float | None) -> float | None:
    return x / duration if duration else None


def bench_phase(
    summary: PhaseSummary,
    records: Sequence[ReadRecord],
    load: tuple[str, int | None, float | None],
    slo: SLOLimits | None,
    steady_in_flight: Callable[[list[tuple[int, int]]], list[float]] | None = None,
) -> BenchPhase:
    """The figures of one phase from its generic ``summary`` and its ``records``.

    ``load`` is (label, concurrency, rate): how the plan sent it. ``steady_in_flight`` gives
    the server's running + waiting at the scrapes inside given windows
    (``analysis.server_side.in_flight_at_scrapes`` bound to the case's samples).
    """
    ok = [r for r in records if r.status == "ok"]
    input_tokens = sum(
        r.usage_prompt_tokens if r.usage_prompt_tokens is not None else r.prompt_tokens_sent
        for r in ok
    )  # fmt: skip
    output = summary.output_tokens
    duration = summary.duration_s
    good = goodput = None
    if slo is not None and slo.given():
        from analysis.latency import request_frame

        frame = request_frame(records)
        good = int(judge(frame, slo)["good"].sum()) if not frame.empty else 0
        goodput = _rate(good, duration)
    failures = Counter(failure_kind(r.error) for r in records if r.status == "error")
    peaks = summary.gauge_peaks
    return BenchPhase(
        phase=summary.phase,
        load=load[0],
        concurrency=load[1],
        rate_rps=load[2],
        requests=summary.requests,
        ok=summary.ok,
        failed=summary.failed,
        aborted=summary.aborted,
        not_sent=summary.not_sent,
        interrupted=summary.interrupted,
        duration_s=duration,
        input_tokens=input_tokens,
        output_tokens=output,
        request_throughput_req_s=summary.request_throughput_req_s,
        input_throughput_tok_s=_rate(input_tokens, duration),
        output_throughput_tok_s=summary.output_throughput_tok_s,
        total_token_throughput_tok_s=_rate(input_tokens + output, duration),
        good=good,
        goodput_req_s=goodput,
        ttft_ms=summary.ttft_ms,
        tpot_ms=summary.tpot_ms,
        itl_ms=summary.itl_ms,
        e2el_ms=summary.e2el_ms,
        failures_by_kind=dict(failures),
        client_in_flight_max=max_in_flight(records),
        server_in_flight_peak=summary.server_in_flight_peak,
        server_running_peak=peaks.get("num_requests_running"),
        server_in_flight_steady=(
            steady_in_flight(streaming_windows(records, load[1]))
            if steady_in_flight is not None and load[1]
            else []
        ),
        outputs_not_exact=sum(1 for r in ok if r.usage_completion_tokens != r.max_tokens),
        prompt_lengths_differing=sum(
            1
            for r in ok
            if r.usage_prompt_tokens is not None and r.usage_prompt_tokens != r.prompt_tokens_sent
        ),
    )


def phases_frame(phases: list[BenchPhase]) -> pd.DataFrame:
    """One row per phase: output tok/s, TTFT p99 and TPOT p50 (the throughput–latency curve)."""
    return pd.DataFrame(
        [
            {
                "phase": p.phase,
                "output_tok_s": p.output_throughput_tok_s,
                "ttft_p99_ms": p.ttft_ms.p99,
                "tpot_p50_ms": p.tpot_ms.p50,
            }
            for p in phases
        ]
    )
