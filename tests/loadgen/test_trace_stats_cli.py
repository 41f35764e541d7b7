"""``loadgen trace stats``: offline trace statistics and the hit-rate-vs-cache curve, on a
hand-made trace whose numbers are derived by hand, bad input (one line, exit 2), and the
shared Mooncake sample."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from loadgen.cli import main
from scenarios.trace_stats import summarize
from scenarios.traces import load_trace

#: The Mooncake FAST'25 synthetic trace (Apache-2.0; see the NOTICE.md beside it).
SAMPLE = Path(__file__).parents[1] / "fixtures/traces/mooncake_fast25_synthetic_trace.jsonl"

# Trace blocks of 8 tokens, server blocks of 4: every prompt is 16 tokens = 4 server blocks
# keyed k0 k1 (trace id 0) then k2 k3 (ids 0, 1 — or 0, 2 for the third request); each
# request may hit at most (16 - 1) // 4 = 3 blocks, and holds ceil((16 + 1 - 1) / 4) = 4.
HAND = [
    {"timestamp": 0, "input_length": 16, "output_length": 1, "hash_ids": [0, 1]},
    {"timestamp": 1000, "input_length": 16, "output_length": 1, "hash_ids": [0, 1]},
    {"timestamp": 2000, "input_length": 16, "output_length": 1, "hash_ids": [0, 2]},
]
HAND_ARGS = ["--trace-block-tokens", "8", "--block-tokens", "4", "--no-plot"]


def run(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, ["trace", "stats", *args])
    return result.exit_code, result.output


@pytest.fixture
def hand_trace(tmp_path: Path) -> Path:
    path = tmp_path / "hand.jsonl"
    path.write_text("".join(json.dumps(x) + "\n" for x in HAND))
    return path


def test_hand_made_trace_curve(hand_trace: Path) -> None:
    """Unbounded: r1 misses; r2 hits k0 k1 k2 (12 tokens; k3 is the recomputed last block);
    r3 hits k0 k1 (8; its k2 has other ids): 20 of 48 tokens. It makes 4 + 1 + 2 = 7 blocks:
    footprint (7 + 1 null) × 4 = 32 tokens.

    - 12 tokens (3 blocks, 2 usable): r1 gets blocks for k0 k1 and is lent 2; r2 hits k0 k1
      (k2 was in a lent block), is lent 2; r3 hits k0 k1: 16 / 48, 3 short requests.
    - 20 tokens (4 usable): r1 fills them, r2 hits 3 and recomputes k3 in the freed k3
      block, r3 hits 2: 20 / 48, as unbounded.
    - 90 % of the maximum = 0.375: 12 misses it, 20 reaches it; bisecting, 16 tokens (3
      usable: r2 hits 3 since k2 sits in a pool block) reaches it and 16 − 12 = 1 block ends
      the search: 16 tokens.
    - Rate: 3 arrivals over a 2 s span = 1.5 req/s; with a 1 s window at most 1 arrival: 1.0.
    """
    code, out = run(str(hand_trace), *HAND_ARGS, "--cache-tokens", "12,20,32", "--json",
                    "--peak-window", "1")  # fmt: skip
    assert code == 0, out
    got = json.loads(out)
    assert got["max_hit_rate"] == pytest.approx(20 / 48)
    assert got["footprint_tokens"] == 32
    assert [(p["cache_tokens"], p["capacity_blocks"]) for p in got["predicted"]] == [
        (12, 2),
        (20, 4),
        (32, 7),
    ]
    assert [p["hit_rate"] for p in got["predicted"]] == pytest.approx([16 / 48, 20 / 48, 20 / 48])
    assert [p["short_requests"] for p in got["predicted"]] == [3, 0, 0]
    assert got["target_cache_tokens"] == 16
    summary = got["summary"]
    assert summary["requests"] == 3 and summary["sessions"] == 0
    assert summary["span_s"] == 2.0
    assert summary["mean_rate_per_s"] == 1.5
    assert summary["peak_rate_per_s"] == 1.0
    assert summary["input_tokens"]["p50"] == 16 and summary["output_tokens"]["max"] == 1
    assert got["plot"] is None


def test_text_output_names_the_figures(hand_trace: Path) -> None:
    code, out = run(str(hand_trace), *HAND_ARGS, "--cache-tokens", "12,20")
    assert code == 0, out
    assert "maximum hit rate (unbounded cache): 41.67%" in out
    assert "smallest cache reaching 90% of the maximum (37.50%): 16 tokens" in out
    assert "peak n/a (most arrivals in a 10 s window)" in out  # span 2 s < 10 s


def test_cache_in_bytes_uses_kv_bytes_per_token(hand_trace: Path) -> None:
    # 1,000 B/token × 4-token blocks: 20,000 B → 5 blocks = 20 tokens; 16KB → 4 blocks = 16.
    code, out = run(str(hand_trace), *HAND_ARGS, "--kv-bytes-per-token", "1000",
                    "--cache", "16KB,20000B", "--json")  # fmt: skip
    assert code == 0, out
    got = json.loads(out)
    assert [p["cache_tokens"] for p in got["predicted"]] == [16, 20]
    assert [p["cache_bytes"] for p in got["predicted"]] == [16_000, 20_000]


def test_plot_is_written(hand_trace: Path, tmp_path: Path) -> None:
    plot = tmp_path / "curve.png"
    args = ["--trace-block-tokens", "8", "--block-tokens", "4", "--plot", str(plot)]
    code, out = run(str(hand_trace), *args)
    assert code == 0, out
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert f"plot: {plot}" in out


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--cache", "1GiB", "--cache-tokens", "1000"], "give --cache (bytes) or --cache-tokens"),
        (["--cache", "1GB2"], "--cache: invalid size '1GB2'"),
        (["--cache", "1MiB"], "--cache 1MiB: holds 0 blocks"),
        (["--cache-tokens", "lots"], "--cache-tokens: cache size 'lots' is not an integer"),
        (
            ["--cache-tokens", "4"],
            "--cache-tokens: cache size 4 must be ≥ 256 (2 blocks of 128 "
            "tokens, one is vLLM's null block)",
        ),
        (["--cache-tokens", "256,300"], "--cache-tokens 256,300: two sizes hold the same blocks"),
        (["--cache", "1GiB,1024MiB"], "--cache: cache size 1024MiB is given twice"),
        (["--token-scale", "1/3"], "token scale 1/3 gives blocks of 8 × 1/3 = 8/3 tokens"),
        (["--token-scale", "zero"], "invalid token scale 'zero'"),
    ],
)
def test_bad_options_exit_2_with_one_line(hand_trace: Path, args: list[str], message: str) -> None:
    code, out = run(str(hand_trace), "--no-plot", "--trace-block-tokens", "8", *args)
    assert code == 2
    assert out.startswith(f"Error: {message}"), out
    assert out.count("\n") == 1


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("nan", "'nan' is not a finite number"),
        ("1e999", "'1e999' is not a finite number"),
        ("0.0001", "0.0001 must be ≥ 0.001"),  # a count ÷ 5e-324 s would be an infinite rate
    ],
)
def test_a_bad_peak_window_is_refused_by_its_option(
    hand_trace: Path, value: str, message: str
) -> None:
    code, out = run(str(hand_trace), "--no-plot", "--peak-window", value)
    assert code == 2
    assert f"Error: Invalid value for '--peak-window': {message}" in out


def test_bad_trace_line_exits_2_naming_the_line(tmp_path: Path) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text(json.dumps(HAND[0]) + "\n" + '{"timestamp": 5, "input_length": -2}\n')
    code, out = run(str(path), "--no-plot", "--trace-block-tokens", "8")
    assert code == 2
    assert (
        out == f"Error: {path}:2: input_length must be ≥ 1, got -2; missing field 'output_length'\n"
    )
    code, out = run(str(tmp_path / "absent.jsonl"), "--no-plot")
    assert code == 2 and "cannot read the trace" in out


def test_full_sample(tmp_path: Path) -> None:
    """The 3,993-request sample with the default sweep and plot, at the trace's own 512-token
    blocks to keep the fast tier fast (vLLM CPU's 128 is the default; its maximum, 65.10 %, is
    pinned in tests/scenarios/test_prefix_cache_model.py): the maximum is the model's 65.04 %
    (docs/traces.md explains the paper's 66 %)."""
    plot = tmp_path / "sample.png"
    code, out = run(str(SAMPLE), "--block-tokens", "512", "--json", "--plot", str(plot))
    assert code == 0, out
    got = json.loads(out)
    assert got["summary"]["requests"] == 3993
    assert got["block_tokens"] == 512 and got["kv_bytes_per_token"] == 57_344
    assert got["max_hit_rate"] == pytest.approx(0.6504, abs=5e-5)
    rates = [p["hit_rate"] for p in got["predicted"]]
    assert len(rates) == 8 and rates == sorted(rates)
    assert rates[-1] == pytest.approx(got["max_hit_rate"])  # the footprint reaches it
    target = got["target_cache_tokens"]
    assert target is not None
    # The first swept size at or above the target reaches 90 % of the maximum; all below miss.
    reached = [p["cache_tokens"] for p in got["predicted"] if p["hit_rate"] >= 0.9 * rates[-1]]
    missed = [p["cache_tokens"] for p in got["predicted"] if p["hit_rate"] < 0.9 * rates[-1]]
    assert max(missed) < target <= min(reached)
    assert plot.exists()


def test_sessions_trace(tmp_path: Path) -> None:
    """Two sessions given by lengths (trace blocks of 8, server blocks of 4). Session a:
    turn 0 (12 tokens, fresh ids -1 -2), turn 1 (20 tokens: -1 -2 then fresh -3) extends
    it; session b one turn of 8 tokens (-4). Server keys: a0 k(-1) k(-1) k(-1,-2); a1 the
    same three, then k(-1,-2), k(-1,-2,-3); b k(-4) k(-4). Unbounded, in file order a0, b,
    a1: a1 may hit (20 − 1) // 4 = 4 blocks and finds the first 3 (12 tokens) cached: 12 of
    12 + 8 + 20 = 40 tokens."""
    path = tmp_path / "sessions.jsonl"
    lines = [
        {"session_id": "a", "timestamp": 0, "input_length": 12, "output_length": 2},
        {"session_id": "b", "timestamp": 500, "input_length": 8, "output_length": 1},
        {"session_id": "a", "delay": 1000, "input_length": 20, "output_length": 3},
    ]
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    code, out = run(str(path), *HAND_ARGS, "--json", "--cache-tokens", "400")
    assert code == 0, out
    got = json.loads(out)
    assert got["trace"]["kind"] == "sessions"
    assert (got["summary"]["sessions"], got["summary"]["session_turns"]) == (2, 3)
    assert got["summary"]["span_s"] == 0.5  # the later turn carries no timestamp
    assert got["max_hit_rate"] == pytest.approx(12 / 40)


@pytest.mark.parametrize("window", ["nan", "inf", "1e-320", "0.0009"])
def test_a_peak_window_that_would_write_nan_or_infinity_is_refused(
    hand_trace: Path, window: str
) -> None:
    # nan would be printed as NaN, inf and 1e-320 s (a count divided into an infinite rate)
    # as Infinity: each is refused in one line naming the flag, exit 2, and nothing that is
    # not JSON reaches stdout. The window is checked where the flag is read and again by
    # scenarios.trace_stats.summarize (a finite number of seconds ≥ 1 ms).
    code, out = run(str(hand_trace), *HAND_ARGS, "--json", "--peak-window", window)
    assert code == 2, out
    (error,) = [x for x in out.splitlines() if x.startswith("Error:")]
    assert error.startswith("Error: Invalid value for '--peak-window'"), error
    assert "NaN" not in out and "Infinity" not in out and "Traceback" not in out
    with pytest.raises(ValueError, match=r"peak window must be a finite number of seconds ≥"):
        summarize(load_trace(hand_trace, block_tokens=8), float(window))


def test_dev_zero_is_one_line_saying_it_is_a_device() -> None:
    # It was read to the 256 MiB limit and called too large; it is no file at all.
    code, out = run("/dev/zero", "--no-plot")
    assert code == 2, out
    assert out == (
        "Error: /dev/zero: cannot read the trace: is a character device, not a regular file\n"
    )


def test_a_file_of_zeros_is_one_line_not_a_memory_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    zeros = tmp_path / "zeros.jsonl"  # 16 MiB + 1 NUL bytes, sparse: one endless line
    with open(zeros, "wb") as fh:
        fh.truncate(2**24 + 1)
    monkeypatch.setattr("scenarios.traces.TRACE_MAX_BYTES", 2**24)
    code, out = run(str(zeros), "--no-plot")
    assert code == 2, out
    assert out == f"Error: {zeros}: larger than 16,777,216 bytes, the limit of a trace file\n"


def test_a_token_scale_past_the_length_limit_is_one_line(tmp_path: Path) -> None:
    # The longest legal prompt (2**24 tokens, 32,768 ids of 512) at scale 10**9: refused
    # with the figures, before any prompt or model block is made.
    path = tmp_path / "max.jsonl"
    line = {"timestamp": 0, "input_length": 2**24, "output_length": 1,
            "hash_ids": list(range(2**15))}  # fmt: skip
    path.write_text(json.dumps(line) + "\n")
    code, out = run(str(path), "--token-scale", "1e9", "--no-plot")
    assert code == 2, out
    assert "token scale 1000000000 makes its 16,777,216 tokens 16,777,216,000,000,000" in out
    assert "Traceback" not in out
