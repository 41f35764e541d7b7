"""A request record's JSON line: every field, in declaration order, lists as they are."""

from __future__ import annotations

import json

import msgspec

from loadgen.records import RequestRecord


def test_the_json_line_holds_every_field_in_order() -> None:
    record = RequestRecord(
        "p-0007", "c", "p", 7, None, 128, 3, 1_000, 1_000, 1_010,
        chunk_ns=[1_500, 1_600, 1_700], chunk_tokens=[1, 1, 1], status="ok",
        error="≥ 1 ms late",
    )  # fmt: skip
    line = record.to_json()
    decoded = json.loads(line)
    assert list(decoded) == list(RequestRecord.__struct_fields__)
    assert decoded == msgspec.to_builtins(record)
    assert decoded["chunk_ns"] == [1_500, 1_600, 1_700] and decoded["connection_ready_ns"] is None
    assert decoded["error"] == "≥ 1 ms late"
    assert "\n" not in line
