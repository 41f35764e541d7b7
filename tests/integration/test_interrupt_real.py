"""Ctrl-C (SIGINT) to ``loadgen run`` mid-phase against the real embedded vLLM: the requests
in flight are ``interrupted`` records (not failures), the server the run started is stopped,
the run says ``interrupted``, and ``validate`` exits 4 (valid, needs attention), never 0.

A reduced prefix-eviction with no control case (one 160 MiB server, started by the run):
its first phase sends 16 requests of 512 + 32 prompt tokens and 64 output tokens at C = 4.
A CPU vLLM decodes 64 tokens in seconds, so when the first record lands the closed loop has
refilled its slot at once and 3-4 requests are in flight: the signal cuts at least one.
"""

from __future__ import annotations

import json
import signal
import subprocess
import time
from collections import Counter
from pathlib import Path

import pytest

from server.process import group_alive
from tests.support.signals import default_signals
from tests.support.vllm_fixtures import LOADGEN, loadgen

pytestmark = pytest.mark.vllm

#: ``loadgen validate``'s documented exit code for a valid run that needs attention
#: (interrupted, incomplete, resealed; docs/run-integrity.md): 4, never the 0 of a good run.
VALIDATE_EXIT_INTERRUPTED = 4

REDUCED = (
    "--cache", "160MiB", "--control", "none", "--prefix-tokens", "512",
    "--suffix-tokens", "32", "--requests", "16", "--pollution-requests", "1",
    "--output-tokens", "64", "--settle-s", "0.6",
)  # fmt: skip


def _first_record(path: Path, proc: subprocess.Popen[bytes], timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while not (path.exists() and path.read_bytes().count(b"\n") >= 1):
        assert proc.poll() is None, "the run ended before its first record"
        assert time.monotonic() < deadline, f"no record in {path} within {timeout_s} s"
        time.sleep(0.05)


def test_sigint_mid_phase_gives_interrupted_records_and_stops_the_server(tmp_path: Path) -> None:
    out = tmp_path / "run"
    proc = subprocess.Popen(
        [*LOADGEN, "run", "prefix-eviction", *REDUCED, "--out", str(out)],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, preexec_fn=default_signals,
    )  # fmt: skip
    cdir = out / "cases" / "160MiB"
    try:
        _first_record(cdir / "requests.jsonl", proc, 120)
        proc.send_signal(signal.SIGINT)
        output, _ = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    text = output.decode(errors="replace")
    assert proc.returncode == 1, text[-3000:]
    assert "Traceback" not in text, text[-3000:]

    server = json.loads((cdir / "server" / "server.json").read_text())
    assert not group_alive(int(server["pid"])), "the vLLM the run started is still running"
    assert json.loads((out / "run.json").read_text())["status"] == "interrupted"
    records = [json.loads(line) for line in (cdir / "requests.jsonl").open()]
    statuses = Counter(r["status"] for r in records)
    assert statuses["interrupted"] >= 1, statuses
    assert statuses["error"] == 0, statuses  # nothing the user cut counts as a failure
    phases = [json.loads(line) for line in (cdir / "phases.jsonl").open()]
    assert phases[-1]["ended_by"] == "interrupt"
    case = json.loads((out / "report.json").read_text())["cases"]["160MiB"]
    assert case["requests_interrupted"] == statuses["interrupted"]
    assert case["requests_failed"] == 0

    validated = loadgen("validate", str(out), timeout=120)
    assert validated.returncode == VALIDATE_EXIT_INTERRUPTED, validated.stdout
