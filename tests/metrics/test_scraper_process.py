"""metrics.scraper.ScraperProcess: the spawned scraper against local ``/metrics`` endpoints.

Every test runs the real scraper process; what each scrape saw is known exactly because the
endpoints number their pages (``prefix_cache_hits_total`` or ``num_requests_running`` = the
request's index). Tick outcomes are derived by hand from the endpoint's delays.
"""

from __future__ import annotations

import asyncio
import gzip
import itertools
import json
import time
from pathlib import Path
from typing import Any

import msgspec
import pytest
from aiohttp import web

from loadgen.runformat.metric_files import iter_raw, read_samples, read_scrapes
from metrics.rows import ScrapeTick
from metrics.samples import counter_delta, counter_resets, gauge_peak_by, series
from metrics.scraper import ScraperProcess
from metrics.store import RAW_FILE, SAMPLES_FILE
from metrics.ticks import count_ticks, deltas_are_stale, tick_problems
from tests.support.fake_metrics_server import Answer, FakeMetricsServer

pytestmark = pytest.mark.timeout(40)
MS = 1_000_000
S = 1_000_000_000

FIXTURE = Path(__file__).resolve().parent.parent / "fixtures" / "vllm_0.32.0_cpu_1GiB_metrics.txt"
HITS_LINE = 'vllm:prefix_cache_hits_total{engine="0",model_name="m"} 0.0'


def _as_written(ticks: list[ScrapeTick]) -> list[dict[str, Any]]:
    """The ticks as their lines hold them (a field a tick lacks is absent)."""
    return [msgspec.to_builtins(t) for t in ticks]


class RealPageEndpoint:
    """The recorded vLLM page with ``prefix_cache_hits_total`` = pages served so far; 503 first."""

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


def _reject_constant(name: str) -> Any:
    raise ValueError(f"non-JSON constant {name}")


def strict_json_lines(path: Path) -> list[dict[str, Any]]:
    """Every line of ``path`` parsed as strict JSON (a bare NaN or Infinity raises)."""
    return [
        json.loads(line, parse_constant=_reject_constant) for line in path.read_text().splitlines()
    ]


@pytest.mark.asyncio
async def test_scraper_records_timed_scrapes_samples_and_raw_pages(tmp_path: Path) -> None:
    endpoint = RealPageEndpoint()
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

    ticks = read_scrapes(tmp_path)
    assert tick_problems(ticks) == []  # one line per tick 0…N
    entries = _as_written(ticks)
    run = [e for e in entries if e["outcome"] != "skipped"]
    # 1.5 s at 0.1 s after the first ok scrape: about 16 ticks; ≥ 10 leaves room for a busy box.
    assert len(run) >= 10
    assert [e["scrape"] for e in run] == list(range(len(run)))
    # Absolute deadlines: tick k is due at tick 0's deadline + k × 100 ms, exactly (no drift).
    t0 = entries[0]["deadline_ns"]
    assert all(e["deadline_ns"] - t0 == e["tick"] * 100 * MS for e in entries)
    # No tick begins before its deadline (the loop's timers may fire early; the scraper sleeps
    # again); one that begins more than half an interval after it is flagged late.
    assert all(e["start_ns"] >= e["deadline_ns"] for e in run)
    assert all(e["late"] == (e["start_ns"] - e["deadline_ns"] > 50 * MS) for e in run)
    assert all(e["start_ns"] <= e["end_ns"] for e in run)
    assert all(a["end_ns"] <= b["start_ns"] for a, b in itertools.pairwise(run))
    first, *rest = run
    assert first["outcome"] == "failed" and "503" in first["error"]
    assert all(e["outcome"] == "ok" for e in rest)
    assert endpoint.requests == len(run)
    # The first ok scrape names the alias of every family on the page (all current names)
    # and the absent ones; later scrapes of the same page repeat neither.
    assert rest[0]["aliases"]["kv_cache_usage_perc"] == "vllm:kv_cache_usage_perc"
    assert rest[0]["aliases"]["itl_seconds"] == "vllm:inter_token_latency_seconds"
    assert "spec_decode_num_drafts" in rest[0]["missing"]
    assert not any("aliases" in e for e in rest[1:])
    # 180 finite samples per page (9 gauges and counters, admission_rejections by its 2
    # reasons, 7 histograms), none dropped.
    assert all(e["samples"] == 180 and e["nan_dropped"] == 0 for e in rest)
    assert all(e["bytes"] == len(endpoint.page.encode()) for e in rest[:9])

    # Scrape k ≥ 1 saw page number k, so its prefix_cache_hits sample is exactly k, stamped
    # with that scrape's end time.
    samples = read_samples(tmp_path)
    hits = [s for s in samples if s.name == "prefix_cache_hits"]
    assert [s.value for s in hits] == [float(k) for k in range(1, len(run))]
    assert [s.t_ns for s in hits] == [e["end_ns"] for e in rest]
    assert {s.name for s in samples} >= {"num_requests_running", "ttft_seconds_bucket"}
    lines = strict_json_lines(tmp_path / SAMPLES_FILE)
    assert sorted({line["scrape"] for line in lines}) == list(range(1, len(run)))

    # The gzip stream was closed properly (decompressing it whole raises on a cut stream).
    raw_lines = gzip.decompress((tmp_path / RAW_FILE).read_bytes()).decode().splitlines()
    raws = [json.loads(line) for line in raw_lines]
    assert [r["scrape"] for r in raws] == list(range(1, len(run)))
    assert raws[0]["text"] == endpoint.page.replace(HITS_LINE, HITS_LINE.replace(" 0.0", " 1.0"))
    assert [r.scrape for r in iter_raw(tmp_path)] == [r["scrape"] for r in raws]


@pytest.mark.asyncio
async def test_slow_scrapes_skip_overrun_ticks_and_a_phase_waits_for_a_fresh_scrape(
    tmp_path: Path,
) -> None:
    # Interval 0.25 s; request 1 is answered after 1 s, request 3 after 2.5 s.
    server = FakeMetricsServer([Answer(), Answer(delay_s=1.0), Answer(), Answer(delay_s=2.5)])
    url = await server.start()
    scraper = ScraperProcess(url, tmp_path, interval_s=0.25)
    try:
        scraper.start()
        # A phase whose requests generate 50 tokens, its last one ending just after the
        # 2.5 s scrape began (that scrape's page still says 0).
        await server.wait_requests(4)
        last_end_ns = server.arrivals_ns[3] + 1
        server.tokens = 50.0
        post = await scraper.wait_scrape_started_at_or_after(last_end_ns, scraper.landing_bound_s)
        end_ns = time.monotonic_ns()
    finally:
        await asyncio.to_thread(scraper.stop)
        await server.stop()
    ticks = read_scrapes(tmp_path)
    assert tick_problems(ticks) == []
    entries = _as_written(ticks)

    # Tick 1 (due 0.25 s) ends ≈ 1.25 s: ticks 2–4 (0.5, 0.75, 1.0 s) passed more than half
    # an interval before, so they are skipped; tick 5 (1.25 s) passed just now and runs at
    # once. Tick 6 (1.5 s) ends ≈ 4.0 s: ticks 7–15 (1.75 … 3.75 s) skipped, tick 16 runs.
    ok, skip = "ok", "skipped"
    expected = [ok, ok, skip, skip, skip, ok, ok, *[skip] * 9, ok]
    assert [e["outcome"] for e in entries[:17]] == expected
    assert {e["reason"] for e in entries[:17] if e["outcome"] == skip} == {
        "previous scrape still running"
    }
    run = [e for e in entries if e["outcome"] != skip]
    assert not any(e["late"] for e in run)
    assert [e["tick"] for e in run[:5]] == [0, 1, 5, 6, 16]
    # Each scrape saw its own page (num_requests_running = request index = scrape index).
    running = series(read_samples(tmp_path), "num_requests_running")
    assert [v for _, v in running] == [float(e["scrape"]) for e in run]

    # The wait returned the first ok scrape that began after the last request: tick 16's.
    assert post == entries[16]["start_ns"]
    tokens = series(read_samples(tmp_path), "generation_tokens")
    # Phase window from 0 to after the wait: 0 → 50 tokens, and not stale.
    assert counter_delta(tokens, 0, end_ns) == 50.0
    assert not deltas_are_stale(ticks, last_end_ns, end_ns)
    # Had the phase ended 1 s after its last request without waiting, the 2.5 s scrape would
    # still be running: the delta would be 0 (wrong), and it is flagged stale.
    early_end = last_end_ns + 1 * S
    assert early_end < entries[6]["end_ns"]
    assert counter_delta(tokens, 0, early_end) == 0.0
    assert deltas_are_stale(ticks, last_end_ns, early_end)


@pytest.mark.asyncio
async def test_html_errors_nan_renames_and_resets_are_recorded(tmp_path: Path) -> None:
    script = [
        Answer(tokens=10),  # 0 ok
        Answer(nan=True, tokens=20),  # 1 ok, one NaN dropped
        Answer(kind="html"),  # 2 failed: a 200 without any recorded family
        Answer(nan=True, old_names=True, tokens=30),  # 3 ok, NaN, old KV name
        Answer(tokens=40),  # 4 ok, back to the new name
        Answer(nan=True, tokens=5),  # 5 ok, NaN, the counter went down: a restart
        Answer(kind="status", status=503),  # 6 failed
        Answer(tokens=8),  # 7 ok
    ]
    server = FakeMetricsServer(script, default=Answer(tokens=8))
    url = await server.start()
    scraper = ScraperProcess(url, tmp_path, interval_s=0.1)
    try:
        scraper.start()
        await server.wait_requests(len(script) + 1)
    finally:
        await asyncio.to_thread(scraper.stop)
        await server.stop()
    ticks = read_scrapes(tmp_path)
    assert tick_problems(ticks) == []
    entries = _as_written(ticks)
    run = [e for e in entries if e["outcome"] != "skipped"]
    by_scrape = {e["scrape"]: e for e in run}
    assert [by_scrape[i]["outcome"] for i in range(8)] == [
        "ok", "ok", "failed", "ok", "ok", "ok", "failed", "ok"
    ]  # fmt: skip
    html = by_scrape[2]["error"]
    assert "no recorded metric family" in html
    assert "text/html" in html and "<!doctype html>" in html
    assert "HTTPStatusError" in by_scrape[6]["error"] and "503" in by_scrape[6]["error"]
    # 5 samples per page (KV × 2 engines, running, tokens × 2 engines), minus the NaN.
    assert [by_scrape[i].get("nan_dropped") for i in range(8)] == [0, 1, None, 1, 0, 1, None, 0]
    assert [by_scrape[i].get("samples") for i in range(8)] == [5, 4, None, 4, 5, 4, None, 5]
    # Aliases on the first ok scrape and whenever they change (3: old name, 4: new again).
    assert by_scrape[0]["aliases"] == {
        "num_requests_running": "vllm:num_requests_running",
        "kv_cache_usage_perc": "vllm:kv_cache_usage_perc",
        "generation_tokens": "vllm:generation_tokens_total",
    }
    assert by_scrape[3]["aliases"]["kv_cache_usage_perc"] == "vllm:gpu_cache_usage_perc"
    assert by_scrape[4]["aliases"]["kv_cache_usage_perc"] == "vllm:kv_cache_usage_perc"
    assert [i for i in range(8) if "aliases" in by_scrape[i]] == [0, 3, 4]
    # 40 → 5 at scrape 5 is a reset, recorded there only.
    assert [i for i in range(8) if "resets" in by_scrape[i]] == [5]
    assert by_scrape[5]["resets"] == ["generation_tokens"]
    counts = count_ticks(ticks)
    assert counts.failed == 2 and counts.nan_dropped >= 3

    # No NaN in any file: samples.jsonl and scrapes.jsonl are strict JSON.
    lines = strict_json_lines(tmp_path / SAMPLES_FILE)
    strict_json_lines(tmp_path / "metrics" / "scrapes.jsonl")
    assert not any(line["scrape"] in (2, 6) for line in lines)
    samples = read_samples(tmp_path)
    # Per-engine KV peaks 0.6 and 0.7 (the NaN scrapes lost only engine 0's value).
    assert gauge_peak_by(samples, "kv_cache_usage_perc", 0, 2**62) == {"0": 0.6, "1": 0.7}
    kv0 = series(samples, "kv_cache_usage_perc", engine="0")
    assert len(kv0) == counts.ok - counts.nan_dropped
    # Tokens 10, 20, 30, 40 (+30), restart to 5 (+5), 8 (+3), 8 … = 38; one reset.
    tokens = series(samples, "generation_tokens")
    assert counter_delta(tokens, 0, 2**62) == 38.0
    assert counter_resets(tokens, 0, 2**62) == [by_scrape[5]["end_ns"]]


@pytest.mark.asyncio
async def test_a_broken_metrics_page_never_counts_as_a_first_or_post_phase_scrape(
    tmp_path: Path,
) -> None:
    server = FakeMetricsServer([], default=Answer(kind="html"))
    url = await server.start()
    scraper = ScraperProcess(url, tmp_path, interval_s=0.1)
    try:
        scraper.start()
        await server.wait_requests(1)
        assert not await asyncio.to_thread(scraper.wait_first_scrape, 0.5)
        assert scraper.latest_ok_start_ns() is None
        # Bounded: gives up after the timeout, with None (the phase is then flagged).
        assert await scraper.wait_scrape_started_at_or_after(0, timeout_s=0.3) is None
    finally:
        await asyncio.to_thread(scraper.stop)
        await server.stop()
    ticks = read_scrapes(tmp_path)
    assert tick_problems(ticks) == []
    entries = _as_written(ticks)
    assert {e["outcome"] for e in entries} <= {"failed", "skipped"}
    assert (tmp_path / SAMPLES_FILE).read_text() == ""


def test_interval_and_timeout_must_be_positive(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="scrape interval must be positive"):
        ScraperProcess("http://127.0.0.1:1", tmp_path, interval_s=0)
    with pytest.raises(ValueError, match="scrape timeout must be positive"):
        ScraperProcess("http://127.0.0.1:1", tmp_path, timeout_s=0)


def test_the_post_phase_wait_bound_covers_two_slow_scrapes(tmp_path: Path) -> None:
    # 2 × 5 s timeout + 2 × 0.25 s: a scrape in flight, then a whole one, with margin. With
    # every scrape taking 2.5 s a fresh one lands within 2.5 + 0.25 + 2.5 = 5.25 s.
    assert ScraperProcess("http://127.0.0.1:1", tmp_path).landing_bound_s == 10.5
