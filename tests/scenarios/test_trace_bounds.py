"""Trace files read with bounds like network input, and scaled values held to the loaded limits.

Limits are made small with monkeypatch (the reader looks them up when it runs), so each test
writes a few lines, never gigabytes.
"""

from __future__ import annotations

import json
import time
from fractions import Fraction
from pathlib import Path

import pytest

import scenarios.traces as traces
from scenarios.prefix_cache_model.keys import MAX_MODEL_BLOCKS, trace_cache_requests
from scenarios.trace_scale import parse_token_scale, scale_trace
from scenarios.traces import MAX_LENGTH_TOKENS, TraceError, load_trace


def _write(path: Path, objs: list[dict[str, object] | str]) -> Path:
    path.write_text("".join((o if isinstance(o, str) else json.dumps(o)) + "\n" for o in objs))
    return path


def _line(ts: float, inp: int, ids: list[int] | None = None) -> dict[str, object]:
    out: dict[str, object] = {"timestamp": ts, "input_length": inp, "output_length": 1}
    return out if ids is None else {**out, "hash_ids": ids}


def test_a_file_of_zeros_is_refused_at_the_size_limit_without_a_memory_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # 16 MiB + 1 NUL bytes (sparse) are one line that never ends, so the file limit (here
    # 16 MiB) is what stops the read, the line dropped a chunk at a time.
    zeros = tmp_path / "zeros.jsonl"
    with open(zeros, "wb") as fh:
        fh.truncate(2**24 + 1)
    monkeypatch.setattr(traces, "TRACE_MAX_BYTES", 2**24)
    with pytest.raises(TraceError) as err:
        load_trace(zeros)
    assert str(err.value) == f"{zeros}: larger than 16,777,216 bytes, the limit of a trace file"


@pytest.mark.parametrize(
    ("path", "what"),
    [
        ("/dev/zero", "is a character device, not a regular file"),
        ("/", "is a directory, not a file"),
    ],
)
def test_a_path_that_is_no_file_is_refused_before_it_is_read(path: str, what: str) -> None:
    # /dev/zero was read to the 256 MiB limit and then called too large.
    with pytest.raises(TraceError) as err:
        load_trace(Path(path))
    assert str(err.value) == f"{path}: cannot read the trace: {what}"


def test_a_line_over_the_limit_is_named_and_the_others_still_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Line 2 holds 100 hash ids (> 200 bytes); lines 1 and 3 are short, and line 3 is bad on
    # its own (input_length 0): both bad lines are listed.
    monkeypatch.setattr(traces, "TRACE_MAX_LINE_BYTES", 200)
    path = _write(
        tmp_path / "t.jsonl",
        [_line(0, 512, [0]), _line(1, 51200, list(range(100))), _line(2, 0, [])],
    )
    with pytest.raises(TraceError) as err:
        load_trace(path)
    assert err.value.errors == (
        (2, "longer than 200 bytes, the limit of one trace line"),
        (3, "input_length must be ≥ 1, got 0"),
    )


def test_a_trace_over_the_request_limit_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Three requests fit a limit of 3; lines 4 and 5 are past it (counted, listed).
    monkeypatch.setattr(traces, "MAX_TRACE_REQUESTS", 3)
    objs: list[dict[str, object] | str] = [_line(i, 10, [i]) for i in range(3)]
    assert len(load_trace(_write(tmp_path / "ok.jsonl", objs)).requests) == 3
    with pytest.raises(TraceError) as err:
        load_trace(_write(tmp_path / "t.jsonl", [*objs, _line(3, 10, [3]), _line(4, 10, [4])]))
    assert err.value.errors == (
        (4, "past 3 requests, the limit of one trace"),
        (5, "past 3 requests, the limit of one trace"),
    )


def test_fresh_blocks_count_towards_the_block_limit_before_they_are_made(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Blocks of 512: a lengths-only line of 2,560 tokens is 5 fresh ids; with a limit of 8
    # the first line (5) fits and the second (5 + 5 = 10 > 8) is refused with the figures.
    monkeypatch.setattr(traces, "MAX_TRACE_BLOCKS", 8)
    path = _write(tmp_path / "t.jsonl", [_line(0, 2560), _line(1, 2560)])
    with pytest.raises(TraceError) as err:
        load_trace(path)
    assert err.value.line == 2
    assert err.value.reason == (
        "its 5 blocks of 512 tokens take the trace past 8 blocks (hash ids, fresh ones of "
        "lengths-only lines included), the limit of one trace"
    )


def test_a_file_of_many_bad_lines_keeps_a_bounded_list_and_counts_the_rest(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(traces, "MAX_KEPT_ERRORS", 5)
    with pytest.raises(TraceError) as err:
        load_trace(_write(tmp_path / "t.jsonl", ["x"] * 12))
    assert len(err.value.errors) == 5 and err.value.uncounted == 7
    assert "12 bad lines in all" in err.value.reason
    assert err.value.reason.endswith("… and 7 more")  # 12 − the first − 4 listed


def test_the_largest_legal_trace_scaled_past_the_limit_is_refused(tmp_path: Path) -> None:
    # One line at the limit: 2**24 tokens in 32,768 blocks of 512. A scale of 10**9 keeps
    # the block whole (512 × 10**9) but makes the prompt 16,777,216 × 10**9 tokens.
    ids = list(range(MAX_LENGTH_TOKENS // 512))
    trace = load_trace(_write(tmp_path / "t.jsonl", [_line(0, MAX_LENGTH_TOKENS, ids)]))
    with pytest.raises(ValueError) as err:
        scale_trace(trace, parse_token_scale("1e9"))
    assert str(err.value) == (
        f"{tmp_path / 't.jsonl'}:1: token scale 1000000000 makes its 16,777,216 tokens "
        "16,777,216,000,000,000 and a block 512,000,000,000 tokens; at most 16,777,216: lower "
        "--token-scale"
    )
    assert scale_trace(trace, Fraction(1, 2)).requests[0].input_length == 2**23


def test_a_scale_with_a_huge_exponent_is_refused_at_once() -> None:
    # Fraction("1e9999999") expands ten million digits (minutes); the check comes first.
    start = time.monotonic()
    for text in ("1e9999999", "1e-9999999", "1" * 65):
        with pytest.raises(ValueError, match="at most 64 characters and an exponent within ±12"):
            parse_token_scale(text)
    assert time.monotonic() - start < 1.0
    assert parse_token_scale("1e-3") == Fraction(1, 1000)


def test_the_prefix_cache_model_holds_a_bounded_number_of_blocks(tmp_path: Path) -> None:
    # Two prompts of 2**24 tokens in blocks of 1 token: 2 × 16,777,216 = 33,554,432 keys, the
    # limit itself, are allowed; a third prompt of 1 token passes it (counted before keying).
    ids = list(range(MAX_LENGTH_TOKENS // 512))
    objs: list[dict[str, object] | str] = [_line(0, MAX_LENGTH_TOKENS, ids)] * 2
    trace = load_trace(_write(tmp_path / "t.jsonl", [*objs, _line(1, 1, [0])]))
    assert 2 * MAX_LENGTH_TOKENS == MAX_MODEL_BLOCKS
    with pytest.raises(ValueError) as err:
        trace_cache_requests(trace, 1)
    assert str(err.value).startswith(
        "the trace's prompts fill 33,554,433 blocks of 1 tokens, more than the 33,554,432"
    )
