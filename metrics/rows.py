"""The rows the scraper writes into a case directory, as types: one metric sample per line of
``metrics/samples.jsonl`` and one scrape tick per line of ``metrics/scrapes.jsonl``.

Defined here, not in the run-format package, because ``metrics`` imports no other project
package; ``loadgen.runformat`` re-exports them for every reader. Encoded with msgspec
(``msgspec.json.encode``); read back with ``msgspec.convert(..., strict=True)``.
"""

from __future__ import annotations

from typing import Literal

import msgspec

TickOutcome = Literal["ok", "failed", "skipped"]


class SampleRow(msgspec.Struct, kw_only=True):
    """One line of ``metrics/samples.jsonl``: one canonical sample of one scrape.

    Attributes:
        t_ns: when the scrape's response was received (monotonic ns).
        scrape: index of the scrape (the ``scrape`` of its tick in ``scrapes.jsonl``).
        name: canonical sample name (``metrics.names``), e.g. ``prefix_cache_hits_total``.
        labels: the sample's labels (the model name among them).
        value: the sample's value (a count, a fraction 0–1, seconds for histogram sums);
            finite: the scraper drops NaN and ±Inf before writing.
    """

    t_ns: int
    scrape: int
    name: str
    labels: dict[str, str] = {}
    value: float


class ScrapeTick(msgspec.Struct, kw_only=True, omit_defaults=True):
    """One line of ``metrics/scrapes.jsonl``: one tick of the scraper, every tick 0…N present
    (meaning of each outcome in ``metrics.scraper``). Fields a tick does not have are left out
    of its line.

    Attributes:
        tick: tick number (0, 1, …), one line each, in order.
        deadline_ns: when the tick was due (scraper start + tick × interval, monotonic ns).
        outcome: ``ok`` or ``failed`` (a scrape ran), ``skipped`` (its deadline passed while
            the previous one ran, or the scraper started late).
        scrape: running index of attempted scrapes (the index in ``samples.jsonl`` and
            ``raw.jsonl.gz``); run ticks only.
        start_ns / end_ns: request sent / response received (monotonic ns); run ticks only.
        late: started more than half an interval after its deadline; run ticks only.
        bytes: body size in bytes (ok).
        samples: samples written (ok).
        nan_dropped: NaN/±Inf values dropped (ok).
        negative_dropped: values below 0 dropped (ok; none of the recorded families can be).
        duplicates_dropped: samples of a series the page repeated, the first kept (ok).
        aliases: {canonical family: raw name matched}; on the first ok scrape and each one
            whose matches differ from the previous ok scrape's.
        missing: recorded families absent from the page (with ``aliases``).
        resets: canonical families with a series that went down on this scrape (sorted).
        error: why a failed scrape failed.
        too_large: the answer passed the scraper's size limit (failed; its page is not kept).
        reason: why a tick was skipped.
    """

    tick: int
    deadline_ns: int
    outcome: TickOutcome
    scrape: int | None = None
    start_ns: int | None = None
    end_ns: int | None = None
    late: bool | None = None
    bytes: int | None = None
    samples: int | None = None
    nan_dropped: int | None = None
    negative_dropped: int | None = None
    duplicates_dropped: int | None = None
    aliases: dict[str, str] | None = None
    missing: list[str] | None = None
    resets: list[str] | None = None
    error: str | None = None
    too_large: bool | None = None
    reason: str | None = None


class RawScrape(msgspec.Struct, kw_only=True):
    """One line of ``metrics/raw.jsonl.gz``: the exposition text of one ok scrape, as received
    (at most the scraper's size limit, 4 MiB by default: a larger answer failed).

    Attributes:
        scrape: the scrape's index (as in ``scrapes.jsonl``).
        t_ns: response received (monotonic ns).
        text: the page.
    """

    scrape: int
    t_ns: int
    text: str
