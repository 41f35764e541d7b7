"""The 250 ms ``/metrics`` scraper, run in its own process.

Fetching, compressing and parsing a ~50 KB page every 250 ms would stall an event loop that
timestamps tokens (parsing alone took ~18 ms here), so the scraper runs in a child process
with its own loop; the load generator's loop only starts and stops it. Ticks are on absolute
deadlines (start + k·interval); a tick that starts more than half an interval late is counted
late, and missed deadlines are skipped, not bunched. Every scrape's raw text, its samples and
its timing are appended and flushed as it completes.
"""

from __future__ import annotations

import asyncio
import gzip
import json
import multiprocessing as mp
import os
import time
from multiprocessing.synchronize import Event
from pathlib import Path

import httpx

from metrics.parse import parse_samples
from metrics.store import RAW_FILE, SAMPLES_FILE, SCRAPES_FILE, sample_to_json


async def _scrape_loop(
    url: str, case_dir: Path, interval_s: float, stop: Event, parent: int
) -> None:
    interval_ns = int(interval_s * 1e9)
    (case_dir / "metrics").mkdir(parents=True, exist_ok=True)
    with (
        open(case_dir / SAMPLES_FILE, "a", encoding="utf-8") as samples_fh,
        open(case_dir / SCRAPES_FILE, "a", encoding="utf-8") as scrapes_fh,
        gzip.open(case_dir / RAW_FILE, "at", encoding="utf-8", compresslevel=3) as raw_fh,
    ):
        client = httpx.AsyncClient(timeout=max(2.0, interval_s * 4))
        start_ns = time.monotonic_ns()
        tick = 0
        scrape = 0
        while not stop.is_set() and os.getppid() == parent:
            deadline = start_ns + tick * interval_ns
            delay = deadline - time.monotonic_ns()
            if delay > 0:
                await asyncio.sleep(delay / 1e9)
            began = time.monotonic_ns()
            late_ns = began - deadline
            entry: dict[str, object] = {
                "scrape": scrape,
                "tick": tick,
                "deadline_ns": deadline,
                "start_ns": began,
                "late": late_ns > interval_ns // 2,
            }
            try:
                response = await client.get(f"{url}/metrics")
                ended = time.monotonic_ns()
                response.raise_for_status()
                text = response.text
                samples = parse_samples(text, ended)
                raw_fh.write(json.dumps({"scrape": scrape, "t_ns": ended, "text": text}) + "\n")
                raw_fh.flush()
                samples_fh.write("".join(sample_to_json(s, scrape) + "\n" for s in samples))
                samples_fh.flush()
                entry.update(end_ns=ended, ok=True, bytes=len(text), samples=len(samples))
            except (httpx.HTTPError, ValueError) as exc:
                entry.update(
                    end_ns=time.monotonic_ns(), ok=False, error=f"{type(exc).__name__}: {exc}"
                )
            scrapes_fh.write(json.dumps(entry) + "\n")
            scrapes_fh.flush()
            scrape += 1
            # Next deadline strictly in the future: missed ticks are skipped, not bunched.
            now = time.monotonic_ns()
            tick = max(tick + 1, (now - start_ns) // interval_ns + 1)
        await client.aclose()


def _child_main(url: str, case_dir: str, interval_s: float, stop: Event, parent: int) -> None:
    try:
        import uvloop

        uvloop.install()
    except ImportError:  # pragma: no cover - uvloop is a dependency; plain asyncio works too
        pass
    asyncio.run(_scrape_loop(url, Path(case_dir), interval_s, stop, parent))


class ScraperProcess:
    """Scrapes ``url``/metrics every ``interval_s`` seconds into ``case_dir/metrics/``.

    Usage: ``with ScraperProcess(url, case_dir):`` around the whole case. Stopping finishes
    the scrape in progress, closes the gzip stream properly and joins the process.
    """

    def __init__(self, url: str, case_dir: Path, interval_s: float = 0.25) -> None:
        if interval_s <= 0:
            raise ValueError(f"scrape interval must be positive, got {interval_s}")
        self.url = url.rstrip("/")
        self.case_dir = case_dir
        self.interval_s = interval_s
        ctx = mp.get_context("spawn")
        self._stop = ctx.Event()
        self._proc = ctx.Process(
            target=_child_main,
            args=(self.url, str(case_dir), interval_s, self._stop, os.getpid()),
            name="metrics-scraper",
            daemon=True,
        )

    def start(self) -> None:
        self._proc.start()

    def wait_first_scrape(self, timeout_s: float = 30.0) -> bool:
        """Block until the scrape index has a line (the scraper is recording), or time out."""
        path = self.case_dir / SCRAPES_FILE
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if path.exists() and path.stat().st_size > 0:
                return True
            if not self._proc.is_alive():
                return False
            time.sleep(0.05)
        return False

    def stop(self, timeout_s: float = 10.0) -> None:
        self._stop.set()
        self._proc.join(timeout_s)
        if self._proc.is_alive():
            self._proc.terminate()
            self._proc.join(5)

    def __enter__(self) -> ScraperProcess:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
