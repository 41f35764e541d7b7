"""A reduced kv-preemption on the real embedded vLLM: preemption in one case, none in the other.

160 MiB = 22 blocks of 128 tokens (21 usable). Requests of 256 + 129 tokens hold 2 blocks after
prefill and 3 at the end of decode, ceil((256 + 129 − 1) / 128): vLLM never writes the last
output token to the cache. 6 at once need 18 blocks (fits; counting the last token, 4 blocks
each, 24, would predict preemption), 10 at once start in 20 and grow to 30 (preempts). Both
cases share one server start.
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
        tmp_path_factory, "kv-preemption",
        "--cases", "160MiB:6,160MiB:10",
        "--prompt-tokens", "256",
        "--output-tokens", "129",
        "--settle-s", "0.6",
    )  # fmt: skip


def _scrapes_around_phase(run: Path, case: str) -> str:
    """The case's scrape ticks from 1 s before its phase to its end, relative to the phase
    start (ms), with the KV usage each read: what a failed KV-peak verdict is explained by."""
    cdir = run / "cases" / case
    phase = json.loads((cdir / "phases.jsonl").read_text().splitlines()[0])
    start, end = phase["start_ns"], phase["end_ns"]
    kv = {
        s["scrape"]: s["value"]
        for s in map(json.loads, (cdir / "metrics" / "samples.jsonl").read_text().splitlines())
        if s["name"] == "kv_cache_usage_perc"
    }
    lines = [f"{case}: phase {(phase['last_end_ns'] - start) / 1e6:.0f} ms of requests"]
    for t in map(json.loads, (cdir / "metrics" / "scrapes.jsonl").read_text().splitlines()):
        if start - 1e9 <= t["deadline_ns"] <= end:
            began, ended = t.get("start_ns"), t.get("end_ns")
            span = f"{(began - start) / 1e6:.0f}..{(ended - start) / 1e6:.0f} ms" if ended else ""
            lines.append(f"  tick {t['tick']} {t['outcome']} {span} kv={kv.get(t.get('scrape'))}")
    return "\n".join(lines)


def test_verdicts_pass_with_preemption_only_where_predicted(reduced_run: Path) -> None:
    report = read_report(reduced_run)
    failed = [v for v in report["verdicts"] if v["passed"] is not True]
    story = "\n".join(_scrapes_around_phase(reduced_run, c) for c in ("160MiB-c6", "160MiB-c10"))
    assert not failed, json.dumps(failed, indent=2) + "\n" + story
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


def test_the_report_page_opens_offline_with_every_verdict_and_figure(
    reduced_run: Path, tmp_path: Path
) -> None:
    check_report_page(reduced_run, tmp_path)
