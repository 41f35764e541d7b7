"""Exposition text → canonical samples, parsing only the families this project records.

A full vLLM page is ~50 KB and took ~18 ms to parse with prometheus-client; lines of other
families are dropped first (a cheap string test), then prometheus-client's parser does the
rest, so quoting and escaping rules stay the library's.
"""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

from metrics.names import CANONICAL_BY_SAMPLE
from metrics.samples import Sample

_WANTED_FAMILIES = {raw.removesuffix("_total") for raw in CANONICAL_BY_SAMPLE} | set(
    CANONICAL_BY_SAMPLE
)


def _keep(line: str) -> bool:
    if line.startswith("#"):
        parts = line.split(" ", 3)
        return len(parts) >= 3 and parts[1] in ("TYPE", "HELP") and parts[2] in _WANTED_FAMILIES
    name = line.split("{", 1)[0].split(" ", 1)[0]
    return name in CANONICAL_BY_SAMPLE


def filter_families(text: str) -> str:
    """The lines of ``text`` that belong to recorded families (plus their TYPE/HELP lines)."""
    return "\n".join(line for line in text.splitlines() if _keep(line)) + "\n"


def parse_samples(text: str, t_ns: int) -> list[Sample]:
    """Canonical samples of the recorded families in exposition ``text``, stamped ``t_ns``.

    Raises:
        ValueError: the text is not valid Prometheus exposition format.
    """
    out: list[Sample] = []
    for family in text_string_to_metric_families(filter_families(text)):
        for s in family.samples:
            canonical = CANONICAL_BY_SAMPLE.get(s.name)
            if canonical is None:
                continue
            labels = tuple(sorted((k, v) for k, v in s.labels.items() if k != "engine"))
            out.append(Sample(t_ns, canonical, labels, float(s.value)))
    return out
