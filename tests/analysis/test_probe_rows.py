"""analysis.summaries.probe_rows: the first request (by index) of each prefix group per phase."""

from __future__ import annotations

import pandas as pd

from analysis.latency import request_frame
from analysis.summaries import probe_rows

MS = 1_000_000


def rec(phase: str, index: int, group: str | None, cached: int | None, ttft_ms: int) -> dict:
    return {
        "request_id": f"{phase}-{index:04d}",
        "phase": phase,
        "index": index,
        "group": group,
        "status": "ok",
        "prompt_tokens_sent": 1056,
        "cached_tokens": cached,
        "sent_ns": 0,
        "chunk_ns": [ttft_ms * MS, (ttft_ms + 5) * MS],
        "chunk_tokens": [1, 1],
    }


def test_first_request_per_group_by_index_not_by_file_order() -> None:
    # Records finish (and are written) out of order; index decides who the probe is.
    records = [
        rec("revisit", 5, "anchors-1", 1024, 20),
        rec("revisit", 2, "anchors-0", 1024, 21),
        rec("revisit", 1, "anchors-1", 0, 300),  # probe of anchors-1
        rec("revisit", 0, "anchors-0", None, 310),  # probe of anchors-0, no cached count
        rec("warm", 3, "anchors-1", 1024, 19),
        rec("warm", 1, "anchors-1", 1024, 22),  # probe of anchors-1
        rec("warm", 0, "anchors-0", 1024, 23),  # probe of anchors-0
        rec("pollution", 0, None, 0, 400),  # no group: never a probe
        rec("cold", 0, "anchors-0", 0, 500),  # phase not asked for
    ]
    rows = probe_rows(request_frame(records), ("warm", "revisit"))
    assert rows == [
        {
            "phase": "warm",
            "group": "anchors-0",
            "request_id": "warm-0000",
            "status": "ok",
            "cached_tokens": 1024,
            "prompt_tokens": 1056,
            "ttft_ms": 23.0,
        },
        {
            "phase": "warm",
            "group": "anchors-1",
            "request_id": "warm-0001",
            "status": "ok",
            "cached_tokens": 1024,
            "prompt_tokens": 1056,
            "ttft_ms": 22.0,
        },
        {
            "phase": "revisit",
            "group": "anchors-0",
            "request_id": "revisit-0000",
            "status": "ok",
            "cached_tokens": None,
            "prompt_tokens": 1056,
            "ttft_ms": 310.0,
        },
        {
            "phase": "revisit",
            "group": "anchors-1",
            "request_id": "revisit-0001",
            "status": "ok",
            "cached_tokens": 0,
            "prompt_tokens": 1056,
            "ttft_ms": 300.0,
        },
    ]


def test_failed_probe_is_still_the_probe_with_no_ttft() -> None:
    failed = rec("warm", 0, "anchors-0", None, 0) | {
        "status": "error",
        "chunk_ns": [],
        "chunk_tokens": [],
    }
    rows = probe_rows(request_frame([failed, rec("warm", 4, "anchors-0", 1024, 20)]), ("warm",))
    assert [(r["request_id"], r["status"], r["ttft_ms"]) for r in rows] == [
        ("warm-0000", "error", None)
    ]


def test_no_records_no_probes() -> None:
    assert probe_rows(pd.DataFrame(), ("warm",)) == []
