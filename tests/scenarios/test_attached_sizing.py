"""Attached to a server, a plan's sizing shows what is used: the server's capacity and block
size, never the embedded default cache sizes that were not used."""

from __future__ import annotations

from scenarios.bench import Bench, BenchParams
from scenarios.kv_preemption import KVPreemption, KVPreemptionParams
from server.capacity import KVCapacity

#: An attached server of 4 GiB: 585 blocks of 128 tokens = 74,880 tokens.
ATTACHED = KVCapacity(74_880, 128, 585, 4 * 2**30, "metrics")


def test_kv_preemption_attached_sizing_has_no_default_matrix() -> None:
    params = KVPreemptionParams(url="http://127.0.0.1:8000", cases="1GiB:8")
    sizing = KVPreemption().plan(params, ATTACHED).sizing
    assert "matrix" not in sizing  # '1GiB:8' would name a cache size that was not used
    assert sizing["concurrency"] == [8]
    assert sizing["first_case_capacity_tokens"] == 74_880 and sizing["block_size"] == 128


def test_bench_attached_sizing() -> None:
    sizing = Bench().plan(BenchParams(url="http://127.0.0.1:8000"), ATTACHED).sizing
    assert "kv_cache" not in sizing
    assert (sizing["kv_capacity_tokens"], sizing["block_size"], sizing["num_blocks"]) == (
        74_880, 128, 585,
    )  # fmt: skip
    assert sizing["server"] == "attached"
