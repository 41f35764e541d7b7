"""metrics.scraper.ScraperProcess: the spawned scraper against a local /metrics endpoint.

The endpoint serves the recorded vLLM page with ``prefix_cache_hits_total`` set to the number
of pages served so far, and answers 503 to the very first request, so every scrape's value
and the failed scrape are known exactly.
"""

from __future__ import annotations

import asyncio
import gzip
import itertools
import json
from pathlib import Path

import pytest
from aiohttp import web

from metrics.scraper import ScraperProcess
from metrics.store import RAW_FILE, iter_raw, read_samples, read_scrapes

pytestmark = pytest.mark.timeout(40)
MS = 1_000_000

FIXTURE = Path(__file__).resolve().parent.parent / "fixtures" / "vllm_0.32.0_cpu_1GiB_metrics.txt"
HITS_LINE = 'vllm:prefix_cache_hits_total{engine="0",model_name="m"} 0.0'


class MetricsEndpoint:
    def __init__(self) -> None:
        self.page = FIXTURE.read_text()
        assert HITS_LINE in self.page
        self.requests = 0
        self.served = 0

    async def metrics(self, request: web.Request) -> web.Response:
        self.requests += 1
        if self.requests == 1:
            return web.Response(status=503, text="warming up")
        self.served += 1
        text = self.page.replace(HITS_LINE, HITS_LINE.replace(" 0.0", f" {self.served}.0"))
        return web.Response(text=text, content_type="text/plain")


@pytest.mark.asyncio
async def test_scraper_records_timed_scrapes_samples_and_raw_pages(tmp_path: Path) -> None:
    endpoint = MetricsEndpoint()
    app = web.Application()
    app.router.add_get("/metrics", endpoint.metrics)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    host, port = runner.addresses[0][:2]
    scraper = ScraperProcess(f"http://{host}:{port}/", tmp_path, interval_s=0.1)
    try:
        scraper.start()
        assert await asyncio.to_thread(scraper.wait_first_scrape, 20.0)
        await asyncio.sleep(1.5)
    finally:
        await asyncio.to_thread(scraper.stop)
        await runner.cleanup()
    assert scraper._proc.exitcode == 0  # stopped by its event, not terminated

    scrapes = read_scrapes(tmp_path)
    # 1.5 s at 0.1 s after the first scrape: about 16 ticks; ≥ 10 leaves room for a busy box.
    assert len(scrapes) >= 10
    assert [s["scrape"] for s in scrapes] == list(range(len(scrapes)))
    # Absolute deadlines: tick k is due at first deadline + k × 100 ms, exactly (no drift).
    t0 = scrapes[0]["deadline_ns"]
    assert all(s["deadline_ns"] - t0 == s["tick"] * 100 * MS for s in scrapes)
    # uvloop's timers have millisecond granularity, so a tick may begin up to 1 ms before its
    # deadline; one that begins more than half an interval after it is flagged late.
    assert all(s["start_ns"] - s["deadline_ns"] >= -1 * MS for s in scrapes)
    assert all(s["late"] == (s["start_ns"] - s["deadline_ns"] > 50 * MS) for s in scrapes)
    assert all(s["start_ns"] <= s["end_ns"] for s in scrapes)
    assert all(a["end_ns"] <= b["start_ns"] for a, b in itertools.pairwise(scrapes))
    assert all(b["tick"] > a["tick"] for a, b in itertools.pairwise(scrapes))
    first, *rest = scrapes
    assert first["ok"] is False and "503" in first["error"]
    assert all(s["ok"] for s in rest)
    assert endpoint.requests == len(scrapes)

    # Scrape k ≥ 1 saw page number k, so its prefix_cache_hits sample is exactly k, stamped
    # with that scrape's end time.
    samples = read_samples(tmp_path)
    hits = [s for s in samples if s.name == "prefix_cache_hits"]
    assert [s.value for s in hits] == [float(k) for k in range(1, len(scrapes))]
    assert [s.t_ns for s in hits] == [s["end_ns"] for s in rest]
    assert {s.name for s in samples} >= {"num_requests_running", "kv_cache_usage_perc"}
    lines = (tmp_path / "metrics" / "samples.jsonl").read_text().splitlines()
    assert sorted({json.loads(line)["scrape"] for line in lines}) == list(range(1, len(scrapes)))

    # The gzip stream was closed properly (decompressing it whole raises on a cut stream).
    raw_lines = gzip.decompress((tmp_path / RAW_FILE).read_bytes()).decode().splitlines()
    raws = [json.loads(line) for line in raw_lines]
    assert [r["scrape"] for r in raws] == list(range(1, len(scrapes)))
    assert raws[0]["text"] == endpoint.page.replace(HITS_LINE, HITS_LINE.replace(" 0.0", " 1.0"))
    assert [r["scrape"] for r in iter_raw(tmp_path)] == [r["scrape"] for r in raws]


def test_interval_must_be_positive(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="scrape interval must be positive"):
        ScraperProcess("http://127.0.0.1:1", tmp_path, interval_s=0)
