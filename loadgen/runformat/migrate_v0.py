"""The one migration: reading a version-0 run (written before ``run.json`` recorded
``format_version``) as version 1.

Version 1 is version 0 with the version recorded, so a run written by the last version-0 code
needs nothing; what this module holds is every difference older version-0 writers had, and it
is the only code that knows them. The run's files are never rewritten: rows are upgraded as
they are read, before they are checked against the version-1 types.

- ``plan.json``: fields the plan no longer has (report-only settings ``probe_phases``,
  ``compare_phases``) are dropped (:func:`plan`).
- ``metrics/scrapes.jsonl``: a line with ``ok`` (true/false) instead of ``outcome``, and no
  ``tick``/``deadline_ns`` (scrapers before per-tick accounting, which listed only the ticks
  they ran), gets ``outcome`` ``ok``/``failed``, its line's position as ``tick`` and its start
  as ``deadline_ns`` (:func:`scrape`); such a run's scrape index does not list skipped ticks,
  and readers say so (:func:`scrape_index_predates_ticks`).
- ``gateway_events.jsonl`` did not exist: the gateway's breaker transitions are read from its
  log lines in ``gateway.log`` (:func:`transitions_from_log`).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from gateway.events import GatewayEvent

#: The version this module reads.
FROM_VERSION = 0

#: Plan fields that version-0 runs wrote and the plan no longer has.
_DROPPED_PLAN_FIELDS = ("probe_phases", "compare_phases")


def plan(data: dict[str, Any]) -> dict[str, Any]:
    """``plan.json`` of a version-0 run, as a version-1 plan (fields since removed dropped)."""
    return {k: v for k, v in data.items() if k not in _DROPPED_PLAN_FIELDS}


def scrape(row: dict[str, Any], line_index: int) -> dict[str, Any]:
    """A ``scrapes.jsonl`` line of a version-0 run as a version-1 scrape tick: a line from
    before tick accounting gets ``outcome`` from its ``ok``, ``tick`` = ``line_index`` (its
    0-based position among the file's objects) and ``deadline_ns`` = its ``start_ns``."""
    if "outcome" in row:
        return row
    out = {k: v for k, v in row.items() if k != "ok"}
    out["outcome"] = "ok" if row.get("ok") else "failed"
    out.setdefault("tick", line_index)
    out.setdefault("deadline_ns", row.get("start_ns"))
    return out


def scrape_index_predates_ticks(rows: list[dict[str, Any]]) -> bool:
    """Whether a version-0 scrape index (raw ``scrapes.jsonl`` objects) comes from a scraper
    before per-tick accounting (no ``outcome``): its skipped ticks are not listed."""
    return any("outcome" not in r for r in rows)


_TRANSITION_LOG = re.compile(r"breaker (\S+): ([\w-]+) -> ([\w-]+) at ([\d.]+) s \((.*)\)")


def transitions_from_log(log: Path) -> list[GatewayEvent]:
    """The breaker transitions of a version-0 case without ``gateway_events.jsonl``, from the
    gateway's log lines (``breaker URL: closed -> open at 12.345 s (reason)``; seconds on the
    monotonic clock, so ``t_ns`` = s × 1e9, to the log's millisecond)."""
    out = []
    for line in log.read_text(errors="replace").splitlines():
        m = _TRANSITION_LOG.search(line)
        if m:
            up, a, b, t, why = m.groups()
            out.append(
                GatewayEvent(t_ns=int(float(t) * 1e9), upstream=up.rstrip(":"),
                             from_state=a, to_state=b, reason=why)  # type: ignore[arg-type]
            )  # fmt: skip
    return out
