"""A reduced kv-preemption on the real embedded vLLM: preemption in one case, none in the other.

160 MiB = 22 blocks of 128 tokens (21 usable). Requests of 255 + 129 tokens hold 2 blocks after
prefill and 3 at the end of decode: 6 at once need 18 blocks (fits), 10 at once start in 20 and
grow to 30 (preempts). Both cases share one server start.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from vllm_fixtures import loadgen, read_report, run_scenario

pytestmark = pytest.mark.vllm


@pytest.fixture(scope="module")
def reduced_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return run_scenario(
        tmp_path_factory, "kv-preemption",
        "--cases", "160MiB:6,160MiB:10",
        "--prompt-tokens", "255",
        "--output-tokens", "129",
        "--settle-s", "0.6",
    )  # fmt: skip


def test_verdicts_pass_with_preemption_only_where_predicted(reduced_run: Path) -> None:
    report = read_report(reduced_run)
    failed = [v for v in report["verdicts"] if v["passed"] is not True]
    assert not failed, json.dumps(failed, indent=2)
    rows = {r["case"]: r for r in report["details"]["rows"]}
    assert rows["160MiB-c6"]["preemptions"] == 0
    assert rows["160MiB-c10"]["preemptions"] > 0
    assert rows["160MiB-c6"]["hand_calculation"]["final_working_set_blocks"] == 18
    assert rows["160MiB-c10"]["hand_calculation"]["final_working_set_blocks"] == 30
    assert rows["160MiB-c10"]["hand_calculation"]["usable_blocks"] == 21


def test_both_cases_shared_one_server_start(reduced_run: Path) -> None:
    pids = {
        json.loads((reduced_run / "cases" / name / "case.json").read_text())["server"]["pid"]
        for name in ("160MiB-c6", "160MiB-c10")
    }
    assert len(pids) == 1


def test_every_request_completed_with_its_exact_output(reduced_run: Path) -> None:
    for name, size in (("160MiB-c6", 6), ("160MiB-c10", 10)):
        lines = (reduced_run / "cases" / name / "requests.jsonl").read_text().splitlines()
        records = [json.loads(line) for line in lines]
        assert len(records) == size
        assert all(r["status"] == "ok" and r["usage_completion_tokens"] == 129 for r in records)


def test_report_shows_the_hand_calculation_and_validate_passes(reduced_run: Path) -> None:
    markdown = (reduced_run / "report.md").read_text()
    assert "## Hand calculation" in markdown
    assert (reduced_run / "plots" / "timeline_160MiB-c10.png").exists()
    assert loadgen("validate", str(reduced_run), timeout=120).returncode == 0
