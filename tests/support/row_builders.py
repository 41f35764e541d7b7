"""Run-format rows for tests that hand analysis functions rows directly (no run directory):
each builder fills the fields a test does not care about and checks the rest with the row
type itself, as the reader would (``msgspec.convert``, strict)."""

from __future__ import annotations

from typing import Any

import msgspec

from loadgen.runformat import PhaseRow, ReadRecord, ScrapeTick


def record(**fields: Any) -> ReadRecord:
    """A request record; unset identity fields get placeholders (``r``, case ``c``, phase
    ``p``, index 0, no group, 0 prompt/max tokens, scheduled at 0 ns)."""
    base: dict[str, Any] = {"request_id": "r", "case": "c", "phase": "p", "index": 0,
                            "group": None, "prompt_tokens_sent": 0, "max_tokens": 0,
                            "scheduled_ns": 0}  # fmt: skip
    return msgspec.convert(base | fields, ReadRecord, strict=True)


def records(rows: list[dict[str, Any]]) -> list[ReadRecord]:
    """:func:`record` of each dict in ``rows``."""
    return [record(**r) for r in rows]


def phase_row(**fields: Any) -> PhaseRow:
    """A ``phases.jsonl`` row (``phase``, ``start_ns``, ``last_end_ns``, ``end_ns`` needed)."""
    return msgspec.convert(fields, PhaseRow, strict=True)


def scrape(**fields: Any) -> ScrapeTick:
    """A scrape tick; ``tick`` defaults to ``scrape`` (or 0) and ``deadline_ns`` to
    ``start_ns`` (or 0)."""
    base = {"tick": fields.get("scrape", 0), "deadline_ns": fields.get("start_ns", 0)}
    return msgspec.convert(base | fields, ScrapeTick, strict=True)
