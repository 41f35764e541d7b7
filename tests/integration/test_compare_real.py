"""The regression gate on the real embedded vLLM, kept short: one reduced prefix-eviction
``loadgen gate`` whose candidate is the same release made worse on purpose
(``--max-num-seqs 1``: the four closed-loop clients are served one at a time), then a third
run of the same plan compared with the gate's baseline (a same-version pair).

Reduced run (as ``test_prefix_eviction_real``, without the control case): a 160 MiB cache,
4 anchors of 512 tokens + 32-token suffixes, 16 requests per anchor phase, 4 output tokens.
With one request at a time, a request waits for the ones ahead of it, so TTFT rises several
times (far beyond the 15 % tolerance); a same-version pair must show no regression.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from vllm_fixtures import loadgen

from server.engines import project_engine

pytestmark = pytest.mark.vllm

REDUCED = (
    "--cache", "160MiB",
    "--control", "none",
    "--prefix-tokens", "512",
    "--suffix-tokens", "32",
    "--requests", "16",
    "--pollution-requests", "1",
    "--output-tokens", "4",
    "--settle-s", "0.6",
)  # fmt: skip


@pytest.fixture(scope="module")
def gate_dir(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, int]:
    own = project_engine().version
    out = tmp_path_factory.mktemp("gate") / "gate"
    proc = loadgen(
        "gate", "prefix-eviction", *REDUCED,
        "--baseline-vllm", own, "--candidate-vllm", own, "--repeats", "1",
        "--candidate-vllm-args", "--max-num-seqs 1",
        "--out", str(out),
        timeout=900,
    )  # fmt: skip
    assert (out / "compare.json").exists(), f"{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return out, proc.returncode


def test_a_candidate_serving_one_request_at_a_time_regresses_with_exit_code_1(
    gate_dir: tuple[Path, int],
) -> None:
    out, code = gate_dir
    data = json.loads((out / "compare.json").read_text())
    assert code == 1 and data["exit_code"] == 1
    ttft = {
        m["phase"]: m for m in data["metrics"] if m["metric"] == "ttft_ms" and m["stat"] == "mean"
    }
    # Warm: every request hits, so the baseline's TTFT is one short step for four batched
    # requests; served one at a time, the later ones wait for whole requests ahead of them.
    assert ttft["warm"]["classification"] == "regression", json.dumps(ttft["warm"])
    assert ttft["warm"]["low"] > 1.15
    argv = json.loads((out / "candidate" / "run-1" / "plan.json").read_text())["cases"][0]
    assert argv["server"]["extra_args"][-2:] == ["--max-num-seqs", "1"]


def test_a_same_version_pair_reports_no_regression(
    gate_dir: tuple[Path, int], tmp_path: Path
) -> None:
    out, _ = gate_dir
    again = tmp_path / "again"
    run = loadgen("run", "prefix-eviction", *REDUCED, "--out", str(again), timeout=900)
    assert run.returncode == 0, f"{run.stdout[-3000:]}\n{run.stderr[-3000:]}"
    compared = loadgen(
        "compare", str(out / "baseline" / "run-1"), str(again), "--out", str(tmp_path / "cmp")
    )
    data = json.loads((tmp_path / "cmp" / "compare.json").read_text())
    regressions = [m for m in data["metrics"] if m["classification"] == "regression"]
    assert not regressions, json.dumps(regressions, indent=2)
    assert compared.returncode == 0, compared.stdout[-3000:]
    assert data["baseline"]["vllm_versions"] == data["candidate"]["vllm_versions"]
