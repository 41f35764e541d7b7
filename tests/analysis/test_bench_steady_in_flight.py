"""bench's "exactly C in flight" check reads the server only at scrapes taken while the client
had exactly C requests streaming: a short phase whose scrapes all fell in its ramp or drain
has no evidence either way, and more than C at any scrape still refutes it."""

from __future__ import annotations

from analysis.models import CaseSummary
from analysis.reports.bench import BenchCase, BenchDetails, _concurrency
from analysis.reports.bench.figures import BenchPhase, streaming_windows
from analysis.server_side import in_flight_at_scrapes
from metrics.samples import Sample
from scenarios.bench import ExactConcurrency
from tests.support.row_builders import records, scrape

# C = 2. r1 streams 10 → 50, r2 20 → 40, r3 45 → 60 (ns): the level is 1, 2 at 20, 1 at 40,
# 2 at 45, 1 at 50, 0 at 60, so exactly 2 stream in [20, 40] and [45, 50].
RECORDS = records([
    {"request_id": "r1", "chunk_ns": [10, 30], "chunk_tokens": [1, 1], "end_ns": 50},
    {"request_id": "r2", "chunk_ns": [20], "chunk_tokens": [1], "end_ns": 40},
    {"request_id": "r3", "chunk_ns": [45], "chunk_tokens": [1], "end_ns": 60},
    {"request_id": "r4", "end_ns": 70},  # never streamed: left out
])  # fmt: skip


def test_streaming_windows_are_the_spans_with_exactly_c_past_their_first_token() -> None:
    assert streaming_windows(RECORDS, 2) == [(20, 40), (45, 50)]
    assert streaming_windows(RECORDS, 1) == [(10, 20), (40, 45), (50, 60)]
    assert streaming_windows(RECORDS, 3) == []


def _sample(t_ns: int, name: str, value: float, engine: str = "0") -> Sample:
    return Sample(t_ns, name, (("engine", engine),), value)


def test_only_ok_scrapes_wholly_inside_a_window_count_summed_over_engines() -> None:
    ticks = [
        scrape(scrape=0, start_ns=21, end_ns=25, outcome="ok"),  # inside [20, 40]
        scrape(scrape=1, start_ns=38, end_ns=42, outcome="ok"),  # straddles 40: out
        scrape(scrape=2, start_ns=46, end_ns=49, outcome="ok"),  # inside [45, 50]
        scrape(scrape=3, start_ns=30, end_ns=33, outcome="failed", error="x"),  # no page
    ]
    samples = [
        _sample(25, "num_requests_running", 1), _sample(25, "num_requests_running", 1, "1"),
        _sample(25, "num_requests_waiting", 0),
        _sample(42, "num_requests_running", 9),
        _sample(49, "num_requests_running", 1), _sample(49, "num_requests_waiting", 1),
        _sample(49, "kv_cache_usage_perc", 0.5),
    ]  # fmt: skip
    # 1 + 1 + 0 = 2 at the first; 1 + 1 = 2 at the third; the straddling 9 is not read
    assert in_flight_at_scrapes(samples, ticks, [(20, 40), (45, 50)]) == [2.0, 2.0]
    assert in_flight_at_scrapes(samples, ticks, []) == []


def _verdict(peak: float | None, steady: list[float], client_max: int = 4) -> bool | None:
    phase = BenchPhase(
        phase="c4", load="closed loop C=4", concurrency=4, rate_rps=None, requests=16, ok=16,
        failed=0, aborted=0, not_sent=0, interrupted=0, duration_s=1.0, input_tokens=0,
        output_tokens=256, request_throughput_req_s=16.0, input_throughput_tok_s=0.0,
        output_throughput_tok_s=256.0, total_token_throughput_tok_s=256.0,
        client_in_flight_max=client_max, server_in_flight_peak=peak,
        server_in_flight_steady=steady,
    )  # fmt: skip
    details = BenchDetails(slo={}, cases=[BenchCase(case="attached", phases=[phase])])
    check = ExactConcurrency(case="attached", phase="c4", concurrency=4)
    case = CaseSummary.model_construct()
    return _concurrency(check, case, details).passed


def test_a_phase_whose_scrapes_all_fell_in_ramp_or_drain_is_undecided_not_failed() -> None:
    # the CI case: every scrape in the phase read 0 and none was taken while 4 streamed
    assert _verdict(peak=0.0, steady=[]) is None


def test_four_at_a_steady_scrape_passes_and_three_or_five_fail() -> None:
    assert _verdict(peak=4.0, steady=[3.0, 4.0]) is True
    assert _verdict(peak=3.0, steady=[3.0, 3.0]) is False  # a cap below C
    assert _verdict(peak=5.0, steady=[4.0]) is False  # more than C held at some scrape
    assert _verdict(peak=5.0, steady=[]) is False  # refuted even without a steady scrape
    assert _verdict(peak=4.0, steady=[4.0], client_max=3) is False  # the client sent 3
