"""A reduced spec-decode on the real embedded vLLM: baseline, n-gram and an echo draft.

256 MiB holds 36 blocks of 128 tokens (2^28 // (128 × 57,344 B)); with the 2-layer draft's
KV beside the target's, 2^28 // (128 × 61,440 B) = 34 blocks. 4 requests of 128 + 64 tokens
(+ 3 proposals) hold 2 blocks each. Three server starts (~25 s each here) and phases of a few
seconds: about two minutes.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.page_checks import check_report_page
from tests.support.vllm_fixtures import loadgen, read_report, run_scenario

pytestmark = pytest.mark.vllm


@pytest.fixture(scope="module")
def reduced_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return run_scenario(
        tmp_path_factory, "spec-decode",
        "--cache", "256MiB",
        "--cases", "baseline,ngram,draft-echo",
        "--concurrency", "1,4",
        "--requests", "4",
        "--prompt-tokens", "128",
        "--output-tokens", "64",
        "--settle-s", "0.6",
    )  # fmt: skip


def _rows(report: dict) -> dict[tuple[str, str], dict]:
    return {(r["case"], r["phase"]): r for r in report["details"]["rows"]}


def test_every_verdict_passes(reduced_run: Path) -> None:
    report = read_report(reduced_run)
    failed = [v for v in report["verdicts"] if v["passed"] is not True]
    assert not failed, json.dumps(failed, indent=2)


def test_the_draft_takes_the_kv_space_the_plan_predicted(reduced_run: Path) -> None:
    report = read_report(reduced_run)
    capacities = report["details"]["capacities"]
    assert capacities == {"baseline": 4_608, "ngram": 4_608, "draft-echo": 4_352}
    assert report["sizing"]["predicted_capacity_tokens"] == capacities


def test_acceptance_counters_and_the_client_agree(reduced_run: Path) -> None:
    rows = _rows(read_report(reduced_run))
    for phase in ("c1", "c4"):
        ngram, echo = rows[("ngram", phase)], rows[("draft-echo", phase)]
        # The random-weight model repeats itself greedily: prompt lookup is nearly always right.
        assert ngram["alpha"] > 0.5
        assert 0.0 <= echo["alpha"] <= 1.0
        # A draft model proposes at every decode step: 4 requests × 63 decode tokens.
        assert echo["steps_without_drafts"] == 0
        assert echo["drafts"] == echo["decode_steps"]
        for row in (ngram, echo):
            assert sum(row["accepted_per_position"]) == row["accepted"]
            assert len(row["per_position"]) == 3
        assert rows[("baseline", phase)]["client"]["tokens"] == 4 * 63


def test_report_rebuilds_identically_and_validates(reduced_run: Path) -> None:
    names = ("report.json", "report.md", "report.html")
    before = {name: (reduced_run / name).read_bytes() for name in names}
    assert loadgen("report", str(reduced_run), timeout=300).returncode == 0
    after = {name: (reduced_run / name).read_bytes() for name in names}
    assert after == before
    markdown = before["report.md"].decode()
    assert markdown.rstrip().splitlines()[-1].startswith("- draft-echo: speculation ")
    assert (reduced_run / "plots" / "spec_per_position.png").exists()
    assert loadgen("validate", str(reduced_run), timeout=120).returncode == 0


def test_the_report_page_opens_offline_with_every_verdict_and_figure(
    reduced_run: Path, tmp_path: Path
) -> None:
    check_report_page(reduced_run, tmp_path)
