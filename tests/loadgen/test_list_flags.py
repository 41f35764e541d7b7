"""Every comma-separated list flag refuses an empty item (a doubled, leading or trailing
comma, or an item of spaces only) in one line naming the flag and the value, exit 2, before
anything starts: a value lost between two commas is a typo, never silently dropped. All of
them split through ``scenarios.values.list_items``, whose message is
``"{what} list {value!r} has an empty item between commas"``.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from loadgen.cli import main

GATE = ["--baseline-vllm", "0.1.0", "--candidate-vllm", "0.2.0"]

REFUSED = [
    (["run", "trace-replay", "--replicas", "2", "--routing", "round-robin,,prefix-hash"],
     "--routing: routing policy list 'round-robin,,prefix-hash' has an empty item"),
    (["run", "bench", "--replicas", "2", "--routing", ",round-robin"],
     "--routing: routing policy list ',round-robin' has an empty item"),
    (["gate", "trace-replay", *GATE, "--replicas", "2", "--routing", "prefix-hash,"],
     "--routing: routing policy list 'prefix-hash,' has an empty item"),
    (["run", "trace-replay", "--speedup", "1,,2"], "--speedup: speedup list '1,,2' has an"),
    (["run", "trace-replay", "--cache", "1GiB, ,2GiB"],
     "--cache: cache size list '1GiB, ,2GiB' has an empty item"),
    (["run", "bench", "--rate", ",2"], "--rate: rate list ',2' has an empty item"),
    (["run", "bench", "--concurrency", "1,4,"],
     "--concurrency: concurrency list '1,4,' has an empty item"),
    (["run", "slo-goodput", "--rates", "2,,4"], "--rates: rate list '2,,4' has an empty item"),
    (["run", "slo-goodput", "--rate-fractions", "0.5,,1"],
     "--rate-fractions: rate fraction list '0.5,,1' has an empty item"),
    (["run", "slo-goodput", "--slo", "ttft=200ms,,tpot=50ms"],
     "--slo: SLO list 'ttft=200ms,,tpot=50ms' has an empty item"),
    (["run", "overload", "--admission", "none,,gateway:4"],
     "--admission: admission arm list 'none,,gateway:4' has an empty item"),
    (["run", "disconnect-abort", "--paths", "direct,"],
     "--paths: path list 'direct,' has an empty item"),
    (["run", "kv-preemption", "--cases", "1GiB:8,,4GiB:16"],
     "--cases: case list '1GiB:8,,4GiB:16' has an empty item"),
    (["run", "spec-decode", "--cases", ",baseline"],
     "--cases: case list ',baseline' has an empty item"),
    (["export", "RUN", "--percentiles", "50,,99"],
     "percentile list '50,,99' has an empty item"),
    (["trace", "stats", "T", "--cache", "1GiB,,2GiB"],
     "--cache: cache size list '1GiB,,2GiB' has an empty item"),
    (["trace", "stats", "T", "--cache-tokens", "16,"],
     "--cache-tokens: cache size list '16,' has an empty item"),
    (["trace", "stats", "T", "--cache-tokens", "1024", "--replicas", "2", "--routing",
      "round-robin,,prefix-hash"],
     "--routing: routing policy list 'round-robin,,prefix-hash' has an empty item"),
    (["trace", "stats", "T", "--cache-tokens", "1024", "--replicas", "2", "--worker-urls",
      "http://127.0.0.1:8000,,http://127.0.0.1:8001"],
     "--worker-urls: worker URL list 'http://127.0.0.1:8000,,http://127.0.0.1:8001' has an"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("args", "message"), REFUSED, ids=lambda x: " ".join(x) if isinstance(x, list) else None
)
def test_an_empty_list_item_is_refused_in_one_line(
    tmp_path: Path, args: list[str], message: str
) -> None:
    trace = tmp_path / "t.jsonl"
    trace.write_text('{"timestamp": 0, "input_length": 9, "output_length": 1, "hash_ids": [1]}\n')
    (tmp_path / "plan.json").write_text("{}")  # export's "is it a run directory" check
    args = [{"T": str(trace), "RUN": str(tmp_path)}.get(a, a) for a in args]
    out_dir = tmp_path / "out"
    extra = ["--out", str(out_dir)] if args[0] in ("run", "gate") else []
    result = CliRunner().invoke(main, [*args, *extra])
    assert result.exit_code == 2, result.output
    errors = [line for line in result.output.splitlines() if line.startswith("Error")]
    assert len(errors) == 1 and message in errors[0], result.output
    assert errors[0].endswith("has an empty item between commas")
    assert "Traceback" not in result.output
    assert not out_dir.exists()
