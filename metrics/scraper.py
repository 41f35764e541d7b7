"""The 250 ms ``/metrics`` scraper, run in its own process, accounting for every tick.

Fetching, compressing and parsing a ~50 KB page every 250 ms would stall an event loop that
timestamps tokens, so the scraper runs in a child process with its own loop; the load
generator's loop only starts it, stops it and reads the start time of its latest successful
scrape (shared memory). Ticks are on absolute deadlines (start + k·interval). When a scrape
outlasts an interval, every deadline that passed more than half an interval before it ended
is *skipped* (recorded, not run, not bunched); the first deadline that passed less than that
ago runs at once. A tick that starts more than half an interval after its deadline is *late*.

``metrics/scrapes.jsonl`` has exactly one line per tick 0…N (``metrics.rows.ScrapeTick``),
in order, each with ``tick``,
``deadline_ns`` (monotonic) and ``outcome``:

- ``"ok"`` and ``"failed"`` (run ticks) add ``scrape`` (running index of attempted scrapes,
  the index in ``samples.jsonl`` and ``raw.jsonl.gz``), ``start_ns``, ``end_ns`` (response
  received; the samples' ``t_ns``) and ``late``. ``ok`` adds ``bytes`` (body size),
  ``samples`` (written), ``nan_dropped`` (NaN/±Inf values dropped), ``negative_dropped``
  (values below 0), ``duplicates_dropped`` (samples of a series the page repeated, first
  kept; ``metrics.parse``); the first ok scrape, and
  every one whose matched aliases differ from the previous ok scrape's, adds
  ``aliases`` ({canonical: raw name matched}) and ``missing`` (recorded families absent); an
  ok scrape on which a counter or histogram series went down adds ``resets`` (canonical
  families, sorted). ``failed`` adds ``error``: an HTTP or transport error, a timeout, text
  that is not exposition format, a 200 answer with no recorded family (HTML, another app), or
  an answer larger than the size limit (``"answer larger than 4194304 bytes"``; it also adds
  ``too_large``: true).
- ``"skipped"`` adds ``reason``: ``"previous scrape still running"`` or ``"scraper started
  the previous tick late"`` (its process was not scheduled in time).

Every scrape's raw text (ok ones), its samples and its index line are appended and flushed
as it completes; no file ever holds a NaN.

Size bound: one answer may hold at most ``max_bytes`` bytes of body (default
``server.net.limits.METRICS_MAX_BYTES``, 4 MiB; ``loadgen run --metrics-max-bytes``). The body
is read in chunks and the read stops at the first chunk that passes the limit, so the
scraper never holds more than the limit plus one network chunk; a page over it is a failed
scrape (never kept in ``raw.jsonl.gz``, so each raw row holds at most ``max_bytes`` bytes).

Write errors: a file of ``metrics/`` that cannot be written (disk full, permission) ends the
scraper with one line naming the file and the error, the run's one write error
(``server.net.jsonl``: ``metrics scraper: cannot write PATH: No space left on device
(ENOSPC)``, ``ScraperProcess.failure``), exit code 1 and no traceback; the load generator
reports that line as the case's failure.
"""

from __future__ import annotations

import asyncio
import contextlib
import multiprocessing as mp
import os
import sys
import time
from collections.abc import Iterable, Iterator
from multiprocessing.sharedctypes import Synchronized, SynchronizedString
from multiprocessing.synchronize import Event
from pathlib import Path
from typing import NamedTuple

import httpx
import msgspec

from metrics.names import FAMILIES, FAMILY_OF_SAMPLE
from metrics.parse import ParsedPage, parse_page
from metrics.rows import RawScrape, ScrapeTick
from metrics.samples import Sample
from metrics.store import RAW_FILE, SAMPLES_FILE, SCRAPES_FILE, sample_to_json
from server.group_signals import blocked_while_spawning, leave_stop_to_parent
from server.net.errors import describe_exception
from server.net.exit_codes import ScraperExit
from server.net.http import AnswerTooLarge, read_bounded
from server.net.jsonl import JsonlAppender, RunWriteError
from server.net.limits import METRICS_MAX_BYTES
from server.net.loop import run_event_loop

#: Longest one scrape may take before it is abandoned as failed (whole request, seconds).
#: vLLM's API server shares a core with the load generator here, so under load an answer may
#: take seconds (scrapes of 1–2.5 s are what the tests replay); a slow answer's values are
#: still good, so the bound sits well above that.
SCRAPE_TIMEOUT_S = 5.0


class _ResetTracker:
    """Last value of every counter-like series; reports the families that went down."""

    def __init__(self) -> None:
        self._last: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}

    def update(self, samples: Iterable[Sample]) -> list[str]:
        reset: set[str] = set()
        for s in samples:
            family = FAMILY_OF_SAMPLE.get(s.name)
            if family is None or FAMILIES[family].type == "gauge":
                continue
            key = (s.name, s.labels)
            previous = self._last.get(key)
            if previous is not None and s.value < previous:
                reset.add(family)
            self._last[key] = s.value
        return sorted(reset)


class _NoRecordedFamily(ValueError):
    """A page that parsed but holds none of the recorded families."""


class _Page(NamedTuple):
    """One answer read within the size limit: status, headers and the whole body."""

    status_code: int
    headers: httpx.Headers
    content: bytes
    text: str


async def _fetch(client: httpx.AsyncClient, url: str, timeout_s: float, max_bytes: int) -> _Page:
    try:
        async with asyncio.timeout(timeout_s):
            async with client.stream("GET", f"{url}/metrics") as response:
                response.raise_for_status()
                body = await read_bounded(response, max_bytes)
    except TimeoutError:
        raise TimeoutError(f"no complete answer within {timeout_s:g} s") from None
    text = body.decode(response.encoding or "utf-8", errors="replace")
    return _Page(response.status_code, response.headers, body, text)


def _parse(response: _Page, t_ns: int) -> ParsedPage:
    page = parse_page(response.text, t_ns)
    if not page.aliases:
        head = response.content[:80]
        raise _NoRecordedFamily(
            f"HTTP {response.status_code} answer has no recorded metric family "
            f"(content-type {response.headers.get('content-type')!r}, "
            f"{len(response.content)} bytes, starts {head!r})"
        )
    return page


class _Files:
    """The three append-only files of one case (``server.net.jsonl``), flushed per scrape.

    Raises (every method):
        RunWriteError: a write or flush failed (disk full, permission, I/O error).
    """

    def __init__(self, samples: JsonlAppender, scrapes: JsonlAppender, raw: JsonlAppender) -> None:
        self.samples, self.scrapes, self.raw = samples, scrapes, raw

    def tick(self, entry: ScrapeTick) -> None:
        self.scrapes.write(msgspec.json.encode(entry) + b"\n")

    def page(self, scrape: int, t_ns: int, text: str, samples: list[Sample]) -> None:
        self.raw.write(msgspec.json.encode(RawScrape(scrape=scrape, t_ns=t_ns, text=text)) + b"\n")
        lines = "".join(sample_to_json(s, scrape, strict=True) + "\n" for s in samples)
        self.samples.write(lines.encode())


async def _scrape_loop(
    url: str,
    case_dir: Path,
    interval_s: float,
    timeout_s: float,
    max_bytes: int,
    stop: Event,
    parent: int,
    last_ok_start_ns: Synchronized[int],
) -> None:
    interval_ns = int(interval_s * 1e9)
    half_ns = interval_ns // 2
    resets = _ResetTracker()
    previous_aliases: dict[str, str] | None = None
    with _open_files(case_dir) as files:
        async with httpx.AsyncClient(timeout=timeout_s) as client:
            start_ns = time.monotonic_ns()
            tick = 0
            scrape = 0
            while not stop.is_set() and os.getppid() == parent:
                deadline = start_ns + tick * interval_ns
                # Sleep again if woken early: the loop's timers count from its cached time,
                # which lags by however long the last scrape's parsing held the loop.
                while (delay := deadline - time.monotonic_ns()) > 0:
                    await asyncio.sleep(delay / 1e9)
                began = time.monotonic_ns()
                entry = ScrapeTick(
                    tick=tick,
                    deadline_ns=deadline,
                    outcome="failed",
                    scrape=scrape,
                    start_ns=began,
                    late=began - deadline > half_ns,
                )
                try:
                    response = await _fetch(client, url, timeout_s, max_bytes)
                    entry.end_ns = ended = time.monotonic_ns()
                    page = _parse(response, ended)
                except Exception as exc:  # every failure is data: recorded, loop goes on
                    entry.end_ns = entry.end_ns or time.monotonic_ns()
                    if isinstance(exc, AnswerTooLarge):
                        entry.error, entry.too_large = str(exc), True
                    else:
                        entry.error = describe_exception(exc)
                    files.tick(entry)
                else:
                    files.page(scrape, ended, response.text, page.samples)
                    entry.outcome = "ok"
                    entry.bytes = len(response.content)
                    entry.samples = len(page.samples)
                    entry.nan_dropped = page.nan_dropped
                    entry.negative_dropped = page.negative_dropped or None
                    entry.duplicates_dropped = page.duplicates_dropped
                    if page.aliases != previous_aliases:
                        entry.aliases = page.aliases
                        entry.missing = [c for c in FAMILIES if c not in page.aliases]
                        previous_aliases = page.aliases
                    went_down = resets.update(page.samples)
                    if went_down:
                        entry.resets = went_down
                    files.tick(entry)
                    last_ok_start_ns.value = began  # after the flush: it is on disk
                scrape += 1
                # Deadlines that passed more than half an interval ago are skipped.
                now = time.monotonic_ns()
                tick += 1
                while start_ns + tick * interval_ns < now - half_ns:
                    passed = start_ns + tick * interval_ns
                    reason = (
                        "previous scrape still running"
                        if passed >= began
                        else "scraper started the previous tick late"
                    )
                    files.tick(
                        ScrapeTick(tick=tick, deadline_ns=passed, outcome="skipped", reason=reason)
                    )
                    tick += 1


@contextlib.contextmanager
def _open_files(case_dir: Path) -> Iterator[_Files]:
    """The case's three files opened for appending, closed (the gzip stream finished) after.

    Raises:
        RunWriteError: a file could not be created, written or closed (the first failure is
            the one named: closing after it may fail again on the same bytes).
    """
    with (
        JsonlAppender(case_dir / SAMPLES_FILE) as samples,
        JsonlAppender(case_dir / SCRAPES_FILE) as scrapes,
        JsonlAppender(case_dir / RAW_FILE, gzip_level=3) as raw,
    ):
        yield _Files(samples, scrapes, raw)


#: Room for the one line a failed scraper leaves its parent (bytes, UTF-8, cut to fit).
_FAILURE_BYTES = 1024


def _child_main(
    url: str,
    case_dir: str,
    interval_s: float,
    timeout_s: float,
    max_bytes: int,
    stop: Event,
    parent: int,
    last_ok_start_ns: Synchronized[int],
    failure: SynchronizedString,
) -> None:
    # A signal to the group must not cut the gzip stream short: the parent stops this
    # process (``ScraperProcess.stop``) in order; if the parent dies, ``_scrape_loop`` sees it.
    leave_stop_to_parent()
    try:
        loop = _scrape_loop(
            url, Path(case_dir), interval_s, timeout_s, max_bytes, stop, parent, last_ok_start_ns
        )
        run_event_loop(loop)
    except RunWriteError as exc:
        # One line for the parent to report (ScraperProcess.failure), exit 1, no traceback.
        failure.value = f"metrics scraper: {exc}".encode()[: _FAILURE_BYTES - 1]
        sys.exit(ScraperExit.WRITE_FAILED)


class ScraperProcess:
    """Scrapes ``url``/metrics every ``interval_s`` seconds into ``case_dir/metrics/``, each
    answer limited to ``max_bytes`` bytes of body.

    Usage: ``with ScraperProcess(url, case_dir):`` around the whole case. Stopping finishes
    the scrape in progress, closes the gzip stream properly and joins the process.

    Raises:
        ValueError: ``interval_s``, ``timeout_s`` or ``max_bytes`` is not positive.
    """

    def __init__(
        self,
        url: str,
        case_dir: Path,
        interval_s: float = 0.25,
        timeout_s: float = SCRAPE_TIMEOUT_S,
        max_bytes: int = METRICS_MAX_BYTES,
    ) -> None:
        if interval_s <= 0:
            raise ValueError(f"scrape interval must be positive, got {interval_s}")
        if timeout_s <= 0:
            raise ValueError(f"scrape timeout must be positive, got {timeout_s}")
        if max_bytes <= 0:
            raise ValueError(f"/metrics size limit must be positive, got {max_bytes}")
        self.url = url.rstrip("/")
        self.case_dir = case_dir
        self.interval_s = interval_s
        self.timeout_s = timeout_s
        self.max_bytes = max_bytes
        ctx = mp.get_context("spawn")
        self._stop = ctx.Event()
        self._last_ok_start_ns: Synchronized[int] = ctx.Value("q", -1)
        self._failure: SynchronizedString = ctx.Array("c", _FAILURE_BYTES)  # type: ignore[assignment]
        self._proc = ctx.Process(
            target=_child_main,
            args=(
                self.url,
                str(case_dir),
                interval_s,
                timeout_s,
                max_bytes,
                self._stop,
                os.getpid(),
                self._last_ok_start_ns,
                self._failure,
            ),
            name="metrics-scraper",
            daemon=True,
        )

    @property
    def landing_bound_s(self) -> float:
        """Longest a working scraper can take to land a scrape that starts after a given time.

        A scrape in flight at that time may run ``timeout_s``; the next tick starts within an
        interval; it may run ``timeout_s`` too; one more interval of margin. 10.5 s at the
        defaults, 5.25 s when every scrape takes 2.5 s; a wait longer than this means the
        scrapes are failing, not slow.
        """
        return 2 * self.timeout_s + 2 * self.interval_s

    def start(self) -> None:
        """Start the scraper process (it ignores Ctrl-C and SIGTERM: ``stop`` ends it, after
        which its files are closed and whole)."""
        with blocked_while_spawning():
            self._proc.start()

    @property
    def pid(self) -> int | None:
        """The scraper process's pid once started, else ``None``."""
        return self._proc.pid

    @property
    def exitcode(self) -> int | None:
        """The scraper process's exit code once it ended (1 after a write error), else ``None``."""
        return self._proc.exitcode

    @property
    def failure(self) -> str | None:
        """The one line a scraper that ended on a write error left (file and error), else
        ``None`` (running, stopped normally, or not started)."""
        raw = bytes(self._failure.value)
        return raw.decode("utf-8", errors="replace") if raw else None

    def latest_ok_start_ns(self) -> int | None:
        """Start time (monotonic ns) of the latest successful scrape, once it is on disk."""
        value = int(self._last_ok_start_ns.value)
        return value if value >= 0 else None

    def wait_first_scrape(self, timeout_s: float = 30.0) -> bool:
        """Block until one scrape has succeeded (samples on disk); False on timeout or exit."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.latest_ok_start_ns() is not None:
                return True
            if not self._proc.is_alive():
                return False
            time.sleep(0.05)
        return self.latest_ok_start_ns() is not None

    async def wait_scrape_started_at_or_after(
        self, t_ns: int, timeout_s: float, poll_s: float = 0.02
    ) -> int | None:
        """Wait until a successful scrape that *started* at or after ``t_ns`` (monotonic) is on
        disk; its start time, or ``None`` after ``timeout_s`` seconds (or if the scraper died).
        """
        deadline = time.monotonic_ns() + int(timeout_s * 1e9)
        while True:
            latest = self.latest_ok_start_ns()
            if latest is not None and latest >= t_ns:
                return latest
            if time.monotonic_ns() >= deadline or not self._proc.is_alive():
                return None
            await asyncio.sleep(poll_s)

    def stop(self, timeout_s: float | None = None) -> None:
        """Stop after the scrape in progress; terminate if it has not ended in time."""
        self._stop.set()
        self._proc.join(timeout_s if timeout_s is not None else self.timeout_s + 5.0)
        if self._proc.is_alive():
            self._proc.kill()  # it ignores SIGTERM (leave_stop_to_parent)
            self._proc.join(5)

    def __enter__(self) -> ScraperProcess:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
