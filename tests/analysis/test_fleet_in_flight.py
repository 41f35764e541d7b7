"""A fleet bench's "exactly C in flight" reads the whole fleet: every replica's running +
waiting gauges summed at each scrape time, each replica counted by the lower of its scrapes
around that time (the replicas' scrapers do not tick together), so replica 0 alone does not
make the check fail and a stale count never adds a request that already moved on."""

from __future__ import annotations

from analysis.fleet import FleetData, fleet_gauge_peak, fleet_in_flight_at_scrapes
from analysis.reports.bench import BenchCase, BenchDetails, _concurrency, _fleet_peaks
from analysis.reports.bench.figures import BenchPhase
from metrics.rows import ScrapeTick
from metrics.samples import Sample
from scenarios.bench import ExactConcurrency

ENGINE = (("engine", "0"),)
IN_FLIGHT = ("num_requests_running", "num_requests_waiting")


def gauges(points: list[tuple[int, float, float]]) -> list[Sample]:
    """(t, running, waiting) per scrape."""
    out = []
    for t, running, waiting in points:
        out.append(Sample(t, "num_requests_running", ENGINE, running))
        out.append(Sample(t, "num_requests_waiting", ENGINE, waiting))
    return out


# Two requests in flight throughout, one on each replica; replica 0 scraped at 0, 250, …,
# replica 1 at 100, 350, …; replica 1's request waits at first (waiting 1, running 0) and
# ends between 350 and 600, and its successor goes to replica 1 again before 850.
SPLIT = (
    gauges([(0, 1, 0), (250, 1, 0), (500, 1, 0), (750, 1, 0), (1000, 1, 0)]),
    gauges([(100, 0, 1), (350, 1, 0), (600, 0, 0), (850, 1, 0)]),
)
# Replica 1's request ends between 350 and 600 and its successor goes to replica 0 before
# 500: at 500 replica 0 holds 2, and replica 1's last scrape (350) still shows its old one.
HANDOFF = (
    gauges([(0, 1, 0), (250, 1, 0), (500, 2, 0), (750, 2, 0), (1000, 2, 0)]),
    gauges([(100, 1, 0), (350, 1, 0), (600, 0, 0), (850, 0, 0)]),
)


def test_the_fleet_peak_sums_the_replicas_at_each_scrape_time() -> None:
    # t=0: 1 + (replica 1's first scrape, at 100: 0 + 1) = 2; t=100: min(1, 1) + 1 = 2;
    # t=500: 1 + min(350: 1, 600: 0) = 1; t=600: min(500: 1, 750: 1) + 0 = 1; the peak is 2,
    # where replica 0 alone never holds more than 1.
    assert fleet_gauge_peak(SPLIT, IN_FLIGHT, 0, 1000) == 2.0
    assert fleet_gauge_peak(SPLIT[:1], IN_FLIGHT, 0, 1000) == 1.0
    # Running alone: at t=100 replica 1 runs none (its request waits): 1 + 0; at 350: 1 + 1.
    assert fleet_gauge_peak(SPLIT, ("num_requests_running",), 0, 300) == 1.0
    assert fleet_gauge_peak(SPLIT, ("num_requests_running",), 0, 1000) == 2.0


def test_a_stale_count_does_not_add_a_request_that_moved_on() -> None:
    # t=500: replica 0 holds 2; replica 1 counts min(350: 1, 600: 0) = 0, not its stale 1:
    # 2, where holding replica 1's last value would give 3 with only 2 ever in flight.
    assert fleet_gauge_peak(HANDOFF, IN_FLIGHT, 0, 1000) == 2.0
    # Only scrape times inside the window count: at 250 and 350, 1 + 1.
    assert fleet_gauge_peak(HANDOFF, IN_FLIGHT, 200, 400) == 2.0
    assert fleet_gauge_peak(HANDOFF, IN_FLIGHT, 1001, 2000) is None


def test_a_replica_without_samples_makes_the_peak_unknown() -> None:
    assert fleet_gauge_peak((SPLIT[0], []), IN_FLIGHT, 0, 1000) is None


def phase(client_max: int, server: float | None, steady: list[float]) -> BenchPhase:
    return BenchPhase(
        phase="c2", load="concurrency 2", requests=8, ok=8, failed=0, aborted=0, not_sent=0,
        duration_s=1.0, input_tokens=0, output_tokens=0, request_throughput_req_s=None,
        input_throughput_tok_s=None, output_throughput_tok_s=None,
        total_token_throughput_tok_s=None, client_in_flight_max=client_max,
        server_in_flight_peak=server, server_in_flight_steady=steady,
    )  # fmt: skip


def ticks(times: list[int]) -> list[ScrapeTick]:
    """Replica 0's ok scrapes, each taking 10 ns and ending at its sample's time."""
    return [ScrapeTick(tick=i, deadline_ns=t - 10, outcome="ok", scrape=i, start_ns=t - 10,
                       end_ns=t) for i, t in enumerate(times)]  # fmt: skip


def test_the_steady_scrapes_of_a_fleet_count_every_replica() -> None:
    fleet = FleetData("round-robin", ("http://a", "http://b"), SPLIT)
    scrapes = ticks([0, 250, 500, 750, 1000])
    # The client had exactly 2 streaming over [200, 800]: replica 0's scrapes at 250, 500
    # and 750 lie inside; at 250: 1 + min(100: 1, 350: 1) = 2; at 500: 1 + min(350: 1,
    # 600: 0) = 1; at 750: 1 + min(600: 0, 850: 1) = 1.
    assert fleet_in_flight_at_scrapes(fleet, scrapes, [(200, 800)]) == [2.0, 1.0, 1.0]
    assert fleet_in_flight_at_scrapes(fleet, scrapes, [(260, 400)]) == []


def test_a_fleet_bench_holding_exactly_c_passes() -> None:
    check = ExactConcurrency(case="round-robin", phase="c2", concurrency=2)
    fleet = FleetData("round-robin", ("http://a", "http://b"), SPLIT)
    # Replica 0's own figures (peak 1, 1 at every steady scrape) are what the check read
    # before: it failed a fleet holding 2.
    alone = BenchDetails(slo={}, cases=[BenchCase(case="round-robin",
                                                  phases=[phase(2, 1.0, [1.0, 1.0])])])  # fmt: skip
    assert _concurrency(check, None, alone).passed is False  # type: ignore[arg-type]
    steady = fleet_in_flight_at_scrapes(fleet, ticks([0, 250, 500, 750, 1000]), [(200, 800)])
    summed = _fleet_peaks(phase(2, 1.0, steady), fleet, (0, 1000))
    assert (summed.server_in_flight_peak, summed.server_running_peak) == (2.0, 2.0)
    details = BenchDetails(slo={}, cases=[BenchCase(case="round-robin", phases=[summed])])
    assert _concurrency(check, None, details).passed is True  # type: ignore[arg-type]
