"""scenarios.traces: Mooncake and sessions JSONL validated whole, token scale, prompts from
hash ids."""

from __future__ import annotations

import hashlib
import json
import math
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest

from scenarios.tokens import TokenSpace
from scenarios.trace_scale import parse_token_scale, scale_trace
from scenarios.traces import (
    MAX_LISTED_ERRORS,
    TraceError,
    TraceRequest,
    block_token_ids,
    load_trace,
    prompt_token_ids,
)

SPACE = TokenSpace(low=10, high=4000)
#: The Mooncake FAST'25 synthetic trace (Apache-2.0; see the NOTICE.md beside it).
SAMPLE = Path(__file__).parents[1] / "fixtures/traces/mooncake_fast25_synthetic_trace.jsonl"


def write(tmp_path: Path, lines: list[str | dict[str, object]], name: str = "t.jsonl") -> Path:
    path = tmp_path / name
    path.write_text(
        "".join((x if isinstance(x, str) else json.dumps(x)) + "\n" for x in lines),
        encoding="utf-8",
    )
    return path


def line(ts: float = 0, inp: int = 1000, out: int = 8, ids: list[int] | None = None) -> dict:
    return {
        "timestamp": ts,
        "input_length": inp,
        "output_length": out,
        "hash_ids": ids if ids is not None else [0, 1],
    }


def test_mooncake_trace_loads_in_file_order_with_extra_fields_ignored(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        [
            {**line(0, 1000, 8, [0, 1]), "model": "x", "priority": 3},
            line(40.5, 1024, 4, [0, 2]),
            "",  # a blank line is skipped but still counts in line numbers
            line(40.5, 1, 1, [7]),
        ],
    )
    trace = load_trace(path)
    assert trace.kind == "mooncake"
    assert trace.block_tokens == 512
    assert trace.sha256 == hashlib.sha256(path.read_bytes()).hexdigest()
    assert [r.line for r in trace.requests] == [1, 2, 4]
    assert trace.requests[0] == TraceRequest(
        line=1, timestamp_ms=0.0, input_length=1000, output_length=8, hash_ids=(0, 1)
    )
    assert trace.requests[1].timestamp_ms == 40.5
    assert trace.span_ms == 40.5
    assert trace.sessions() == {}


# One case per malformed-line kind: (line 2's text, words the reason must contain).
GOOD = json.dumps(line(0))
MALFORMED: dict[str, tuple[str, str]] = {
    # The column is 1-based: 33 characters, then the missing value in column 34.
    "not JSON": ('{"timestamp": 0, "input_length": ', "not JSON (Expecting value at column 34)"),
    # json's reason ends in "at": the column follows it once ("starting at column 30", the
    # opening quote after 29 characters).
    "unterminated string": (
        '{"timestamp": 0, "hash_ids": "ab',
        "not JSON (Unterminated string starting at column 30)",
    ),
    "not an object": ("[1, 2, 3]", "not a JSON object"),
    "missing input_length": (
        json.dumps({"timestamp": 0, "output_length": 8, "hash_ids": [0]}),
        "missing field 'input_length'",
    ),
    "missing output_length": (
        json.dumps({"timestamp": 0, "input_length": 8, "hash_ids": [0]}),
        "missing field 'output_length'",
    ),
    "missing timestamp": (
        json.dumps({"input_length": 8, "output_length": 8, "hash_ids": [0]}),
        "missing field 'timestamp'",
    ),
    "timestamp of wrong type": (
        json.dumps({**line(), "timestamp": "5"}),
        'timestamp must be a number of ms, got "5"',
    ),
    "negative timestamp": (json.dumps({**line(), "timestamp": -1}), "timestamp must be ≥ 0"),
    # 10**308 ms would print a 300-digit span; 10**12 ms (about 31.7 years) is the bound.
    "timestamp beyond the bound": (
        json.dumps({**line(), "timestamp": 1e308}),
        "timestamp must be ≤ 1000000000000 ms, got 1e+308",
    ),
    # 10**9 tokens would make 2 million 512-token blocks before anything is said; 2**24 is the
    # bound (16,777,216 tokens; hash ids are left out, so any length is whole blocks).
    "input_length beyond the bound": (
        json.dumps({"timestamp": 0, "input_length": 10**9, "output_length": 5}),
        "input_length must be ≤ 16777216 tokens, got 1000000000",
    ),
    "hash_ids of wrong type": (
        json.dumps({**line(), "hash_ids": "0,1"}),
        "hash_ids must be a list",
    ),
    "non-integer length": (
        json.dumps({**line(), "output_length": 12.5}),
        "output_length must be an integer, got 12.5",
    ),
    "boolean length": (
        json.dumps({**line(), "output_length": True}),
        "output_length must be an integer, got true",
    ),
    "negative length": (
        json.dumps({**line(), "output_length": -3}),
        "output_length must be ≥ 1, got -3",
    ),
    "zero input": (
        json.dumps({**line(), "input_length": 0, "hash_ids": []}),
        "input_length must be ≥ 1, got 0",
    ),
    "hash ids short of input": (
        json.dumps(line(0, 1025, 8, [0, 1])),
        "2 hash_ids do not cover input_length 1025 in whole blocks of 512 tokens: "
        "expected ceil(1025 / 512) = 3",
    ),
    "hash ids beyond input": (
        json.dumps(line(0, 512, 8, [0, 1])),
        "expected ceil(512 / 512) = 1",
    ),
    "non-integer hash id": (
        json.dumps(line(0, 1000, 8, [0, 1.5])),
        "hash_ids must be non-negative integers, got 1.5 at index 1",
    ),
    "negative hash id": (
        json.dumps(line(0, 1000, 8, [-4, 1])),
        "hash_ids must be non-negative integers, got -4 at index 0",
    ),
    "session_id of wrong type": (
        json.dumps({**line(), "session_id": 7}),
        "session_id must be a string, got 7",
    ),
}


@pytest.mark.parametrize("kind", list(MALFORMED))
def test_each_malformed_line_kind_is_refused_with_its_line_number(
    tmp_path: Path, kind: str
) -> None:
    text, reason = MALFORMED[kind]
    path = write(tmp_path, [GOOD, text, GOOD])
    with pytest.raises(TraceError) as err:
        load_trace(path)
    assert err.value.line == 2
    assert reason in err.value.reason
    assert str(err.value).startswith(f"{path}:2: ")
    assert len(err.value.errors) == 1


def test_timestamps_going_backwards_are_refused_at_the_later_line(tmp_path: Path) -> None:
    path = write(tmp_path, [line(0), line(500), line(499), line(500)])
    with pytest.raises(TraceError) as err:
        load_trace(path)
    assert err.value.line == 3
    assert err.value.reason == "timestamp goes backwards: 499 ms after 500.0 ms at line 2"


def test_not_utf8_is_refused_with_its_line_number(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    path.write_bytes(GOOD.encode() + b"\n\xff\xfe\n")
    with pytest.raises(TraceError) as err:
        load_trace(path)
    assert (err.value.line, err.value.reason) == (2, "not UTF-8 text")


@pytest.mark.parametrize("content", ["", "\n\n   \n"])
def test_empty_file_is_refused(tmp_path: Path, content: str) -> None:
    path = tmp_path / "t.jsonl"
    path.write_text(content)
    with pytest.raises(TraceError) as err:
        load_trace(path)
    assert err.value.line is None
    assert str(err.value) == f"{path}: empty trace: no requests"


def test_missing_file_is_a_trace_error(tmp_path: Path) -> None:
    with pytest.raises(TraceError, match="cannot read the trace"):
        load_trace(tmp_path / "absent.jsonl")


def test_every_bad_line_is_collected_and_the_first_ones_listed(tmp_path: Path) -> None:
    bad = json.dumps({**line(), "input_length": -1})
    path = write(tmp_path, [GOOD] + [bad] * 30)
    with pytest.raises(TraceError) as err:
        load_trace(path)
    assert err.value.line == 2
    assert [n for n, _ in err.value.errors] == list(range(2, 32))
    message = str(err.value)
    assert "30 bad lines in all" in message
    # The first error heads the message, the next MAX_LISTED_ERRORS - 1 are listed, then a count.
    assert f"{path}:{MAX_LISTED_ERRORS}: " in message
    assert f"{path}:{MAX_LISTED_ERRORS + 2}: " not in message
    assert "… and 10 more" in message


def test_sessions_turns_delays_and_lengths_only_history(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        [
            {"session_id": "a", "timestamp": 0, "input_length": 600, "output_length": 5},
            {"session_id": "b", **line(10, 512, 3, [9])},
            {"session_id": "a", "delay": 250, "input_length": 1100, "output_length": 7},
            line(20, 100, 1, [3]),
            {"session_id": "a", "delay": 0.5, "input_length": 1100, "output_length": 2},
        ],
    )
    trace = load_trace(path)
    assert trace.kind == "sessions"
    a = trace.sessions()["a"]
    assert [r.line for r in a] == [1, 3, 5]
    assert [r.turn for r in a] == [0, 1, 2]
    assert [r.timestamp_ms for r in a] == [0.0, None, None]
    assert [r.delay_ms for r in a] == [0.0, 250.0, 0.5]
    # Fresh blocks get negative ids in file order; a later lengths-only turn repeats the
    # previous turn's ids then adds fresh ones: 600 tokens → 2 blocks (-1, -2); 1100 → 3
    # blocks (-1, -2, -3); the same 1100 again → the same 3 ids, no fresh one.
    assert [r.hash_ids for r in a] == [(-1, -2), (-1, -2, -3), (-1, -2, -3)]
    assert trace.requests[3].session_id is None and trace.requests[3].turn == 0
    assert trace.span_ms == 20.0  # later turns carry no timestamp
    # The history is a shared prefix: turn 1's prompt starts with turn 0's whole prompt.
    p0, p1 = (prompt_token_ids(r, 0, 512, SPACE) for r in a[:2])
    assert np.array_equal(p1[:600], p0)
    assert len(p1) == 1100


SESSION_ERRORS: dict[str, tuple[list[dict[str, object]], int, str]] = {
    "later turn missing delay": (
        [
            {"session_id": "s", **line(0)},
            {"session_id": "s", "input_length": 5, "output_length": 1},
        ],
        2,
        "later turn of session 's' is missing its 'delay'",
    ),
    "later turn with a timestamp": (
        [{"session_id": "s", **line(0)}, {"session_id": "s", **line(5), "delay": 1}],
        2,
        "later turns give 'delay'",
    ),
    "first turn missing timestamp": (
        [{"session_id": "s", "delay": 5, "input_length": 5, "output_length": 1}],
        1,
        "first turn of session 's' is missing its 'timestamp'",
    ),
    "negative delay": (
        [
            {"session_id": "s", **line(0)},
            {"session_id": "s", "delay": -1, "input_length": 1000, "output_length": 1},
        ],
        2,
        "delay must be ≥ 0 ms, got -1",
    ),
    "lengths-only turn shorter than the previous": (
        [
            {"session_id": "s", **line(0, 1000, 1, [0, 1])},
            {"session_id": "s", "delay": 1, "input_length": 999, "output_length": 1},
        ],
        2,
        "may not be shorter",
    ),
}


@pytest.mark.parametrize("kind", list(SESSION_ERRORS))
def test_each_malformed_session_line_kind_is_refused(tmp_path: Path, kind: str) -> None:
    lines, bad_line, reason = SESSION_ERRORS[kind]
    with pytest.raises(TraceError) as err:
        load_trace(write(tmp_path, list(lines)))
    assert err.value.line == bad_line
    assert reason in err.value.reason


def test_token_scale_parsing() -> None:
    assert parse_token_scale("1/16") == Fraction(1, 16)
    assert parse_token_scale("0.0625") == Fraction(1, 16)
    assert parse_token_scale("1") == 1
    for bad in ("0", "-1/2", "x", "1/0", ""):
        with pytest.raises(ValueError, match="invalid token scale"):
            parse_token_scale(bad)


def test_scale_shrinks_lengths_and_block_together(tmp_path: Path) -> None:
    # 1/16 of 512 = 32-token blocks. input 1000 → ceil(62.5) = 63, still 2 blocks
    # (ceil(63/32) = 2 = ceil(1000/512)); output 8 → ceil(0.5) = 1; output 40 → ceil(2.5) = 3;
    # input 1 → ceil(1/16) = 1, output 1 → 1.
    trace = load_trace(write(tmp_path, [line(0, 1000, 8), line(5, 1, 40, [4])]))
    scaled = scale_trace(trace, Fraction(1, 16))
    assert scaled.block_tokens == 32 and scaled.token_scale == Fraction(1, 16)
    assert [(r.input_length, r.output_length) for r in scaled.requests] == [(63, 1), (1, 3)]
    assert [r.hash_ids for r in scaled.requests] == [(0, 1), (4,)]
    assert [r.timestamp_ms for r in scaled.requests] == [0.0, 5.0]
    assert scale_trace(scaled, Fraction(2)).token_scale == Fraction(1, 8)


def test_scale_keeps_hash_ids_covering_on_the_full_sample() -> None:
    scaled = scale_trace(load_trace(SAMPLE), Fraction(1, 16))
    assert all(
        len(r.hash_ids) == math.ceil(r.input_length / scaled.block_tokens) for r in scaled.requests
    )


@pytest.mark.parametrize("scale", [Fraction(1, 3), Fraction(1, 1024), Fraction(3, 1000)])
def test_scale_that_breaks_the_block_is_refused_naming_valid_scales(
    tmp_path: Path, scale: Fraction
) -> None:
    trace = load_trace(write(tmp_path, [line(0)]))
    with pytest.raises(ValueError, match=r"use m/512 for a whole m ≥ 1 \(e\.g\. 1/1, 1/2"):
        scale_trace(trace, scale)


def test_two_requests_sharing_two_of_three_hash_ids_share_exactly_two_blocks() -> None:
    # Blocks of 4 tokens: both prompts are 12 tokens (3 blocks); ids (7, 8, 9) and (7, 8, 5).
    a = TraceRequest(line=1, timestamp_ms=0, input_length=12, output_length=1, hash_ids=(7, 8, 9))
    b = TraceRequest(line=2, timestamp_ms=0, input_length=12, output_length=1, hash_ids=(7, 8, 5))
    pa, pb = prompt_token_ids(a, 42, 4, SPACE), prompt_token_ids(b, 42, 4, SPACE)
    assert len(pa) == len(pb) == 12
    assert np.array_equal(pa[:8], pb[:8])  # 2 blocks × 4 tokens shared
    # The third block differs from its first token (an independent draw; checked for seed 42).
    assert pa[8] != pb[8]
    assert np.array_equal(pa[8:], block_token_ids(42, 9, 4, SPACE))
    assert np.array_equal(pb[8:], block_token_ids(42, 5, 4, SPACE))


def test_prompt_is_blocks_in_order_with_the_last_cut() -> None:
    r = TraceRequest(line=1, timestamp_ms=0, input_length=10, output_length=1, hash_ids=(3, 1, 2))
    prompt = prompt_token_ids(r, 0, 4, SPACE)
    expected = np.concatenate([block_token_ids(0, h, 4, SPACE) for h in (3, 1, 2)])[:10]
    assert np.array_equal(prompt, expected)
    assert all(SPACE.low <= t < SPACE.high for t in prompt.tolist())
    # Same ids, other seed: other tokens; same seed again: the same tokens.
    assert not np.array_equal(prompt, prompt_token_ids(r, 1, 4, SPACE))
    assert np.array_equal(prompt, prompt_token_ids(r, 0, 4, SPACE))


def test_prompt_refuses_ids_that_do_not_cover_the_input() -> None:
    r = TraceRequest(line=3, timestamp_ms=0, input_length=10, output_length=1, hash_ids=(3,))
    with pytest.raises(ValueError, match="line 3: 1 hash ids for 10 tokens"):
        prompt_token_ids(r, 0, 4, SPACE)


def test_full_sample_loads() -> None:
    trace = load_trace(SAMPLE)
    assert len(trace.requests) == 3993
    assert trace.kind == "mooncake"
    assert trace.span_ms == 1022025.0
