"""A SIGTERM that arrives after a case's last phase, while the case stops what it started (its
scraper, relays, replicas), still ends the case properly: what it started is stopped to the
end, its metrics files are whole, and ``case.json`` says ``interrupted``, never ``running``.
The signal is sent from the ``on_case_ending`` hook, so it lands in that window every time."""

from __future__ import annotations

import asyncio
import json
import os
import signal
from pathlib import Path

import pytest

from loadgen.clock import MonotonicClock
from loadgen.execute import RunHooks, run_case
from loadgen.run import cancel_on_sigterm, group_signals_restored
from loadgen.runformat.layout import case_dir
from loadgen.runformat.metric_files import gzip_jsonl_problem
from scenarios.arrivals import ClosedLoop
from scenarios.plan import CaseSpec, PhaseSpec, Plan
from scenarios.workloads import UniquePrompts
from server.manager import RunningServer
from tests.support.fake_openai_server import FakeOpenAIServer, StreamScript

pytestmark = [pytest.mark.timeout(60)]


async def test_sigterm_while_the_case_ends_leaves_it_interrupted_not_running(
    tmp_path: Path,
) -> None:
    fake = FakeOpenAIServer(StreamScript())
    workload = UniquePrompts(prompt_tokens=4, requests=3, output_tokens=2)
    only = PhaseSpec(name="only", workload=workload, arrival=ClosedLoop(concurrency=1),
                     settle_s=0.1)  # fmt: skip
    cdir = case_dir(tmp_path, "attached")
    seen: list[str] = []

    def ending(name: str) -> None:
        seen.append(json.loads((cdir / "case.json").read_text())["status"])
        os.kill(os.getpid(), signal.SIGTERM)  # handled by cancel_on_sigterm: cancels the run

    async with fake.serve():
        case = CaseSpec(name="attached", url=fake.url)
        plan = Plan(scenario="t", description="t", params={}, cases=(case,), phases=(only,),
                    scrape_interval_s=0.05)  # fmt: skip
        server = RunningServer(fake.url, "m", None, "")
        hooks = RunHooks(on_case_ending=ending)
        with group_signals_restored():
            run = asyncio.create_task(cancel_on_sigterm(
                run_case(plan, case, server, tmp_path, hooks, MonotonicClock())))  # fmt: skip
            with pytest.raises(asyncio.CancelledError):
                await run
    # The hook ran once, after the phase, while case.json still said running.
    assert seen == ["running"]
    info = json.loads((cdir / "case.json").read_text())
    assert (info["status"], info.get("error")) == (
        "interrupted", "interrupted (Ctrl-C or SIGTERM) while the case ended")  # fmt: skip
    # The phase itself ran to its end: 3 requests sent and recorded, none failed; its row is
    # not marked cut short.
    assert (info["requests"], info["failed_requests"]) == (3, 0)
    rows = [json.loads(line) for line in (cdir / "phases.jsonl").read_text().splitlines()]
    assert [(r["phase"], r["requests"], r["interrupted"]) for r in rows] == [("only", 3, False)]
    # The scraper was stopped to the end despite the signal: its gzip stream is complete.
    assert gzip_jsonl_problem(cdir / "metrics" / "raw.jsonl.gz") is None
