"""The breaker episode on real vLLM replicas: kill one behind the gateway, watch it recover.

Two 512 MiB replicas, 1 request/s for 90 s, replica 1 stopped at 5 s and restarted on its
port. The gateway's breaker (3 failures, 2 s cool-down) must open, probe and close again, and
with the gateway's retry on refused connections nearly every request succeeds.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.page_checks import check_report_page
from tests.support.vllm_fixtures import loadgen, read_report, run_scenario

pytestmark = pytest.mark.vllm


@pytest.fixture(scope="module")
def episode_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return run_scenario(
        tmp_path_factory, "breaker",
        "--cache", "512MiB",
        "--rate-rps", "1",
        "--duration-s", "90",
        "--kill-at-s", "5",
        "--output-tokens", "8",
        "--breaker-cooldown-s", "2",
    )  # fmt: skip


def _episode(run: Path) -> dict:
    report = read_report(run)
    return report["details"]["episodes"][0]


def test_breaker_verdict_passes(episode_run: Path) -> None:
    report = read_report(episode_run)
    assert [v["passed"] for v in report["verdicts"]] == [True], report["verdicts"]


def test_the_killed_replica_opens_probes_and_closes(episode_run: Path) -> None:
    ep = _episode(episode_run)
    killed, back = ep["faults"][0], ep["faults"][1]
    assert killed["fault"] == "kill_replica" and back["fault"] == "restarted"
    assert ep["transitions_source"] == "events"  # the gateway's events file, not its log
    mine = [
        (t["from_state"], t["to_state"])
        for t in ep["transitions"]
        if t["upstream"] == killed["url"]
    ]
    assert mine[0] == ("closed", "open")
    assert ("open", "half_open") in mine
    assert mine[-1] == ("half_open", "closed")


def test_traffic_moved_to_the_healthy_replica_during_the_outage(episode_run: Path) -> None:
    ep = _episode(episode_run)
    killed, back = ep["faults"][0], ep["faults"][1]
    during = ep["per_second"][int(killed["killed_s"]) + 2 : int(back["healthy_s"])]
    served = {u for second in during for u in second["by_upstream"]}
    assert killed["url"] not in served
    assert sum(second["ok"] for second in during) > 0
    assert ep["success_ratio"] >= 0.9


def test_validate_passes(episode_run: Path) -> None:
    assert loadgen("validate", str(episode_run), timeout=120).returncode == 0


def test_the_report_page_opens_offline_with_every_verdict_and_figure(
    episode_run: Path, tmp_path: Path
) -> None:
    check_report_page(episode_run, tmp_path)
