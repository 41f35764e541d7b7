"""loadgen.execute.run_case against an attached server that dies between phases: the case
stops at once, fails with the reason, and every planned request keeps a record (fault I: the
run used to send every later phase to the dead server and end ``ok``)."""

from __future__ import annotations

import asyncio
from collections import Counter
from pathlib import Path

import pytest

from loadgen.clock import MonotonicClock
from loadgen.execute import RunHooks, run_case
from loadgen.records import RequestRecord
from loadgen.runformat.layout import case_dir
from loadgen.runformat.record_files import read_records
from loadgen.server_watch import ServerWatch, lost_connection
from loadgen.workers.process import WorkersConfig
from scenarios.arrivals import ClosedLoop, OpenLoop
from scenarios.plan import CaseSpec, PhaseSpec, Plan
from scenarios.workloads import UniquePrompts
from server.manager import RunningServer
from tests.support.fake_openai_server import FakeOpenAIServer, StreamScript

pytestmark = [pytest.mark.timeout(60)]


def phase(name: str, requests: int, arrival: ClosedLoop | OpenLoop) -> PhaseSpec:
    workload = UniquePrompts(prompt_tokens=4, requests=requests, output_tokens=2)
    return PhaseSpec(name=name, workload=workload, arrival=arrival, settle_s=0.1)


async def run_until_the_server_dies(
    tmp_path: Path, phases: tuple[PhaseSpec, ...], workers: int | None = None
):
    """Run the phases against the fake attached by URL; the fake stops after the first."""
    fake = FakeOpenAIServer(StreamScript())
    async with fake.serve():
        case = CaseSpec(name="attached", url=fake.url)
        plan = Plan(
            scenario="t", description="t", params={}, cases=(case,), phases=phases,
            scrape_interval_s=0.05,
        )  # fmt: skip
        loop = asyncio.get_running_loop()
        stopping: list[asyncio.Task[None]] = []

        def phase_end(_case: str, name: str) -> None:
            if name == phases[0].name:
                stopping.append(loop.create_task(fake.stop()))

        hooks = RunHooks(on_phase_end=phase_end)
        server = RunningServer(fake.url, "m", None, "")
        outcome = await run_case(
            plan, case, server, tmp_path, hooks, MonotonicClock(), WorkersConfig(workers)
        )
    records = read_records(case_dir(tmp_path, "attached")).records
    return fake, outcome, records


@pytest.mark.parametrize("workers", [None, 2])
async def test_a_dead_attached_server_fails_the_case_and_later_phases_are_not_sent(
    tmp_path: Path, workers: int | None
) -> None:
    # The same with two worker processes (fault E/I "same with --workers 2"): the
    # coordinator writes the later phases' not_sent records itself.
    phases = (
        phase("one", 3, ClosedLoop(concurrency=1)),
        phase("two", 3, ClosedLoop(concurrency=1)),
        phase("three", 5, ClosedLoop(concurrency=1)),
    )
    fake, outcome, records = await run_until_the_server_dies(tmp_path, phases, workers)
    assert outcome.status == "failed"
    assert outcome.error == f"server at {fake.url} stopped answering during phase two"
    by_phase = Counter((r.phase, r.status) for r in records)
    assert by_phase[("one", "ok")] == 3
    # Phase two: its refused requests fail (or, if the probe cut the phase first, are not
    # sent): 3 records either way. Phase three never runs: 5 not_sent records.
    assert by_phase[("two", "error")] + by_phase[("two", "not_sent")] == 3
    assert by_phase[("three", "not_sent")] == 5
    assert len(records) == 3 + 3 + 5  # every planned request, once
    assert outcome.requests == 11


async def test_refused_connections_cut_the_phase_without_sending_the_rest(tmp_path: Path) -> None:
    # Phase two would take 10 s (200 arrivals at 20/s); the probe after the first refused
    # request finds the server gone within about a second and cuts the phase there.
    phases = (phase("one", 2, ClosedLoop(concurrency=1)), phase("two", 200, OpenLoop(rate_rps=20)))
    fake, outcome, records = await run_until_the_server_dies(tmp_path, phases)
    assert outcome.error == f"server at {fake.url} stopped answering during phase two"
    two = Counter(r.status for r in records if r.phase == "two")
    assert sum(two.values()) == 200
    assert two["not_sent"] > 100
    assert set(two) <= {"error", "not_sent"}


def record(status: str, http_status: int | None, error: str | None) -> RequestRecord:
    r = RequestRecord(
        request_id="r", case="c", phase="p", index=0, group="g", prompt_tokens_sent=1,
        max_tokens=1, scheduled_ns=0,
    )  # fmt: skip
    r.status, r.http_status, r.error = status, http_status, error  # type: ignore[assignment]
    return r


@pytest.mark.parametrize(
    ("rec", "lost"),
    [
        (record("not_sent", None, "not sent: could not connect: ClientConnectorError: x"), True),
        (record("error", None, "ConnectionResetError: reset"), True),  # no answer at all
        (record("error", 200, "ClientPayloadError: Response payload is not completed"), True),
        (record("error", 200, "ServerDisconnectedError: Server disconnected"), True),
        (record("error", 502, "HTTP 502: bad gateway"), False),  # an answer: the server is up
        (record("error", 200, "stalled: no byte from the server for 300 s"), False),
        (record("ok", 200, None), False),
        (record("not_sent", None, None), False),
    ],
)
def test_which_failures_trigger_a_health_probe(rec: RequestRecord, lost: bool) -> None:
    assert lost_connection(rec) is lost


class _DyingServer(RunningServer):
    """An owned server whose process is seen exited only from the ``exits_at``-th look on."""

    def __init__(self, exits_at: int | None) -> None:
        super().__init__("http://127.0.0.1:9", "m", None, "")
        self.looks, self.exits_at = 0, exits_at

    def exit_code(self) -> int | None:
        self.looks += 1
        return -9 if self.exits_at is not None and self.looks >= self.exits_at else None


@pytest.mark.parametrize(
    ("exits_at", "reason"),
    [
        (1, "vLLM exited with code -9 during phase p"),  # exited before the probe
        (2, "vLLM exited with code -9 during phase p"),  # exited while the probe failed
        (None, "server at http://127.0.0.1:9 stopped answering during phase p"),  # attached
    ],
)
async def test_a_killed_server_is_reported_by_its_exit_even_when_the_probe_fails_first(
    monkeypatch: pytest.MonkeyPatch, exits_at: int | None, reason: str
) -> None:
    async def unanswered(url: str) -> bool:
        return False

    monkeypatch.setattr("loadgen.server_watch.server_answers", unanswered)
    assert await ServerWatch(_DyingServer(exits_at), "p").verdict() == reason
