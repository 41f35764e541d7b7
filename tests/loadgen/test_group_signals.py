"""A signal to the run's whole process group (``timeout``, CI cancellation, ``kill -TERM
-PGID``, Ctrl-C pressed repeatedly) ends every process of the run cleanly: the scraper and
workers ignore it and are stopped by the parent in order, the parent survives further
signals during its cleanup, files are whole, statuses final, the manifest written."""

from __future__ import annotations

import gzip
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from loadgen.runformat.layout import case_dir
from tests.support.fake_in_thread import fake_in_thread
from tests.support.fake_openai_server import FakeOpenAIServer, StreamScript

pytestmark = [pytest.mark.timeout(180)]

ROOT = Path(__file__).parents[2]


def _default_signals() -> None:
    # Explicit, so the test means the same under `nohup` (SIGINT inherited as ignored).
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


def _start_mid_phase(run_dir: Path, fake_url: str, fake: FakeOpenAIServer) -> subprocess.Popen[str]:
    # bench, 10 requests at C = 2, 200 tokens at 50 ms each: every request takes >= 10 s, so
    # once the fake has received 2 requests the run is mid-phase with the scraper writing.
    proc = subprocess.Popen(
        [sys.executable, "-m", "loadgen.cli", "run", "bench", "--url", fake_url,
         "--requests", "10", "--concurrency", "2", "--input-len", "8",
         "--output-len", "200", "--settle-s", "0.2", "--scrape-interval-s", "0.1",
         "--out", str(run_dir)],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        start_new_session=True, preexec_fn=_default_signals,
    )  # fmt: skip
    deadline = time.monotonic() + 90
    while fake.served < 2:
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
        time.sleep(0.05)
    return proc


def _assert_sealed_interrupted(run_dir: Path, err: str) -> None:
    assert "Traceback" not in err, err
    raw = case_dir(run_dir, "attached") / "metrics" / "raw.jsonl.gz"
    lines = gzip.decompress(raw.read_bytes()).splitlines()  # raises if cut short
    assert lines and all(json.loads(line) for line in lines)
    assert json.loads((run_dir / "run.json").read_text())["status"] == "interrupted"
    case = json.loads((case_dir(run_dir, "attached") / "case.json").read_text())
    assert case["status"] == "interrupted"
    assert (run_dir / "manifest.json").is_file()
    validate = subprocess.run(
        [sys.executable, "-m", "loadgen.cli", "validate", str(run_dir)],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    # 4: valid, needs attention (the run was interrupted).
    assert validate.returncode == 4, validate.stdout + validate.stderr


def test_sigterm_to_the_group_leaves_a_valid_sealed_run(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    with fake_in_thread(FakeOpenAIServer(StreamScript(itl_s=0.05))) as fake:
        proc = _start_mid_phase(run_dir, fake.url, fake)
        os.killpg(proc.pid, signal.SIGTERM)
        _, err = proc.communicate(timeout=120)
    assert proc.returncode == 1, err
    _assert_sealed_interrupted(run_dir, err)


def test_three_ctrl_c_to_the_group_leave_no_traceback_and_a_final_status(
    tmp_path: Path,
) -> None:
    run_dir = tmp_path / "run"
    with fake_in_thread(FakeOpenAIServer(StreamScript(itl_s=0.05))) as fake:
        proc = _start_mid_phase(run_dir, fake.url, fake)
        for _ in range(3):
            os.killpg(proc.pid, signal.SIGINT)
            time.sleep(0.2)
        _, err = proc.communicate(timeout=120)
    assert proc.returncode == 1, err
    _assert_sealed_interrupted(run_dir, err)
