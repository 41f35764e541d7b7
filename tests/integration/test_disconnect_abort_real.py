"""disconnect-abort on the real embedded vLLM (the session's shared 1 GiB server).

Four streaming requests of 128 + 256 tokens; each client disconnects after 16 tokens. Directly
and through the gateway the server drops them within about a second; through the gateway with
propagation off they run on to their 256 tokens, generating 4 × 240 tokens for nobody.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.vllm_fixtures import SharedServer, loadgen, read_report, run_scenario

pytestmark = pytest.mark.vllm


@pytest.fixture(scope="module")
def abort_run(server_1gib: SharedServer, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return run_scenario(
        tmp_path_factory, "disconnect-abort",
        "--url", server_1gib.url,
        "--requests", "4",
        "--prompt-tokens", "128",
        "--output-tokens", "256",
        "--disconnect-after-tokens", "16",
        "--settle-s", "0.6",
    )  # fmt: skip


def _rows(run: Path) -> dict[str, dict]:
    report = read_report(run)
    return {r["case"]: r for r in report["details"]["rows"]}


def test_all_disconnect_verdicts_pass(abort_run: Path) -> None:
    report = read_report(abort_run)
    failed = [v for v in report["verdicts"] if v["passed"] is not True]
    assert not failed, json.dumps(failed, indent=2)
    assert report["verdict_summary"] == {"passed": 3, "failed": 0, "undecided": 0}


def test_each_client_disconnected_after_exactly_16_tokens(abort_run: Path) -> None:
    for row in _rows(abort_run).values():
        assert row["disconnected"] == 4
        assert row["received_tokens_at_disconnect"] == [16]


def test_propagated_disconnects_free_the_server_within_a_second(abort_run: Path) -> None:
    rows = _rows(abort_run)
    for case in ("direct", "gateway"):
        assert rows[case]["time_to_free_s"] is not None and rows[case]["time_to_free_s"] <= 1.0
        assert rows[case]["wasted_tokens"] <= 0.1 * rows[case]["orphan_budget_tokens"]  # 96


def test_the_broken_proxy_leaves_orphans_generating_for_nobody(abort_run: Path) -> None:
    row = _rows(abort_run)["broken-proxy"]
    assert row["orphan_budget_tokens"] == 960  # 4 × (256 − 16)
    assert row["wasted_tokens"] >= 0.8 * 960
    assert row["zombie_s"] > 1.0
    assert row["server_idle_after"] is True  # the run waited for the orphans to finish


def test_gateway_cases_kept_the_gateway_log_and_validate_passes(abort_run: Path) -> None:
    assert "gateway listening on" in (abort_run / "cases" / "gateway" / "gateway.log").read_text()
    assert loadgen("validate", str(abort_run), timeout=120).returncode == 0
