"""A load generator killed (``kill -9``) during the first phase of its run, before any
``phases.jsonl`` row exists, leaves a run that ``report`` builds: the phase is rebuilt from its
records (first send → last end) and marked incomplete, as it is when a later phase is killed;
``validate`` then calls the sealed run valid, needing attention (exit 4). Only a case whose
``case.json`` says ``ok`` must have a ``phases.jsonl``."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from analysis.integrity import check_run
from loadgen.runformat.layout import case_dir
from loadgen.runformat.metric_files import gzip_jsonl_problem
from tests.support.fake_in_thread import fake_in_thread
from tests.support.fake_openai_server import FakeOpenAIServer, StreamScript
from tests.support.synthetic_run import TEST_CASE, build_run

pytestmark = [pytest.mark.timeout(180)]

ROOT = Path(__file__).parents[2]


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "loadgen.cli", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)  # fmt: skip


def _records_then_kill(run_dir: Path, fake_url: str) -> None:
    # bench, 200 requests at C = 2, 20 tokens 10 ms apart (>= 0.2 s each): the only phase,
    # c2, runs >= 20 s, so once 3 records are on disk it is mid-phase with no row written.
    proc = subprocess.Popen(
        [sys.executable, "-m", "loadgen.cli", "run", "bench", "--url", fake_url,
         "--requests", "200", "--concurrency", "2", "--input-len", "8",
         "--output-len", "20", "--settle-s", "0.2", "--scrape-interval-s", "0.1",
         "--out", str(run_dir)],
        cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        start_new_session=True,
    )  # fmt: skip
    requests = case_dir(run_dir, "attached") / "requests.jsonl"
    deadline = time.monotonic() + 90
    while not requests.exists() or requests.read_text().count("\n") < 3:
        assert proc.poll() is None and time.monotonic() < deadline
        time.sleep(0.05)
    os.kill(proc.pid, signal.SIGKILL)  # the load generator only: its scraper child survives
    proc.wait()
    raw = case_dir(run_dir, "attached") / "metrics" / "raw.jsonl.gz"
    while gzip_jsonl_problem(raw) is not None:  # the orphaned scraper closes its files
        assert time.monotonic() < deadline, "the scraper did not close its files"
        time.sleep(0.1)


def test_a_run_killed_in_its_first_phase_is_reported_with_the_phase_rebuilt(
    tmp_path: Path,
) -> None:
    run_dir = tmp_path / "run"
    with fake_in_thread(FakeOpenAIServer(StreamScript(itl_s=0.01))) as fake:
        _records_then_kill(run_dir, fake.url)
    cdir = case_dir(run_dir, "attached")
    assert not (cdir / "phases.jsonl").exists()
    records = [json.loads(x) for x in (cdir / "requests.jsonl").read_text().splitlines()]
    report = _cli("report", str(run_dir))
    assert report.returncode == 0, report.stdout + report.stderr
    # The rebuilt c2 holds every record; its window runs from the first send to the last end.
    c2 = json.loads((run_dir / "report.json").read_text())["cases"]["attached"]["phases"]["c2"]
    first_sent = min(r["sent_ns"] for r in records)
    last_end = max(r["end_ns"] for r in records)
    assert c2["requests"] == len(records) >= 3
    assert c2["duration_s"] == pytest.approx((last_end - first_sent) / 1e9, abs=1e-9)
    validate = _cli("validate", "--json", str(run_dir))
    out = json.loads(validate.stdout)
    assert (validate.returncode, out["exit_code"], out["problems"]) == (4, 4, [])
    # report sealed a run that had no manifest (kill -9 leaves none): that seal is said first
    stamp = out["attention"][0].split(": sealed without a manifest")[0]
    assert out["attention"][0] == f"{stamp}: sealed without a manifest: raw files not verifiable"
    assert stamp.startswith("resealed at ")
    assert [a.split(": the run ended")[0] for a in out["attention"][1:]] == [
        "run status running", "attached: case status running", "attached/c2: phase incomplete",
    ]  # fmt: skip
    assert "was rebuilt from its records" in out["attention"][3]


def test_only_a_case_that_ended_ok_must_have_its_phases_file(tmp_path: Path) -> None:
    # The synthetic run's tested case ran cold, warm, pollution, revisit and rewarm.
    build_run(tmp_path)
    cdir = case_dir(tmp_path, TEST_CASE)
    (cdir / "phases.jsonl").unlink()
    assert f"{TEST_CASE}: phases.jsonl missing" in check_run(tmp_path).problems
    info = json.loads((cdir / "case.json").read_text()) | {"status": "running"}
    (cdir / "case.json").write_text(json.dumps(info))
    found = check_run(tmp_path)
    assert found.problems == []
    incomplete = [a.split(": phase incomplete")[0] for a in found.attention if "phase" in a]
    names = ("cold", "warm", "pollution", "revisit", "rewarm")
    assert incomplete == [f"{TEST_CASE}/{name}" for name in names]
