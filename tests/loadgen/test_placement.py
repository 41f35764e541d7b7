"""The sending thread's placement (loadgen.placement): real-time only off the server's cores,
applied to the calling thread alone, undone afterwards, never inherited by what it starts."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from loadgen.placement import (
    REALTIME_PRIORITY,
    AppliedPlacement,
    Placement,
    choose_placement,
    pin_helpers,
    placed,
    placement_for_servers,
)
from server.cpus import ServerHost
from server.process import START_CPUS, spawn_group, stop_group

CORES = (0, 1, 2, 3)


def test_normal_is_left_alone() -> None:
    p = choose_placement("normal", CORES, True, {0})
    assert (p.realtime, p.cpus) == (False, None)


def test_real_time_on_the_cores_the_server_leaves_free() -> None:
    # vLLM's worker bound to cores 0-2 of 0-3: the client gets core 3 alone.
    p = choose_placement("auto", CORES, True, {0, 1, 2})
    assert (p.realtime, p.cpus) == (True, (3,))
    assert p.reason == "real-time on core(s) 3; the server computes on core(s) 0,1,2"


def test_a_server_on_another_host_leaves_the_client_as_it_is_unless_asked() -> None:
    p = choose_placement("auto", CORES, False, None)
    assert (p.realtime, p.cpus) == (False, None)  # real-time only when asked...
    asked = choose_placement("realtime", CORES, False, None)
    assert [asked.for_worker(k, 2).cpus for k in range(2)] == [(0,), (1,)]  # ...a core each
    assert (asked.realtime, asked.cpus) == (True, CORES)
    assert [asked.for_worker(k, 4).realtime for k in range(4)] == [True] * 4


@pytest.mark.parametrize(
    ("server_cpus", "why"),
    [
        ({0, 1, 2, 3}, "the server computes on every core this process may use (0,1,2,3)"),
        (None, "no thread of it is bound to fewer cores than its root process"),
    ],
)
def test_auto_stays_normal_where_it_could_take_the_servers_cores(
    server_cpus: set[int] | None, why: str
) -> None:
    auto = choose_placement("auto", CORES, True, server_cpus)
    assert (auto.realtime, auto.cpus) == (False, None) and why in auto.reason
    asked = choose_placement("realtime", CORES, True, server_cpus)
    assert (asked.realtime, asked.cpus) == (True, None) and why in asked.reason


def test_workers_get_a_free_core_each_when_there_are_enough() -> None:
    free = Placement(True, (1, 2, 3), "r")
    assert [free.for_worker(k, 2).cpus for k in range(2)] == [(1,), (2,)]
    assert [free.for_worker(k, 4).cpus for k in range(4)] == [(1, 2, 3)] * 4  # 4 > 3 cores
    assert free.for_worker(0, 1).cpus == (1, 2, 3)
    assert Placement(True, None, "r").for_worker(1, 2).cpus is None


def test_a_case_avoids_the_cores_of_all_its_servers() -> None:
    here = os.sched_getaffinity(0)
    if len(here) < 2:
        pytest.skip("needs two cores to leave one free")
    a, b = sorted(here)[:2]
    two = placement_for_servers("auto", [ServerHost(True, 1, [a]), ServerHost(False)])
    assert two.cpus == tuple(sorted(here - {a}))
    both = placement_for_servers("auto", [ServerHost(True, 1, [a]), ServerHost(True, 2, [b])])
    assert both.cpus == (tuple(sorted(here - {a, b})) or None)
    unknown = placement_for_servers("auto", [ServerHost(True, 1, [a]), None])
    assert (unknown.realtime, unknown.cpus) == (False, None)


def _in_thread(fn: Callable[[], Any]) -> Any:
    """Run ``fn`` on a fresh thread (so the test runner's own thread is never changed)."""
    out: list[Any] = []
    errors: list[BaseException] = []

    def run() -> None:
        try:
            out.append(fn())
        except BaseException as exc:
            errors.append(exc)

    thread = threading.Thread(target=run)
    thread.start()
    thread.join()
    if errors:
        raise errors[0]
    return out[0]


def _can_realtime() -> bool:
    def probe() -> bool:
        try:
            os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(REALTIME_PRIORITY))
        except OSError:
            return False
        os.sched_setscheduler(0, os.SCHED_OTHER, os.sched_param(0))
        return True

    return bool(_in_thread(probe))


needs_realtime = pytest.mark.skipif(
    not _can_realtime() or len(os.sched_getaffinity(0)) < 2,
    reason="needs SCHED_FIFO (root, CAP_SYS_NICE or ulimit -r) and two cores",
)


@needs_realtime
def test_placed_pins_every_thread_makes_the_caller_real_time_and_is_undone_after() -> None:
    core = max(os.sched_getaffinity(0))
    before = os.sched_getaffinity(0)
    main = threading.main_thread().native_id

    def run() -> tuple[Any, ...]:
        with placed(Placement(True, (core,), "test")) as applied:
            inside = (os.sched_getscheduler(0), os.sched_getparam(0).sched_priority,
                      os.sched_getaffinity(0), sys.getswitchinterval())  # fmt: skip
            main_inside = (os.sched_getscheduler(main), os.sched_getaffinity(main))
        after = (os.sched_getscheduler(0), os.sched_getaffinity(0), os.sched_getaffinity(main),
                 sys.getswitchinterval())  # fmt: skip
        return applied, inside, main_inside, after

    switch = sys.getswitchinterval()
    applied, inside, main_inside, after = _in_thread(run)
    assert applied == AppliedPlacement(f"SCHED_FIFO {REALTIME_PRIORITY}", [core], "test")
    assert inside == (
        os.SCHED_FIFO | os.SCHED_RESET_ON_FORK, REALTIME_PRIORITY, {core}, pytest.approx(0.0005)
    )  # fmt: skip
    # Another thread of the process: pinned too (it may hold the GIL), not real-time.
    assert main_inside == (os.SCHED_OTHER, {core})
    assert after == (os.SCHED_OTHER, before, before, switch)


def test_helper_processes_are_pinned_for_good() -> None:
    core = max(os.sched_getaffinity(0))
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        assert pin_helpers([other.pid], Placement(False, (core,), "test")) is None
        assert os.sched_getaffinity(other.pid) == {core}  # they end with the case
        assert pin_helpers([other.pid], Placement(True, None, "unpinned")) is None
        assert os.sched_getaffinity(other.pid) == {core}  # nothing to pin: left alone
    finally:
        other.kill()
        other.wait()


def test_workers_sharing_cores_run_at_normal_priority() -> None:
    shared = Placement(True, (1,), "real-time on core(s) 1").for_worker(0, 2)
    assert (shared.realtime, shared.cpus) == (False, (1,))
    assert shared.reason == (
        "normal priority: 2 workers share core(s) 1 (else real-time on core(s) 1)"
    )


@needs_realtime
def test_what_a_placed_thread_starts_runs_normally_on_every_core(tmp_path: Path) -> None:
    core = max(os.sched_getaffinity(0))
    probe = "import os; print(os.sched_getscheduler(0), sorted(os.sched_getaffinity(0)))"

    def run() -> tuple[str, str, int]:
        with placed(Placement(True, (core,), "test")):
            helper = _in_thread(lambda: os.sched_getscheduler(0))  # a thread it starts
            plain = subprocess.run([sys.executable, "-c", probe], capture_output=True,
                                   text=True, check=True).stdout  # fmt: skip
            log = tmp_path / "server.log"
            spawned = spawn_group([sys.executable, "-c", probe], log, dict(os.environ))
            spawned.wait(timeout=30)
            stop_group(spawned.pid, grace_s=1)
        return plain, log.read_text(), helper

    plain, server, helper = _in_thread(run)
    assert helper == os.SCHED_OTHER
    # Any child starts at normal priority (reset on fork); a plain one keeps the pinning...
    assert plain.split(" ", 1) == [str(os.SCHED_OTHER), f"[{core}]\n"]
    # ...but a server spawned by spawn_group gets the process's whole CPU set back.
    assert server == f"{os.SCHED_OTHER} {sorted(START_CPUS)}\n"


def _refuse(*args: object) -> None:
    """Stands in for a scheduling call the kernel refuses without privileges."""
    raise PermissionError(1, "Operation not permitted")


def test_a_refused_real_time_policy_is_reported_and_the_pinning_stays(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(os, "sched_setscheduler", _refuse)
    core = max(os.sched_getaffinity(0))

    def run() -> tuple[AppliedPlacement, set[int]]:
        with placed(Placement(True, (core,), "test")) as applied:
            return applied, os.sched_getaffinity(0)

    applied, inside = _in_thread(run)
    assert (applied.policy, applied.cpus) == ("SCHED_OTHER", [core])
    assert applied.problem is not None
    assert applied.problem.startswith("SCHED_FIFO refused (Operation not permitted)")
    assert inside == {core}  # off the server's cores even without the priority


def test_no_real_time_where_the_threads_could_not_be_pinned(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(os, "sched_setaffinity", _refuse)
    scheduled: list[object] = []
    monkeypatch.setattr(os, "sched_setscheduler", lambda *a: scheduled.append(a))

    def run() -> AppliedPlacement:
        with placed(Placement(True, (0,), "test")) as applied:
            return applied

    applied = _in_thread(run)
    assert (applied.policy, applied.cpus) == ("SCHED_OTHER", None)
    assert applied.problem is not None and applied.problem.startswith(
        "pinning to core(s) 0 refused (thread "
    )
    assert applied.problem.endswith(
        "not real-time: the threads could not be kept off the server's cores"
    )
    assert len(scheduled) == 1  # only the restore on exit: never set to SCHED_FIFO


def test_helper_problems_are_added_to_the_record() -> None:
    applied = AppliedPlacement("SCHED_FIFO 1", [1], "r")
    assert applied.with_problem(None) is applied
    assert applied.with_problem("helpers x").problem == "helpers x"
    assert applied.with_problem("a").with_problem("b").problem == "a; b"
