"""analysis.compare_runs.workload_hash on trace-replay plans: the trace's content and the mapping
options are part of the workload, the file's path is not."""

from __future__ import annotations

import json
from pathlib import Path

from analysis.compare_runs import workload_hash
from scenarios.plan import Plan
from scenarios.trace_replay import TraceReplay, TraceReplayParams
from server.capacity import KVCapacity

CPU_1GIB = KVCapacity(18_688, 128, 146, 2**30, "metrics")
LINES = [
    {"timestamp": 0, "input_length": 64, "output_length": 2, "hash_ids": [0, 1]},
    {"timestamp": 500, "input_length": 40, "output_length": 3, "hash_ids": [0, 2]},
    {"timestamp": 900, "input_length": 20, "output_length": 1, "hash_ids": [3]},
]


def plan(path: Path, lines: list[dict[str, int | list[int]]], **extra: object) -> Plan:
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    params = TraceReplayParams.model_validate(
        {"trace": str(path), "trace_block_tokens": 32, "token_scale": "1", "window": "all",
         **extra}
    )  # fmt: skip
    return TraceReplay().plan(params, CPU_1GIB)


def test_same_content_elsewhere_is_the_same_workload(tmp_path: Path) -> None:
    assert workload_hash(plan(tmp_path / "a.jsonl", LINES)) == workload_hash(
        plan(tmp_path / "b.jsonl", LINES)
    )


def test_content_and_mapping_options_change_the_workload(tmp_path: Path) -> None:
    base = workload_hash(plan(tmp_path / "a.jsonl", LINES))
    edited = [LINES[0], {**LINES[1], "output_length": 4}, LINES[2]]
    assert workload_hash(plan(tmp_path / "b.jsonl", edited)) != base
    for extra in (
        {"token_scale": "1/2"},
        {"window": "0-600"},
        {"max_requests": 2},
        {"speedup": "2"},
        {"max_model_len": 40, "too_long": "truncate"},
        {"compress_delays": False},
    ):
        assert workload_hash(plan(tmp_path / "a.jsonl", LINES, **extra)) != base, extra
