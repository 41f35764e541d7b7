"""scenarios.trace_replay: the plan built from small hand-made traces (ids, prompts, offsets,
slices, the too-long rule, sessions), and the refusal of a bad trace before anything runs."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from pydantic import ValidationError

from scenarios.arrivals import TraceArrival
from scenarios.partition import partition_phase
from scenarios.plan import Plan
from scenarios.tokens import TokenSpace
from scenarios.trace_replay import (
    TraceHitRatePredicted,
    TraceRateKept,
    TraceReplay,
    TraceReplayParams,
    TraceSendLateness,
    parse_window,
)
from scenarios.traces import TraceRequest, prompt_token_ids
from scenarios.values import parse_speedups
from scenarios.workloads import TracePrompts, materialize
from server.capacity import KVCapacity
from tests.support.timing import times_a_linear_scan

CPU_1GIB = KVCapacity(tokens=18_688, block_size=128, num_blocks=146, memory_bytes=2**30,
                      source="metrics")  # fmt: skip
#: Tokens per hash id in the hand-made traces (token scale 1 keeps it).
BLOCK = 4


def write(tmp_path: Path, lines: list[dict[str, object] | str], name: str = "t.jsonl") -> Path:
    path = tmp_path / name
    path.write_text("\n".join(x if isinstance(x, str) else json.dumps(x) for x in lines) + "\n")
    return path


def mooncake(ts: float, n: int, out: int, ids: list[int]) -> dict[str, object]:
    return {"timestamp": ts, "input_length": n, "output_length": out, "hash_ids": ids}


#: Five requests, blocks of 4 tokens: lines 1-5 at 0, 1, 1, 2.5 and 4 s; line 2 shares its
#: first two blocks (ids 0, 1) with line 1; line 5 is 30 + 2 tokens long.
FIVE = [
    mooncake(0, 12, 2, [0, 1, 2]),
    mooncake(1000, 10, 3, [0, 1, 5]),
    mooncake(1000, 4, 1, [6]),
    mooncake(2500, 8, 2, [7, 8]),
    mooncake(4000, 30, 2, [9, 10, 11, 12, 13, 14, 15, 16]),
]


def params(path: Path, **extra: object) -> TraceReplayParams:
    return TraceReplayParams.model_validate(
        {"trace": str(path), "token_scale": "1", "trace_block_tokens": BLOCK,
         "window": "all", **extra}
    )  # fmt: skip


def plan_of(path: Path, **extra: object) -> Plan:
    return TraceReplay().plan(params(path, **extra), CPU_1GIB)


def test_request_ids_name_the_trace_line_and_prompts_follow_the_contract(tmp_path: Path) -> None:
    plan = plan_of(write(tmp_path, FIVE), speedup="2")
    phase = plan.phases[0]
    assert phase.name == "speedup-2x"
    workload = phase.workload
    assert isinstance(workload, TracePrompts)
    built = materialize(workload, phase.name, plan.seed, plan.tokens)
    assert [built.header(i).request_id for i in range(len(built))] == [
        f"speedup-2x-L{n:05d}" for n in (1, 2, 3, 4, 5)
    ]
    seed = workload.block_seed(plan.seed)
    for i, line in enumerate(FIVE):
        request = TraceRequest(i + 1, None, int(line["input_length"]),
                               int(line["output_length"]), tuple(line["hash_ids"]))  # fmt: skip
        expected = prompt_token_ids(request, seed, BLOCK, plan.tokens)
        assert built[i].prompt_token_ids == tuple(expected.tolist())
        assert built[i].max_tokens == line["output_length"]
    # Lines 1 and 2 share ids 0, 1: exactly their first 2 × 4 tokens, and not the third block.
    a, b = built[0].prompt_token_ids, built[1].prompt_token_ids
    assert a[:8] == b[:8] and a[8:10] != b[8:10]


def test_offsets_are_trace_time_over_the_speedup(tmp_path: Path) -> None:
    plan = plan_of(write(tmp_path, FIVE), speedup="0.5,2")
    slow, fast = plan.phases
    assert isinstance(slow.arrival, TraceArrival) and isinstance(fast.arrival, TraceArrival)
    # timestamps 0, 1000, 1000, 2500, 4000 ms: ÷ 2 → 0, 0.5, 0.5, 1.25, 2 s; ÷ 0.5 → × 2.
    ms = 1_000_000
    assert [fast.arrival.offset_ns(i) for i in range(5)] == [0, 500 * ms, 500 * ms, 1250 * ms,
                                                             2000 * ms]  # fmt: skip
    assert [slow.arrival.offset_ns(i) for i in range(5)] == [0, 2000 * ms, 2000 * ms, 5000 * ms,
                                                             8000 * ms]  # fmt: skip
    share = partition_phase(fast.arrival, 5, 1)[0]
    assert share.offsets_ns == (0, 500 * ms, 500 * ms, 1250 * ms, 2000 * ms)
    assert share.concurrency is None
    # Each phase draws its blocks under its own salt: no phase hits another's blocks.
    assert isinstance(slow.workload, TracePrompts) and isinstance(fast.workload, TracePrompts)
    assert slow.workload.block_seed(0) != fast.workload.block_seed(0)
    kinds = {type(c) for c in plan.checks}
    assert kinds == {TraceHitRatePredicted, TraceRateKept, TraceSendLateness}
    assert len(plan.checks) == 3 * 2  # three per phase, one case


def test_window_picks_trace_time_start_inclusive_end_exclusive(tmp_path: Path) -> None:
    path = write(tmp_path, FIVE)
    assert parse_window("1s-2.5s") == (1000.0, 2500.0)
    assert parse_window("1000-2500") == (1000.0, 2500.0)  # bare numbers are ms
    assert parse_window("all") is None
    assert parse_window(" 1 s - 2.5s ") == (1000.0, 2500.0)
    plan = plan_of(path, window="1s-2.5s")
    workload = plan.phases[0].workload
    assert isinstance(workload, TracePrompts)
    assert [it.line for it in workload.items] == [2, 3]  # 2500 ms is out
    arrival = plan.phases[0].arrival
    assert isinstance(arrival, TraceArrival)
    assert arrival.offsets_ms == (0.0, 0.0)  # from the slice's first timestamp (1000 ms)
    with pytest.raises(ValidationError, match="no request in window"):
        params(path, window="5s-6s")


def test_max_requests_keeps_the_first_n_of_the_slice(tmp_path: Path) -> None:
    plan = plan_of(write(tmp_path, FIVE), window="1s-10s", max_requests=2)
    workload = plan.phases[0].workload
    assert isinstance(workload, TracePrompts)
    assert [it.line for it in workload.items] == [2, 3]
    assert plan.sizing["in_slice"] == 2


def test_too_long_requests_are_skipped_or_truncated_and_counted(tmp_path: Path) -> None:
    path = write(tmp_path, FIVE)
    # max_model_len 20: line 5 (30 + 2 = 32 tokens) does not fit; the others (≤ 14) do.
    skipped = plan_of(path, max_model_len=20)
    workload = skipped.phases[0].workload
    assert isinstance(workload, TracePrompts)
    assert [it.line for it in workload.items] == [1, 2, 3, 4]
    assert (skipped.sizing["skipped"], skipped.sizing["skipped_lines"]) == (1, [5])
    assert skipped.sizing["truncated"] == 0
    cut = plan_of(path, max_model_len=20, too_long="truncate")
    workload = cut.phases[0].workload
    assert isinstance(workload, TracePrompts)
    last = workload.items[-1]
    # 20 − 2 output = 18 prompt tokens = 4 whole blocks + 2 tokens: ceil(18 / 4) = 5 ids.
    assert (last.line, last.input_tokens, last.hash_ids) == (5, 18, (9, 10, 11, 12, 13))
    assert (cut.sizing["skipped"], cut.sizing["truncated"]) == (0, 1)
    built = materialize(workload, cut.phases[0].name, cut.seed, TokenSpace())
    assert len(built[4].prompt_token_ids) == 18


def test_sessions_follow_the_turn_before_with_its_delay(tmp_path: Path) -> None:
    lines: list[dict[str, object] | str] = [
        {"session_id": "a", "timestamp": 0, "input_length": 8, "output_length": 2},
        {"session_id": "b", **mooncake(500, 4, 1, [40])},
        {"session_id": "a", "delay": 250, "input_length": 12, "output_length": 2},
        {"session_id": "a", "delay": 100, "input_length": 16, "output_length": 1},
    ]
    plan = plan_of(write(tmp_path, lines), speedup="2")
    arrival = plan.phases[0].arrival
    assert isinstance(arrival, TraceArrival) and arrival.has_sessions
    assert arrival.offsets_ms == (0.0, 500.0, None, None)
    assert arrival.follows == (None, None, 0, 2)
    assert arrival.delays_ms == (0.0, 0.0, 250.0, 100.0)
    assert arrival.delay_ns(2) == 125_000_000  # 250 ms ÷ speedup 2
    assert arrival.model_copy(update={"compress_delays": False}).delay_ns(2) == 250_000_000
    # A later turn extends its previous turn's prompt: turn 1 starts with turn 0's 8 tokens.
    workload = plan.phases[0].workload
    assert isinstance(workload, TracePrompts)
    built = materialize(workload, "x", 0, TokenSpace())
    assert built[2].prompt_token_ids[:8] == built[0].prompt_token_ids
    assert built[0].group == "session-a"
    # A session turn cannot be split across workers.
    with pytest.raises(ValueError, match="cannot be split"):
        partition_phase(arrival, 4, 2)
    # A session whose first turn is outside the window is left out whole.
    later = plan_of(write(tmp_path, lines, "s2.jsonl"), window="400-1000")
    workload = later.phases[0].workload
    assert isinstance(workload, TracePrompts)
    assert [it.line for it in workload.items] == [2]


def test_a_skipped_turn_skips_the_turns_after_it(tmp_path: Path) -> None:
    lines: list[dict[str, object] | str] = [
        {"session_id": "a", "timestamp": 0, "input_length": 8, "output_length": 2},
        {"session_id": "a", "delay": 5, "input_length": 40, "output_length": 2},
        {"session_id": "a", "delay": 5, "input_length": 44, "output_length": 2},
    ]
    plan = plan_of(write(tmp_path, lines), max_model_len=20)
    assert plan.sizing["skipped_lines"] == [2, 3]


def test_a_bad_line_is_refused_with_its_number(tmp_path: Path) -> None:
    bad = [*FIVE[:2], {"timestamp": 3000, "input_length": -4, "output_length": 1}]
    with pytest.raises(ValidationError, match=r"t\.jsonl:3: .*input_length must be ≥ 1"):
        params(write(tmp_path, bad))


def test_lists_of_speedups_and_caches() -> None:
    assert parse_speedups("2,0.5,1") == [0.5, 1.0, 2.0]
    for text in ("0", "-1", "x", "1,1", ""):
        with pytest.raises(ValueError):
            parse_speedups(text)


def test_caches_become_cases(tmp_path: Path) -> None:
    plan = plan_of(write(tmp_path, FIVE), cache="1GiB,4GiB")
    assert [c.name for c in plan.cases] == ["1GiB", "4GiB"]
    assert [c.server.kv_cache_bytes for c in plan.cases if c.server] == [2**30, 2**32]


def test_the_default_slice_of_the_sample(tmp_path: Path) -> None:
    # Hand count on the shared sample: 251 requests have 960,000 ≤ timestamp < 1,023,000 ms;
    # at 1/32 the 14 whose ceil(input/32) + ceil(output/32) > 2048 are skipped.
    sample = Path(__file__).parents[1] / "fixtures/traces/mooncake_fast25_synthetic_trace.jsonl"
    plan = TraceReplay().plan(TraceReplayParams(trace=str(sample)), CPU_1GIB)
    assert plan.sizing["in_slice"] == 251
    assert plan.sizing["skipped"] == 14
    assert plan.sizing["trace_block_tokens"] == 16
    lengths = np.array([it.input_tokens for it in plan.phases[0].workload.items])
    assert lengths.max() <= 2048


def test_a_window_is_parsed_in_linear_time() -> None:
    # Spaces around an optional unit once backtracked over each other (O(n²) in a run of
    # spaces); now a few linear scans of the text (the ratio is in tests.support.timing).
    text = "1" + " " * 100_000 + "x-2s"
    with pytest.raises(ValueError, match="not a trace time"):
        parse_window(text)
    assert times_a_linear_scan(parse_window, text) < 25
