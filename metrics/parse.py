"""Exposition text → canonical samples of the recorded families, and which alias matched.

A full vLLM page is ~50 KB and took ~11 ms to parse whole with prometheus-client; lines of
other families (and every comment line: only sample names matter here) are dropped first with
a cheap string test, then prometheus-client's parser does the rest, so quoting and escaping
rules stay the library's. Non-finite values (``NaN``, ``±Inf``) are dropped and counted here,
so no file or statistic ever sees one.

A series (name and label set) may appear once per page: the exposition format says "each
line must have a unique combination of a metric name and labels"
(prometheus.io/docs/instrumenting/exposition_formats). A page that repeats one would
otherwise be summed per scrape time downstream, doubling a counter. The first occurrence is
kept and the repeats dropped and counted, as Prometheus' scrape loop does (it rejects later
samples of a series at the same timestamp and counts them in
``prometheus_target_scrapes_sample_duplicate_timestamp_total``).
"""

from __future__ import annotations

import math
from typing import NamedTuple

from prometheus_client.parser import text_string_to_metric_families

from metrics.names import FAMILIES, SAMPLE_NAMES, SampleName
from metrics.samples import Sample


class ParsedPage(NamedTuple):
    """One page, parsed.

    Attributes:
        samples: canonical samples of the recorded families (finite values only), each family
            read under its newest alias present on the page.
        aliases: canonical family → the raw name it matched, for every family on the page
            (in ``metrics.names.FAMILIES`` order). Empty: the page has no recorded family.
        nan_dropped: samples dropped because their value was NaN or ±Inf.
        negative_dropped: samples dropped because their value was below 0: every recorded
            family counts or measures something that cannot be (requests, a fraction of the
            cache, tokens, seconds), so a negative value is a broken exporter, never data.
        duplicates_dropped: samples dropped because their series (canonical name and label
            set) already appeared earlier on the page (the first is kept).
    """

    samples: list[Sample]
    aliases: dict[str, str]
    nan_dropped: int
    duplicates_dropped: int = 0
    negative_dropped: int = 0


def _sample_name(line: str) -> str:
    return line.split("{", 1)[0].split(" ", 1)[0]


def filter_families(text: str) -> str:
    """The sample lines of ``text`` that belong to recorded families (no comment lines)."""
    kept = (
        line
        for line in text.splitlines()
        if not line.startswith("#") and _sample_name(line) in SAMPLE_NAMES
    )
    return "\n".join(kept) + "\n"


def parse_page(text: str, t_ns: int) -> ParsedPage:
    """Parse exposition ``text`` scraped at ``t_ns`` (see ``ParsedPage``).

    Every label is kept (``engine`` included, histogram buckets' ``le`` as written, e.g.
    ``"0.05"``, ``"+Inf"``); labels are sorted. Where a page carries several aliases of one
    family (a deprecated name beside its replacement), only the newest is read; a series
    repeated on the page is read once (its first line; see the module docstring).

    Raises:
        ValueError: a recorded family's line is not valid Prometheus exposition format.
    """
    found: list[tuple[SampleName, dict[str, str], float]] = []
    best_rank: dict[str, int] = {}
    for family in text_string_to_metric_families(filter_families(text)):
        for s in family.samples:
            meaning = SAMPLE_NAMES.get(s.name)
            if meaning is None:
                continue
            found.append((meaning, s.labels, float(s.value)))
            rank = best_rank.get(meaning.canonical)
            if rank is None or meaning.rank < rank:
                best_rank[meaning.canonical] = meaning.rank
    samples: list[Sample] = []
    nan_dropped = duplicates = negative = 0
    seen: set[tuple[str, tuple[tuple[str, str], ...]]] = set()
    for meaning, labels, value in found:
        if meaning.rank != best_rank[meaning.canonical]:
            continue  # an older alias of a family that is also here under a newer name
        key = (meaning.sample_name, tuple(sorted(labels.items())))
        if key in seen:
            duplicates += 1  # a repeated series: the first occurrence stands
            continue
        seen.add(key)
        if not math.isfinite(value):
            nan_dropped += 1
            continue
        if value < 0:
            negative += 1
            continue
        samples.append(Sample(t_ns, key[0], key[1], value))
    aliases = {
        canonical: FAMILIES[canonical].raw_names[best_rank[canonical]]
        for canonical in FAMILIES
        if canonical in best_rank
    }
    return ParsedPage(samples, aliases, nan_dropped, duplicates, negative)


def parse_samples(text: str, t_ns: int) -> list[Sample]:
    """The canonical samples of ``parse_page(text, t_ns)``.

    Raises:
        ValueError: as ``parse_page``.
    """
    return parse_page(text, t_ns).samples
