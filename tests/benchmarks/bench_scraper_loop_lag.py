"""Benchmark: does scraping /metrics disturb the load generator's event loop?

Serves the recorded real vLLM page (tests/fixtures) on loopback and measures the event-loop
lag (how late a 5 ms sleep wakes up) of a loop that stands in for the load generator, for
10 s per variant, all in this run:

- baseline: no scraping;
- in-loop full parse: fetch + prometheus-client parse of the whole page on the loop every
  250 ms (the naive design SCENARIOS.md §3 warns about);
- in-loop filtered parse: fetch + parse of only the recorded families, on the loop;
- scraper process: the project's ``ScraperProcess`` (what runs do).

Prints p50/p99/max lag per variant and each one's p99 and max as a ratio to the baseline.
Then the scraper's own cost, which sets how much of each 250 ms interval a scrape uses: parse
time per real page for the whole page, for what the scraper parses (gauges, counters and the
latency histograms), and for the gauges and counters alone (what it parsed before histograms
were recorded), with ratios to the last.
Run: ``.venv/bin/python tests/benchmarks/bench_scraper_loop_lag.py [seconds]``.
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
from prometheus_client.parser import text_string_to_metric_families

from loadgen.clock import MonotonicClock
from loadgen.phase import LoopLagMonitor
from metrics.names import SAMPLE_NAMES
from metrics.parse import parse_page, parse_samples
from metrics.scraper import ScraperProcess

PAGE = (
    Path(__file__).resolve().parents[1] / "fixtures" / "vllm_0.32.0_cpu_1GiB_metrics.txt"
).read_bytes()


class _Handler(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; version=0.0.4")
        self.send_header("Content-Length", str(len(PAGE)))
        self.end_headers()
        self.wfile.write(PAGE)

    def log_message(self, *args: object) -> None:
        pass


async def _in_loop(url: str, full: bool, stop: asyncio.Event) -> None:
    async with httpx.AsyncClient() as client:
        while not stop.is_set():
            text = (await client.get(f"{url}/metrics")).text
            if full:
                for _ in text_string_to_metric_families(text):
                    pass
            else:
                parse_samples(text, 0)
            await asyncio.sleep(0.25)


async def _measure(variant: str, url: str, seconds: float) -> list[int]:
    stop = asyncio.Event()
    task = None
    scraper = None
    if variant.startswith("in-loop"):
        task = asyncio.create_task(_in_loop(url, variant == "in-loop full parse", stop))
    elif variant == "scraper process":
        scraper = ScraperProcess(url, Path(tempfile.mkdtemp()), 0.25)
        scraper.start()
        await asyncio.to_thread(scraper.wait_first_scrape)
    with LoopLagMonitor(MonotonicClock(), interval_ms=5.0) as monitor:
        await asyncio.sleep(seconds)
    stop.set()
    if task is not None:
        await task
    if scraper is not None:
        await asyncio.to_thread(scraper.stop)
    return monitor.lags_ns


def _pct(values: list[int], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] / 1e6


def _median_ms(work: Callable[[], object], repeats: int = 300) -> float:
    times = []
    for _ in range(repeats):
        began = time.perf_counter()
        work()
        times.append(time.perf_counter() - began)
    return statistics.median(times) * 1e3


def _gauges_and_counters_only(text: str) -> None:
    kept = [
        line
        for line in text.splitlines()
        if not line.startswith("#")
        and (name := line.split("{", 1)[0].split(" ", 1)[0]) in SAMPLE_NAMES
        and not name.endswith(("_bucket", "_sum", "_count"))
    ]
    for family in text_string_to_metric_families("\n".join(kept) + "\n"):
        list(family.samples)


def parse_costs() -> None:
    """Median parse time per real page, three ways, with ratios (same run)."""
    text = PAGE.decode()
    variants = {
        "whole page (prometheus-client)": lambda: [
            list(f.samples) for f in text_string_to_metric_families(text)
        ],
        "scraper: parse_page": lambda: parse_page(text, 0),
        "gauges + counters only": lambda: _gauges_and_counters_only(text),
    }
    results = {name: _median_ms(work) for name, work in variants.items()}
    base = results["gauges + counters only"]
    print(f"parse time per page ({len(parse_page(text, 0).samples)} samples recorded)")
    for name, ms in results.items():
        print(f"{name:<32}{ms:>9.3f} ms{ms / base:>8.1f}×")


def main() -> None:
    seconds = float(sys.argv[1]) if len(sys.argv) > 1 else 10.0
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}"
    variants = ["baseline", "in-loop full parse", "in-loop filtered parse", "scraper process"]
    results = {v: asyncio.run(_measure(v, url, seconds)) for v in variants}
    server.shutdown()
    base_p99, base_max = _pct(results["baseline"], 0.99), _pct(results["baseline"], 1.0)
    print(f"event-loop lag over {seconds:.0f} s per variant, page {len(PAGE)} B, every 250 ms")
    print(f"{'variant':<24}{'p50 ms':>9}{'p99 ms':>9}{'max ms':>9}{'p99/base':>10}{'max/base':>10}")
    for variant, lags in results.items():
        p50, p99, mx = _pct(lags, 0.5), _pct(lags, 0.99), _pct(lags, 1.0)
        print(
            f"{variant:<24}{p50:>9.3f}{p99:>9.3f}{mx:>9.3f}"
            f"{p99 / max(base_p99, 1e-3):>10.2f}{mx / max(base_max, 1e-3):>10.2f}"
        )


if __name__ == "__main__":
    main()
    parse_costs()
