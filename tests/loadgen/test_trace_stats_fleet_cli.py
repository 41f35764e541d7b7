"""``loadgen trace stats --replicas N --routing P[,P…]``: the fleet table on a hand-made
trace for 2 replicas, and bad fleet options refused in one line with exit 2.

Trace and server blocks of 4 tokens; every prompt is 9 tokens (hash ids for 3 trace blocks:
2 full server blocks and a partial one), output 1: a request holds ceil(9 / 4) = 3 blocks and
a repeat hits its 2 full blocks, 8 of 9 tokens. Groups A (ids 1 2 3) and B (ids 4 5 6), sent
A B A B; each replica has 16 tokens = 4 blocks, 3 usable (one is the null block): one
request's worth.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from loadgen.cli import main

A = {"input_length": 9, "output_length": 1, "hash_ids": [1, 2, 3]}
B = {"input_length": 9, "output_length": 1, "hash_ids": [4, 5, 6]}
ARGS = ["--trace-block-tokens", "4", "--block-tokens", "4", "--no-plot", "--cache-tokens", "16"]


def run(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, ["trace", "stats", *args])
    return result.exit_code, result.output


@pytest.fixture
def abab(tmp_path: Path) -> Path:
    path = tmp_path / "abab.jsonl"
    rows = [{"timestamp": 1000 * i, **r} for i, r in enumerate((A, B, A, B))]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_fleet_table_for_two_replicas(abab: Path) -> None:
    """Pooled (one cache of 6 usable blocks): A and B both stay, A-2 and B-2 hit 8 each:
    16 / 36. One replica of 3: each request evicts the other group: 0. Spread: A-1 → 0, B-1 →
    1, A-2 → 1, B-2 → 0: every replica sees both groups: 0. Round-robin: A on replica 0, B on
    replica 1: 16 / 36, 2 requests and 9 + 1 = 10 prefill tokens on each (imbalance 1)."""
    code, out = run(str(abab), *ARGS, "--replicas", "2", "--routing",
                    "round-robin,vllm-router:round_robin,prefix-hash", "--json")  # fmt: skip
    assert code == 0, out
    fleet = json.loads(out)["fleet"]
    assert (fleet["replicas"], fleet["capacity_blocks"], fleet["concurrency"]) == (2, 3, 1)
    assert fleet["pooled_hit_rate"] == pytest.approx(16 / 36)
    assert fleet["single_replica_hit_rate"] == 0.0
    assert fleet["spread"]["hit_rate"] == 0.0
    rr, vrr, ph = fleet["policies"]
    assert [p["policy"] for p in (rr, vrr, ph)] == [
        "round-robin",
        "vllm-router:round_robin",
        "prefix-hash",
    ]
    assert rr["exact"] and rr["hit_rate"] == pytest.approx(16 / 36)
    assert rr["low"]["requests_per_replica"] == [2, 2]
    assert rr["low"]["prefill_tokens_per_replica"] == [10, 10]
    assert rr["low"]["request_imbalance"] == 1.0
    assert vrr["hit_rate"] == pytest.approx(16 / 36)
    # prefix-hash: A and B on one replica forget each other (0); apart they hit (16 / 36).
    assert ph["hit_rate"] in (0.0, pytest.approx(16 / 36))


def test_fleet_text_names_bounds_and_brackets(abab: Path) -> None:
    code, out = run(str(abab), *ARGS, "--replicas", "2", "--routing", "vllm-router:random")
    assert code == 0, out
    assert "bound: pooled (one N × C cache)" in out and "44.44%" in out
    assert "vllm-router:random: its uniform choice: lowest and highest of 199 seeded" in out
    assert "with probability 99%" in out  # 198 / 200: one more draw inside the range


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--routing", "prefix-hash"], "Error: --routing needs --replicas N"),
        (
            ["--replicas", "2", "--routing", "hash"],
            "Error: --routing: unknown routing policy 'hash'",
        ),
        (["--replicas", "2", "--routing", ","], "Error: --routing: no routing policy given"),
        # One replica: every policy sends everything to it, as run/bench/gate refuse too.
        (
            ["--replicas", "1", "--routing", "prefix-hash"],
            "Error: --routing needs --replicas 2 or more",
        ),
        # Flags only the fleet prediction reads, given without --replicas: ignored, so refused.
        (["--routing-epsilon", "0.5"], "Error: --routing-epsilon needs --replicas N"),
        (["--routing-prefix-blocks", "4"], "Error: --routing-prefix-blocks needs --replicas N"),
        (["--concurrency", "2"], "Error: --concurrency needs --replicas N"),
        (["--seed", "0"], "Error: --seed needs --replicas N"),  # its default, but given
        # A policy's own flag where --routing leaves that policy out.
        (
            ["--replicas", "2", "--routing", "round-robin", "--routing-epsilon", "3"],
            "Error: --routing-epsilon applies only to prefix-hash, which --routing 'round-robin' "
            "leaves out",
        ),
        (
            ["--replicas", "2", "--routing", "least-loaded", "--routing-prefix-blocks", "4"],
            "Error: --routing-prefix-blocks applies only to prefix-hash, which --routing "
            "'least-loaded' leaves out",
        ),
        (
            [
                "--replicas",
                "2",
                "--routing",
                "vllm-router:random",
                "--worker-urls",
                "http://127.0.0.1:8000,http://127.0.0.1:8001",
            ],
            "Error: --worker-urls applies only to vllm-router:consistent_hash, which --routing "
            "'vllm-router:random' leaves out",
        ),
        (["--replicas", "2", "--cache-tokens", "16,32"], "exactly one per-replica cache size"),
        (["--replicas", "2", "--worker-urls", "http://a"], "--worker-urls: 1 URLs for 2"),
        (["--replicas", "0"], "Invalid value for '--replicas'"),
        (["--replicas", "2", "--routing", "round-robin,round-robin"], "given twice"),
    ],
)
def test_bad_fleet_options_are_one_line_exit_2(abab: Path, extra: list[str], message: str) -> None:
    code, out = run(str(abab), *ARGS, *extra)
    assert code == 2, out
    errors = [line for line in out.splitlines() if line.startswith("Error")]
    assert len(errors) == 1 and message in errors[0], out
    assert "Traceback" not in out


@pytest.mark.parametrize(
    "extra",
    [
        [],  # --routing-epsilon, --routing-prefix-blocks, --seed at their defaults: no fleet
        ["--replicas", "1"],  # no --routing: the table of one replica
        ["--replicas", "2", "--routing", "round-robin"],  # prefix-hash's flags at defaults
        [
            "--replicas",
            "2",
            "--routing",
            "round-robin,prefix-hash",
            "--routing-epsilon",
            "3",
            "--routing-prefix-blocks",
            "1",
            "--concurrency",
            "2",
            "--seed",
            "7",
        ],
        [
            "--replicas",
            "2",
            "--routing",
            "vllm-router:consistent_hash",
            "--worker-urls",
            "http://127.0.0.1:8000,http://127.0.0.1:8001",
        ],
    ],
)
def test_fleet_flags_that_apply_are_taken(abab: Path, extra: list[str]) -> None:
    code, out = run(str(abab), *ARGS, *extra)
    assert code == 0, out
