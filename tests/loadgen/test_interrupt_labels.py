"""Honest labels: requests the user's Ctrl-C or SIGTERM cut are ``interrupted`` (counted apart,
never failures), their phase says it was interrupted; a phase whose server died says that,
and its cut requests are failures with the cause, never ``interrupted``."""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import msgspec
import pytest

from analysis.summaries import INTERRUPTED, SERVER_DIED, incomplete_reason
from loadgen.client import Target
from loadgen.clock import MonotonicClock
from loadgen.connections import open_session
from loadgen.execute import RunHooks, run_case
from loadgen.phase import INTERRUPTED_ERROR, run_phase
from loadgen.records import RecordWriter
from loadgen.runformat import PhaseRow, ReadRecord
from loadgen.runformat.layout import case_dir
from loadgen.runformat.reading import read_jsonl
from loadgen.runformat.record_files import read_records
from loadgen.runformat.rows import NOT_CONNECTED
from loadgen.workers.process import WorkersConfig
from scenarios.arrivals import ClosedLoop
from scenarios.plan import CaseSpec, PhaseSpec, Plan
from scenarios.requests import PlannedRequest
from scenarios.workloads import UniquePrompts
from server.manager import RunningServer
from tests.support.fake_in_thread import fake_in_thread
from tests.support.fake_openai_server import FakeOpenAIServer, StreamScript
from tests.support.signals import default_signals

pytestmark = [pytest.mark.timeout(120)]

ROOT = Path(__file__).parents[2]


def _phase_rows(path: Path) -> list[PhaseRow]:
    return [msgspec.json.decode(line, type=PhaseRow) for line in path.read_bytes().splitlines()]


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_mid_phase_gives_interrupted_records_counted_apart(
    tmp_path: Path, sig: signal.Signals
) -> None:
    # bench, 10 requests at C = 2, 200 tokens at 50 ms each: a request takes ≥ 10 s, so when
    # the fake has received 2 requests exactly those 2 are in flight and none has finished.
    # The signal then cuts the phase: 2 interrupted records, 8 not_sent, 0 failed; the run
    # and the phase say interrupted; exit 1.
    run_dir = tmp_path / "run"
    with fake_in_thread(FakeOpenAIServer(StreamScript(itl_s=0.05))) as fake:
        proc = subprocess.Popen(
            [sys.executable, "-m", "loadgen.cli", "run", "bench", "--url", fake.url,
             "--requests", "10", "--concurrency", "2", "--input-len", "8",
             "--output-len", "200", "--settle-s", "0.2", "--scrape-interval-s", "0.1",
             "--out", str(run_dir)],
            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            preexec_fn=default_signals,
        )  # fmt: skip
        deadline = time.monotonic() + 60
        while fake.served < 2:
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
            time.sleep(0.05)
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=60)
    assert proc.returncode == 1, err
    assert "Traceback" not in err
    cdir = case_dir(run_dir, "attached")
    records = read_records(cdir).records
    assert Counter(r.status for r in records) == {"interrupted": 2, "not_sent": 8}
    assert {r.error for r in records if r.status == "interrupted"} == {INTERRUPTED_ERROR}
    (row,) = _phase_rows(cdir / "phases.jsonl")
    assert (row.ended_by, row.interrupted) == ("interrupt", True)
    assert incomplete_reason(row) == INTERRUPTED
    assert json.loads((run_dir / "run.json").read_text())["status"] == "interrupted"
    report = json.loads((run_dir / "report.json").read_text())
    case = report["cases"]["attached"]
    assert (case["requests_failed"], case["requests_interrupted"]) == (0, 2)
    (phase,) = case["phases"].values()
    assert (phase["failed"], phase["interrupted"], phase["not_sent"]) == (0, 2, 8)
    assert phase["incomplete"] == INTERRUPTED
    # bench's "no failures" check cannot pass a phase the user cut: undecided, not passed.
    (no_failures,) = [v for v in report["verdicts"] if v["check"] == "no failures in c2"]
    assert no_failures["passed"] is None
    assert "interrupted 2 (cut by Ctrl-C or SIGTERM, not failures)" in (
        (run_dir / "report.md").read_text()
    )


async def test_a_server_killed_mid_phase_says_so_and_nothing_is_interrupted(
    tmp_path: Path,
) -> None:
    # 6 requests at C = 2 of 40 tokens at 50 ms (≥ 2 s each); the fake stops once 2 are
    # streaming. aiohttp's shutdown lets those 2 handlers finish (ok); the 4 later requests
    # fail at once, long before the health probe's 3 attempts (0.5 s apart) give up: on a
    # kept-alive connection the server resets (error: it may have been sent), on a new one
    # the connection is refused (not sent). The probe then finds the server gone: the phase
    # row says the server died and why, and no record is 'interrupted' (nobody pressed Ctrl-C).
    fake = FakeOpenAIServer(StreamScript(itl_s=0.05))
    workload = UniquePrompts(prompt_tokens=4, requests=6, output_tokens=40)
    one = PhaseSpec(name="one", workload=workload, arrival=ClosedLoop(concurrency=2), settle_s=0.1)
    async with fake.serve():
        case = CaseSpec(name="attached", url=fake.url)
        plan = Plan(
            scenario="t", description="t", params={}, cases=(case,), phases=(one,),
            scrape_interval_s=0.05,
        )  # fmt: skip

        async def kill_when_streaming() -> None:
            await fake.wait_for(lambda: fake.served >= 2, timeout_s=30)
            await fake.stop()

        killer = asyncio.create_task(kill_when_streaming())
        server = RunningServer(fake.url, "m", None, "")
        outcome = await run_case(
            plan, case, server, tmp_path, RunHooks(), MonotonicClock(), WorkersConfig()
        )
        await killer
    reason = f"server at {fake.url} stopped answering during phase one"
    assert (outcome.status, outcome.error) == ("failed", reason)
    cdir = case_dir(tmp_path, "attached")
    (row,) = _phase_rows(cdir / "phases.jsonl")
    assert (row.ended_by, row.end_reason, row.interrupted) == ("server_died", reason, True)
    assert incomplete_reason(row) == SERVER_DIED.format(reason=reason)
    assert "Ctrl-C" not in (incomplete_reason(row) or "")
    statuses = Counter(r.status for r in read_records(cdir).records)
    assert statuses["ok"] == 2 and statuses["error"] + statuses["not_sent"] == 4
    for r in read_records(cdir).records:
        if r.status == "error":
            assert r.error is not None and "ECONNRESET" in r.error and r.sent_ns is not None
        elif r.status == "not_sent":
            assert r.error is not None and r.error.startswith(NOT_CONNECTED)
            assert r.sent_ns is None


async def test_requests_cut_because_the_server_died_are_errors_with_the_cause(
    tmp_path: Path,
) -> None:
    # The server watch cancels a phase whose server it found gone: run_phase's cut_reason
    # gives the reason then. 5 requests at C = 2 of 200 tokens at 50 ms: cancelled once 2
    # stream, those 2 are 'error' "cut short: REASON" (not interrupted), 3 not_sent.
    fake = FakeOpenAIServer(StreamScript(itl_s=0.05))
    reason = "vLLM exited with code -9 during phase p"
    path = tmp_path / "requests.jsonl"
    async with fake.serve(), open_session(read_timeout_s=10) as session:
        planned = [
            PlannedRequest(request_id=f"r{i}", prompt_token_ids=(i, 7), max_tokens=200)
            for i in range(5)
        ]
        with RecordWriter(path) as writer:
            task = asyncio.create_task(
                run_phase(
                    case="c", phase="p", requests=planned, arrival=ClosedLoop(concurrency=2),
                    target=Target(fake.url, "m"), session=session, writer=writer,
                    clock=MonotonicClock(), cut_reason=lambda: reason,
                )
            )  # fmt: skip
            await fake.wait_for(lambda: fake.served >= 2)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
    records = sorted(read_jsonl(path, ReadRecord).rows, key=lambda r: r.index)
    assert [r.status for r in records] == ["error"] * 2 + ["not_sent"] * 3
    assert {r.error for r in records[:2]} == {f"cut short: {reason}"}
