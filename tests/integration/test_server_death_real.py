"""A vLLM that dies mid-run: every request is recorded and flushed, the run says "failed".

Six requests of 255 + 400 tokens on a 160 MiB server; once they are decoding, the server's
whole process group is SIGKILLed from outside, as a crash would.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.support.vllm_fixtures import LOADGEN, loadgen

pytestmark = pytest.mark.vllm


def _wait_for(path: Path, timeout_s: float) -> dict:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if path.exists():
            return json.loads(path.read_text())
        time.sleep(0.2)
    raise AssertionError(f"{path} did not appear within {timeout_s} s")


def test_a_server_killed_mid_run_leaves_complete_failed_records(tmp_path: Path) -> None:
    out = tmp_path / "run"
    args = ["run", "kv-preemption", "--cases", "160MiB:6", "--prompt-tokens", "255",
            "--output-tokens", "400", "--out", str(out)]  # fmt: skip
    proc = subprocess.Popen([*LOADGEN, *args], stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        server = _wait_for(out / "cases" / "160MiB-c6" / "server" / "server.json", 300)
        time.sleep(3.0)  # the six requests are in prefill/decode by now
        os.killpg(server["pid"], signal.SIGKILL)
        output, _ = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 1, output.decode()[-2000:]

    run = json.loads((out / "run.json").read_text())
    manifest = json.loads((out / "manifest.json").read_text())
    case = json.loads((out / "cases" / "160MiB-c6" / "case.json").read_text())
    records = [json.loads(x) for x in (out / "cases" / "160MiB-c6" / "requests.jsonl").open()]
    assert run["status"] == "failed" and manifest["status"] == "failed"
    assert case["status"] == "failed" and "vLLM exited" in case["error"]
    assert len(records) == 6  # every request has its record, none lost
    assert all(r["status"] == "error" and r["error"] for r in records)
    assert case["failed_requests"] == 6
    # The phase says its server died, never that the user interrupted it.
    phases = [json.loads(x) for x in (out / "cases" / "160MiB-c6" / "phases.jsonl").open()]
    assert phases[-1]["ended_by"] == "server_died"
    assert "vLLM exited" in phases[-1]["end_reason"]
    assert (out / "report.md").exists()
    # Complete records of a failed run: valid, but it needs attention (docs/run-integrity.md).
    assert loadgen("validate", str(out), timeout=120).returncode == 4
