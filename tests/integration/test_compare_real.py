"""The regression gate on the real embedded vLLM, kept short: a reduced prefix-eviction
``loadgen gate`` of the project's vLLM against itself (2 runs a side, A B B A), then one run of
the same release made worse on purpose (``--max-num-seqs 1``: the four closed-loop clients are
served one at a time) compared with the gate's baseline side.

Reduced run (as ``test_prefix_eviction_real``, without the control case): a 160 MiB cache,
4 anchors of 512 tokens + 32-token suffixes, 16 requests per anchor phase, 4 output tokens.
With one request at a time a request waits for the ones ahead of it, so TTFT rises several
times (far beyond the 15 % tolerance); a same-version pair must show no regression.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from server.engines import project_engine
from tests.support.vllm_fixtures import loadgen

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
def same_version_gate(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, int]:
    own = project_engine().version
    out = tmp_path_factory.mktemp("gate") / "gate"
    proc = loadgen(
        "gate", "prefix-eviction", *REDUCED,
        "--baseline-vllm", own, "--candidate-vllm", own, "--repeats", "2",
        "--out", str(out),
        timeout=900,
    )  # fmt: skip
    assert (out / "compare.json").exists(), f"{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return out, proc.returncode


def test_a_same_version_gate_reports_no_regression(same_version_gate: tuple[Path, int]) -> None:
    out, code = same_version_gate
    data = json.loads((out / "compare.json").read_text())
    regressions = [m for m in data["metrics"] if m["classification"] == "regression"]
    assert not regressions, json.dumps(regressions, indent=2)
    assert all(v["classification"] == "no change" for v in data["verdicts"])
    # No regression; the headline is "no regression" (0) when every key metric is decided, or
    # "inconclusive" (3) when 16-request phases leave one undecided (the pairs it needs named).
    assert data["decision"]["regressions"] == []
    assert code == data["exit_code"] and code in (0, 3), data["decision"]["line"]
    assert data["baseline"]["vllm_versions"] == data["candidate"]["vllm_versions"]
    assert [len(data[side]["runs"]) for side in ("baseline", "candidate")] == [2, 2]


def test_a_candidate_serving_one_request_at_a_time_regresses_with_exit_code_1(
    same_version_gate: tuple[Path, int], tmp_path: Path
) -> None:
    out, _ = same_version_gate
    worse = tmp_path / "worse"
    run = loadgen(
        "run", "prefix-eviction", *REDUCED, "--vllm-args", "--max-num-seqs 1",
        "--out", str(worse), timeout=900,
    )  # fmt: skip
    assert run.returncode == 0, f"{run.stdout[-3000:]}\n{run.stderr[-3000:]}"
    compared = loadgen("compare", str(out / "baseline"), str(worse), "--out", str(tmp_path / "cmp"))
    data = json.loads((tmp_path / "cmp" / "compare.json").read_text())
    assert compared.returncode == 1 and data["exit_code"] == 1, compared.stdout[-3000:]
    ttft = {
        m["phase"]: m for m in data["metrics"] if m["metric"] == "ttft_ms" and m["stat"] == "mean"
    }
    # Warm: every request hits, so the baseline's TTFT is one short step for four batched
    # requests; served one at a time, the later ones wait for whole requests ahead of them.
    assert ttft["warm"]["classification"] == "regression", json.dumps(ttft["warm"])
    assert ttft["warm"]["low"] > 1.15
    server = json.loads((worse / "plan.json").read_text())["cases"][0]["server"]
    assert server["extra_args"][-2:] == ["--max-num-seqs", "1"]
