"""loadgen.measure: measurement windows and the statistics late-bound figures use, by hand."""

from __future__ import annotations

import msgspec
import pytest

from loadgen.measure import RequestFacts, Window, measure_phase, prefill_tokens_per_s, window_of
from loadgen.records import RequestRecord
from loadgen.runformat import ReadRecord
from scenarios.arrivals import AllAtOnce, ClosedLoop, OpenLoop
from scenarios.plan import PhaseSpec
from scenarios.workloads import UniquePrompts

S = 1_000_000_000
MS = 1_000_000


def facts(i: int, sent_s: float, end_s: float, ttft_ms: float = 100, tokens: int = 5,
          scheduled_s: float = 0.0, status: str = "ok") -> RequestFacts:  # fmt: skip
    """A request whose first token comes ``ttft_ms`` after its send and last token 1 ms
    before its end."""
    sent, end = int(sent_s * S), int(end_s * S)
    return RequestFacts(i, status, int(scheduled_s * S), sent, end, sent + int(ttft_ms * MS),
                        end - MS, tokens)  # fmt: skip


def closed(concurrency: int, warmup_s: float) -> PhaseSpec:
    return PhaseSpec(
        name="sat",
        workload=UniquePrompts(prompt_tokens=8, output_tokens=5, requests=100),
        arrival=ClosedLoop(concurrency=concurrency, duration_s=10),
        warmup_s=warmup_s,
    )


# A closed loop of 2 whose requests take 2 s each, sent in pairs at 0, 2, 4 and 6 s.
PAIRS = [facts(i, sent_s=2 * (i // 2), end_s=2 * (i // 2) + 2) for i in range(8)]


def test_a_closed_loop_window_runs_from_first_send_plus_warm_up_to_the_last_send() -> None:
    assert window_of(closed(2, 1.0), PAIRS) == Window(1 * S, 6 * S)


def test_closed_loop_throughput_is_c_over_the_mean_time_in_flight() -> None:
    # Window [1 s, 6 s]. Sent inside it: the pairs at 2, 4, 6 s; the longest time in flight
    # is 2 s, so only sends up to 6 − 2 = 4 s are averaged (they all ended by 6 s): 4
    # requests of 2 s. 2 in flight ÷ 2 s = 1 req/s, the loop's true rate (2 every 2 s). The
    # direct count of completions in the window (ends at 2, 2, 4, 4, 6, 6 s → 6 in 5 s =
    # 1.2 req/s) is off by the burst that lands on the window's edge.
    m = measure_phase(closed(2, 1.0), PAIRS)
    assert m["closed_loop_rps"] == pytest.approx(1.0)
    assert m["closed_loop_requests"] == 4
    assert m["window_completed_rps"] == pytest.approx(6 / 5)
    assert (m["window_s"], m["sent_in_window"], m["ok_in_window"]) == (5.0, 6, 6)


def test_slow_requests_near_the_window_end_are_not_left_out() -> None:
    # Pairs at 0, 2, 4, 6 s as above, but the second of each pair takes 4 s (ends 2 s
    # later). Window [1 s, 6 s]; sent inside it: 2, 2, 4, 4, 6, 6 s; longest 4 s, so sends up
    # to 6 − 4 = 2 s are averaged: (2 s + 4 s) / 2 = 3 s mean → 2 / 3 req/s. Cutting at the
    # window's end instead would keep the fast 4 s send and drop its slow twin.
    slow = [facts(i, 2 * (i // 2), 2 * (i // 2) + 2 + 2 * (i % 2)) for i in range(8)]
    m = measure_phase(closed(2, 1.0), slow)
    assert m["closed_loop_rps"] == pytest.approx(2 / 3)
    assert m["closed_loop_requests"] == 2


def test_medians_come_from_successful_requests_sent_in_the_window() -> None:
    # C = 1, warm-up 1 s: the request sent at 0 s (TTFT 900 ms, a cold start) is left out;
    # the others have TTFT 100, 120, 140 ms → median 120 ms. TPOT = (last − first token) /
    # (5 − 1): (1 s − 1 ms − TTFT) / 4 → 224.75, 219.75, 214.75 ms → median 219.75 ms. A
    # failed request sent in the window counts for nothing.
    seq = [facts(0, 0, 1, ttft_ms=900), facts(1, 1, 2, ttft_ms=100),
           facts(2, 2, 3, ttft_ms=120), facts(3, 3, 4, ttft_ms=140),
           facts(4, 4, 4.1, status="error")]  # fmt: skip
    m = measure_phase(closed(1, 1.0), seq)
    assert m["ttft_p50_ms"] == pytest.approx(120.0)
    assert m["tpot_p50_ms"] == pytest.approx(219.75)
    assert (m["sent_in_window"], m["ok_in_window"]) == (4, 3)


def test_an_open_loop_window_is_its_schedule_minus_the_warm_up() -> None:
    # Schedule starts at 10 s (the first request's scheduled time); 4 s duration, 1 s warm-up:
    # [11 s, 14 s), held as [11 s, 14 s − 1 ns] so a request scheduled at 14 s is out.
    phase = PhaseSpec(
        name="r",
        workload=UniquePrompts(prompt_tokens=8, output_tokens=5, requests=None),
        arrival=OpenLoop(rate_rps=2.0, duration_s=4.0),
        warmup_s=1.0,
    )
    sched = [facts(i, 10 + i / 2, 11 + i / 2, scheduled_s=10 + i / 2) for i in range(8)]
    window = window_of(phase, sched)
    assert window == Window(11 * S, 14 * S - 1)
    assert not window.holds(14 * S)
    assert measure_phase(phase, sched)["closed_loop_rps"] is None  # not a closed loop


def test_facts_read_the_same_from_a_live_record_and_its_line_read_back() -> None:
    record = RequestRecord(
        request_id="r", case="c", phase="p", index=3, group=None, prompt_tokens_sent=8,
        max_tokens=2, scheduled_ns=5, sent_ns=7, chunk_ns=[10, 20], chunk_tokens=[1, 1],
        end_ns=25, status="ok",
    )  # fmt: skip
    row = msgspec.json.decode(record.to_json(), type=ReadRecord)
    assert (
        RequestFacts.of(record)
        == RequestFacts.of(row)
        == RequestFacts(3, "ok", 5, 7, 25, 10, 20, 2, prompt_tokens=8)
    )


def test_nothing_sent_measures_nothing() -> None:
    m = measure_phase(closed(2, 1.0), [])
    assert m["closed_loop_rps"] is None and m["sent_in_window"] == 0


def test_prefill_throughput_of_a_burst_and_e2el_median() -> None:
    """Four 100-token prompts sent at 10 s, first tokens at 10.1, 10.2, 10.3, 10.4 s: 400
    tokens prefilled in 0.4 s = 1000 tokens/s. E2EL = last token − sent: 0.1…0.4 s, median
    0.25 s (one output token: the first token is the last)."""
    phase = PhaseSpec(
        name="prefill",
        workload=UniquePrompts(prompt_tokens=100, output_tokens=1, requests=4),
        arrival=AllAtOnce(),
    )
    burst = [
        RequestFacts(i, "ok", 10 * S, 10 * S, int((10.1 + i / 10) * S),
                     int((10.1 + i / 10) * S), int((10.1 + i / 10) * S), 1, prompt_tokens=100)
        for i in range(4)
    ]  # fmt: skip
    failed = RequestFacts(4, "error", 10 * S, 10 * S, 11 * S, None, None, 0, prompt_tokens=100)
    measured = measure_phase(phase, [*burst, failed])
    assert measured["prefill_tokens_per_s"] == pytest.approx(1000.0)
    assert prefill_tokens_per_s([failed]) is None
    sent_apart = [f.__class__(**{**_fields(f), "sent_ns": f.sent_ns + f.index}) for f in burst]
    assert measure_phase(phase, sent_apart)["e2el_p50_ms"] == pytest.approx(250.0, abs=1e-5)


def _fields(f: RequestFacts) -> dict:
    return {k: getattr(f, k) for k in RequestFacts.__slots__}
