"""The scraper's input bound and its own write errors (``metrics.scraper``).

A ``/metrics`` answer longer than the size limit is a failed scrape with the reason, its page
never kept; a file the scraper cannot write ends it with one line naming the file and the
error, no traceback. Every test runs the real spawned scraper against the fake endpoint
(``tests.support.fake_metrics_server``), whose pages are known byte for byte.
"""

from __future__ import annotations

import asyncio
import gzip
from pathlib import Path

import pytest

from loadgen.runformat.metric_files import iter_raw, read_scrapes
from metrics.rows import ScrapeTick
from metrics.scraper import ScraperProcess
from metrics.store import RAW_FILE, SAMPLES_FILE
from metrics.ticks import count_ticks, size_drop_warning, size_drops, tick_problems
from server.net.limits import METRICS_MAX_BYTES
from tests.support.fake_metrics_server import Answer, FakeMetricsServer

pytestmark = pytest.mark.timeout(60)

FIFTY_MB = 50_000_000


def test_the_default_limit_is_four_mebibytes() -> None:
    # 4 × 2**20 = 4 × 1,048,576 = 4,194,304 bytes.
    assert METRICS_MAX_BYTES == 4_194_304
    assert ScraperProcess("http://127.0.0.1:1", Path("/nonexistent")).max_bytes == 4_194_304


def test_the_limit_must_be_positive(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="size limit must be positive"):
        ScraperProcess("http://127.0.0.1:1", tmp_path, max_bytes=0)


@pytest.mark.asyncio
async def test_fifty_megabyte_pages_are_failed_scrapes_and_never_kept(tmp_path: Path) -> None:
    script = [
        Answer(),  # scrape 0: ok (the small page)
        Answer(size=FIFTY_MB),  # 1: failed, too large
        Answer(size=FIFTY_MB),  # 2: failed, too large
        Answer(),  # 3: ok
    ]
    server = FakeMetricsServer(script, default=Answer())
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
    by_scrape = {t.scrape: t for t in ticks if t.outcome != "skipped"}
    assert [by_scrape[i].outcome for i in range(4)] == ["ok", "failed", "failed", "ok"]
    for i in (1, 2):
        assert by_scrape[i].error == "answer larger than 4194304 bytes"
        assert by_scrape[i].too_large is True
    assert by_scrape[0].too_large is None and by_scrape[3].too_large is None
    counts = count_ticks(ticks)
    assert counts.failed == 2  # counted like every other failed scrape
    assert size_drops(ticks) == 2
    # raw.jsonl.gz keeps the ok scrapes only, each the small page as served: scrape i's page
    # is FakeMetricsServer.page(i) (num_requests_running = i).
    page = FakeMetricsServer([]).page
    raw = list(iter_raw(tmp_path))
    ok = [t.scrape for t in ticks if t.outcome == "ok"]
    assert [r.scrape for r in raw] == ok
    assert all(r.text == page(r.scrape, Answer()) for r in raw)
    # Bound (by hand): each raw row holds ≤ 4,194,304 bytes of text, and a small page is
    # ~400 bytes, so the uncompressed file is ≤ ok × (page + 100 bytes of JSON framing);
    # without the limit two 50 MB pages would have been kept.
    uncompressed = len(gzip.decompress((tmp_path / RAW_FILE).read_bytes()))
    assert uncompressed <= len(ok) * (len(page(len(ok), Answer())) + 100)


@pytest.mark.asyncio
async def test_a_page_of_exactly_the_limit_is_kept_one_byte_more_fails(tmp_path: Path) -> None:
    limit = 65_536
    script = [Answer(size=limit), Answer(size=limit + 1), Answer(size=limit)]
    server = FakeMetricsServer(script, default=Answer())
    url = await server.start()
    scraper = ScraperProcess(url, tmp_path, interval_s=0.1, max_bytes=limit)
    try:
        scraper.start()
        await server.wait_requests(len(script))
    finally:
        await asyncio.to_thread(scraper.stop)
        await server.stop()
    by_scrape = {t.scrape: t for t in read_scrapes(tmp_path) if t.outcome != "skipped"}
    assert [by_scrape[i].outcome for i in range(3)] == ["ok", "failed", "ok"]
    assert by_scrape[0].bytes == limit and by_scrape[2].bytes == limit
    assert by_scrape[1].error == "answer larger than 65536 bytes"
    assert max(len(r.text.encode()) for r in iter_raw(tmp_path)) == limit


@pytest.mark.asyncio
async def test_a_full_disk_ends_the_scraper_with_one_line_naming_the_file(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    # /dev/full accepts the open and fails every write with ENOSPC: a disk that is full.
    (tmp_path / "metrics").mkdir()
    (tmp_path / SAMPLES_FILE).symlink_to("/dev/full")
    server = FakeMetricsServer([], default=Answer())
    url = await server.start()
    scraper = ScraperProcess(url, tmp_path, interval_s=0.1)
    try:
        scraper.start()
        assert not await asyncio.to_thread(scraper.wait_first_scrape, 20.0)
    finally:
        await asyncio.to_thread(scraper.stop)
        await server.stop()
    line = (
        f"metrics scraper: cannot write {tmp_path}/{SAMPLES_FILE}: No space left on device (ENOSPC)"
    )
    assert scraper.failure == line
    assert scraper.exitcode == 1
    assert capfd.readouterr().err == ""  # no traceback: the parent reports the line


def test_size_drops_warn_the_reader() -> None:
    ticks = [
        ScrapeTick(tick=0, deadline_ns=0, outcome="ok", scrape=0),
        ScrapeTick(tick=1, deadline_ns=1, outcome="failed", scrape=1, too_large=True,
                   error="answer larger than 4194304 bytes"),
        ScrapeTick(tick=2, deadline_ns=2, outcome="failed", scrape=2, error="HTTP 503"),
        ScrapeTick(tick=3, deadline_ns=3, outcome="failed", scrape=3, too_large=True,
                   error="answer larger than 4194304 bytes"),
    ]  # fmt: skip
    # Ticks 1 and 3 were too large; tick 2's 503 is another failure.
    assert size_drops(ticks) == 2
    warning = size_drop_warning(ticks)
    assert warning is not None and warning.startswith("2 /metrics answer(s) larger than")
    assert size_drop_warning(ticks[:1] + ticks[2:3]) is None
