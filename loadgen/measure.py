"""What a phase measured, at run time: its measurement window and the late-binding statistics.

The orchestrator needs a few figures while the run is going (``scenarios.late``): the
throughput a closed loop reached, the unloaded TTFT and TPOT. It takes them from the facts of
the records it just wrote (kept in memory only for phases a late-bound figure names), with
this module's functions; the analysis recomputes them from the raw files with its own metric
definitions and checks that they agree.

**Measurement window** of a phase (the single definition, also used by the analysis):

- open loop: [t0 + warm-up, t0 + duration) on the schedule, t0 = the phase's schedule start
  (the scheduled time of its first request); without a duration (and for a trace), up to
  its last scheduled time. Requests *scheduled* inside it are the phase's counted requests.
- closed loop and all-at-once: [first send + warm-up, last send]. Between the first and the
  last send a closed loop is full (each finished request is replaced at once); after the last
  send it drains.

**Statistics** (``scenarios.late.Statistic``):

- ``closed_loop_rps`` = C ÷ mean time in flight (end − sent, s) of the successful requests
  sent in [window start, window end − L], L = the longest time in flight of any successful
  request sent inside the window. Little's law, exact for a closed loop, which holds C
  requests in flight throughout the window; cutting the sends at end − L selects requests by
  send time only (each of them ended inside the window), so slow ones are not left out more
  often than fast ones. Counting completions in the window instead is off by up to one batch:
  with fixed lengths, requests admitted together finish together, so completions come in
  batch-sized bursts.
- ``ttft_p50_ms`` / ``tpot_p50_ms``: medians (numpy's linear interpolation) of TTFT =
  first token-carrying chunk − sent and TPOT = (last − first token chunk) ÷ (output tokens −
  1), over the successful requests sent inside the window; TPOT only for 2+ tokens.
  (``analysis.latency`` defines both for the report; this restates them for the run.)
  ``e2el_p50_ms``: the median of last token chunk − sent over the same requests.
- ``prefill_tokens_per_s`` = the prompt tokens of every successful request of the phase ÷
  (its latest first token − its earliest send), s: for a burst sent at once with one output
  token each, the rate at which the server prefilled the burst.

Also recorded: the window, the counts, and ``window_completed_rps`` (successful completions
inside the window ÷ its length) as a cross-check of the closed-loop figure.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from loadgen.records import RequestRecord
from scenarios.plan import PhaseSpec


@dataclass(frozen=True)
class Window:
    """A measurement window [start_ns, end_ns] on the run's monotonic clock."""

    start_ns: int
    end_ns: int

    @property
    def length_s(self) -> float:
        return (self.end_ns - self.start_ns) / 1e9

    def holds(self, t_ns: int | None) -> bool:
        """Whether ``t_ns`` lies in the window (an open loop's end is exclusive, see
        :func:`window_of`; callers that need it pass ``end_ns − 1``)."""
        return t_ns is not None and self.start_ns <= t_ns <= self.end_ns


@dataclass(frozen=True, slots=True)
class RequestFacts:
    """The few numbers of a request record that windows and late-bound statistics need
    (ns stamps of the monotonic clock; ``None`` where the record has none)."""

    index: int
    status: str
    scheduled_ns: int
    sent_ns: int | None
    end_ns: int | None
    first_token_ns: int | None
    last_token_ns: int | None
    output_tokens: int
    prompt_tokens: int = 0

    @classmethod
    def of(cls, record: RequestRecord) -> RequestFacts:
        """The facts of a record (live, or read back from ``requests.jsonl``)."""
        chunks = record.chunk_ns
        return cls(
            index=record.index,
            status=record.status,
            scheduled_ns=record.scheduled_ns,
            sent_ns=record.sent_ns,
            end_ns=record.end_ns,
            first_token_ns=chunks[0] if chunks else None,
            last_token_ns=chunks[-1] if chunks else None,
            output_tokens=sum(record.chunk_tokens),
            prompt_tokens=record.prompt_tokens_sent,
        )


def window_of(phase: PhaseSpec, facts: Sequence[RequestFacts]) -> Window | None:
    """The measurement window of ``phase`` (see the module docstring), from its requests'
    facts; ``None`` when nothing was sent.

    An open loop's window is half-open, [t0 + warm-up, t0 + duration): it is returned with
    ``end_ns`` one nanosecond before t0 + duration, so :meth:`Window.holds` counts a request
    scheduled exactly at the end out, as the schedule did (``arrivals_within``).
    """
    if not facts:
        return None
    warmup_ns = int(phase.warmup_s * 1e9)
    arrival = phase.arrival
    if arrival.timed:
        t0 = min(f.scheduled_ns for f in facts)
        if arrival.time_limit_s is not None:
            return Window(t0 + warmup_ns, t0 + int(arrival.time_limit_s * 1e9) - 1)
        return Window(t0 + warmup_ns, max(f.scheduled_ns for f in facts))
    sent = [f.sent_ns for f in facts if f.sent_ns is not None]
    if not sent:
        return None
    return Window(min(sent) + warmup_ns, max(sent))


def _median(values: Iterable[float]) -> float | None:
    arr = np.asarray(list(values), dtype=float)
    return float(np.percentile(arr, 50)) if arr.size else None


def prefill_tokens_per_s(facts: Sequence[RequestFacts]) -> float | None:
    """Prompt tokens of the successful requests ÷ (latest first token − earliest send), per
    second (module docstring); ``None`` without a successful request or a positive span."""
    ok = [f for f in facts if f.status == "ok" and f.sent_ns is not None and f.first_token_ns]
    if not ok:
        return None
    span_ns = max(f.first_token_ns or 0 for f in ok) - min(f.sent_ns or 0 for f in ok)
    return sum(f.prompt_tokens for f in ok) / (span_ns / 1e9) if span_ns > 0 else None


def measure_phase(phase: PhaseSpec, facts: Sequence[RequestFacts]) -> dict[str, Any]:
    """The late-binding statistics of ``phase`` and their window (JSON-ready, for
    ``phases.jsonl``); statistics without data are ``None``.

    Keys: ``window_start_ns``, ``window_end_ns``, ``window_s``, ``sent_in_window``,
    ``ok_in_window`` (successful requests sent inside the window), ``closed_loop_rps`` (closed
    loops only), ``closed_loop_requests`` (the requests it averaged), ``window_completed_rps``,
    ``ttft_p50_ms``, ``tpot_p50_ms``, ``e2el_p50_ms``, ``prefill_tokens_per_s``.
    """
    window = window_of(phase, facts)
    out: dict[str, Any] = dict.fromkeys(
        ("window_start_ns", "window_end_ns", "window_s", "closed_loop_rps",
         "closed_loop_requests", "window_completed_rps", "ttft_p50_ms", "tpot_p50_ms",
         "e2el_p50_ms", "prefill_tokens_per_s"),
    )  # fmt: skip
    out |= {"sent_in_window": 0, "ok_in_window": 0}
    # A burst's sends all share one instant: its window is empty, its prefill rate is not.
    out["prefill_tokens_per_s"] = prefill_tokens_per_s(facts)
    if window is None or window.length_s <= 0:
        return out
    inside = [f for f in facts if window.holds(f.sent_ns)]
    # (sent, first token, last token, end, output tokens) of the successful ones
    ok = [
        (f.sent_ns, f.first_token_ns, f.last_token_ns, f.end_ns, f.output_tokens)
        for f in inside
        if f.status == "ok"
        and f.sent_ns is not None
        and f.first_token_ns is not None
        and f.last_token_ns is not None
        and f.end_ns is not None
    ]
    completed = sum(1 for f in facts if f.status == "ok" and window.holds(f.end_ns))
    out |= {
        "window_start_ns": window.start_ns,
        "window_end_ns": window.end_ns,
        "window_s": window.length_s,
        "sent_in_window": len(inside),
        "ok_in_window": len(ok),
        "window_completed_rps": completed / window.length_s,
        "ttft_p50_ms": _median((first - sent) / 1e6 for sent, first, _, _, _ in ok),
        "tpot_p50_ms": _median(
            (last - first) / 1e6 / (n - 1) for _, first, last, _, n in ok if n >= 2
        ),
        "e2el_p50_ms": _median((last - sent) / 1e6 for sent, _, last, _, _ in ok),
    }
    concurrency = phase.arrival.steady_concurrency
    if concurrency is not None and ok:
        cut = window.end_ns - max(end - sent for sent, _, _, end, _ in ok)
        held = [(end - sent) / 1e9 for sent, _, _, end, _ in ok if sent <= cut]
        if held:
            out["closed_loop_rps"] = concurrency / float(np.mean(held))
            out["closed_loop_requests"] = len(held)
    return out
