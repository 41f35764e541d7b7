"""The report's server-histogram table: means as differences, quantiles as buckets.

A client quantile is exact; the server's histogram only knows which bucket holds the same
quantile. The table shows that bucket and where the client's quantile lies against it, never
a difference to the bucket's edge (which could read −1,190 ms for figures that agree).
"""

from __future__ import annotations

from analysis.markdown import bucket_text, histogram_table, placed_in
from analysis.models import QuantileBucket, ServerHistogram
from analysis.server_side import histogram_figures
from metrics.samples import Sample
from tests.support.summary_builders import case, phase

S = 1_000_000_000


def _ttft(t: int, buckets: dict[str, float], total: float) -> list[Sample]:
    out = [Sample(t, "ttft_seconds_bucket", (("le", le),), v) for le, v in buckets.items()]
    return [*out, Sample(t, "ttft_seconds_sum", (), total),
            Sample(t, "ttft_seconds_count", (), buckets["+Inf"])]  # fmt: skip


def test_each_server_quantile_carries_the_bucket_that_holds_it() -> None:
    # 10 requests in the window: 4 ≤ 0.5 s, 5 in (0.5, 1], 1 in (1, 2.5]; sum 7 s.
    samples = [
        *_ttft(S, {"0.5": 0, "1.0": 0, "2.5": 0, "+Inf": 0}, 0.0),
        *_ttft(2 * S, {"0.5": 4, "1.0": 9, "2.5": 10, "+Inf": 10}, 7.0),
    ]
    h = histogram_figures(samples, S, 2 * S)["ttft_seconds"]
    assert h.mean_ms == 700.0
    # p50: rank 5 in (0.5, 1]; p90: rank 9 reaches (0.5, 1]'s count 9; p99: rank 9.9 in (1, 2.5].
    assert h.buckets == {
        "p50": QuantileBucket(low_ms=500.0, high_ms=1000.0),
        "p90": QuantileBucket(low_ms=500.0, high_ms=1000.0),
        "p99": QuantileBucket(low_ms=1000.0, high_ms=2500.0),
    }


def test_the_table_compares_means_as_differences_and_quantiles_as_inside_or_out() -> None:
    hist = ServerHistogram(
        family="ttft_seconds", count=10, mean_ms=700.0, p50_ms=833.3, p90_ms=1000.0,
        p99_ms=2350.0, floors=[],
        buckets={"p50": QuantileBucket(low_ms=500.0, high_ms=1000.0),
                 "p90": QuantileBucket(low_ms=500.0, high_ms=1000.0),
                 "p99": QuantileBucket(low_ms=1000.0, high_ms=2500.0)},
    )  # fmt: skip
    client = {"mean": 712.5, "p50": 480.0, "p90": 1000.0, "p99": 1160.0}
    summary = case("c", phase("warm", ttft_ms=client, server_histograms={"ttft_seconds": hist}))
    lines = histogram_table(summary)
    header, _, row = lines[2].splitlines()
    assert header.split(" | ")[5:] == [
        "client − server mean", "server p50 bucket ms", "client p50 ms", "server p90 bucket ms",
        "client p90 ms", "server p99 bucket ms", "client p99 ms |",
    ]  # fmt: skip
    assert row.strip("| ").split(" | ") == [
        "warm", "ttft_seconds", "10", "700.0", "712.5", "12.5",
        "[500, 1000]", "480.0 (below)",
        "[500, 1000]", "1000.0 (inside)",  # on the upper edge: inside (le is inclusive)
        "[1000, 2500]", "1160.0 (inside)",  # 1,190 ms below the interpolated 2,350: same bucket
    ]  # fmt: skip
    assert "client − server p99" not in lines[2]


def test_the_overflow_bucket_reads_above_its_bound() -> None:
    overflow = QuantileBucket(low_ms=2560000.0, high_ms=None)
    assert bucket_text(overflow) == "> 2560000"
    assert placed_in(3000000.0, overflow) == "3000000.0 (inside)"
    assert placed_in(12.0, overflow) == "12.0 (below)"
    assert bucket_text(QuantileBucket(low_ms=2.5, high_ms=5.0)) == "[2.5, 5]"
    assert placed_in(None, overflow) == "–"
