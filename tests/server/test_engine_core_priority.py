"""The engine-core process of a started group gets the asked nice value on every thread, and
the session its autogroup's; nothing else in the group, and nothing outside it, is touched."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from server.config import ServerConfig
from server.priority import (
    engine_core_pids,
    lower_engine_core_priority,
    lower_session_priority,
)

# A group leader named like vLLM's engine core (comm keeps 15 characters) with one extra
# thread, and a child in the same group named like its worker. Each prints its pid.
_LEADER = r"""
import os, subprocess, sys, threading, time
open("/proc/self/comm", "w").write("VLLM::EngineCore")
threading.Thread(target=time.sleep, args=(60,), daemon=True).start()
worker = subprocess.Popen([sys.executable, "-c",
    "open('/proc/self/comm', 'w').write('VLLM::Worker'); print(__import__('os').getpid(), "
    "flush=True); __import__('time').sleep(60)"], stdout=subprocess.PIPE, text=True)
print(os.getpid(), worker.stdout.readline().strip(), flush=True)
time.sleep(60)
"""


@pytest.fixture
def fake_vllm_group() -> Iterator[tuple[int, int]]:
    proc = subprocess.Popen(
        [sys.executable, "-c", _LEADER], stdout=subprocess.PIPE, text=True, start_new_session=True
    )
    assert proc.stdout is not None
    leader, worker = (int(x) for x in proc.stdout.readline().split())
    yield leader, worker
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


def _nice_of_threads(pid: int) -> list[int]:
    tasks = [int(t.name) for t in Path(f"/proc/{pid}/task").iterdir()]
    return sorted(os.getpriority(os.PRIO_PROCESS, tid) for tid in tasks)


def test_every_thread_of_the_engine_core_gets_the_nice_value(
    fake_vllm_group: tuple[int, int],
) -> None:
    leader, worker = fake_vllm_group
    deadline = time.monotonic() + 5
    while len(_nice_of_threads(leader)) < 2 and time.monotonic() < deadline:
        time.sleep(0.01)  # the extra thread starts right after the name is set

    change = lower_engine_core_priority(leader, nice=7)

    assert change.pids == [leader]
    assert change.threads == 2 and change.problem is None  # main thread + the sleeper
    assert _nice_of_threads(leader) == [7, 7]
    assert _nice_of_threads(worker) == [0]  # the worker computes: left alone
    assert os.getpriority(os.PRIO_PROCESS, 0) == 0  # and so is the caller


def test_a_group_without_an_engine_core_is_reported_not_raised(
    fake_vllm_group: tuple[int, int],
) -> None:
    _leader, worker = fake_vllm_group
    assert engine_core_pids(worker) == []  # the worker leads no group of its own
    change = lower_engine_core_priority(worker, nice=19)
    assert change.pids == [] and change.threads == 0
    assert change.problem == f"no VLLM::EngineCor* process in group {worker}"
    assert _nice_of_threads(worker) == [0]


def test_the_session_autogroup_gets_the_nice_value(tmp_path: Path) -> None:
    proc = tmp_path / "proc"
    (proc / "sys" / "kernel").mkdir(parents=True)
    (proc / "42").mkdir()
    (proc / "42" / "autogroup").write_text("/autogroup-5 nice 0\n")
    (proc / "sys" / "kernel" / "sched_autogroup_enabled").write_text("1\n")
    change = lower_session_priority(42, nice=10, proc=proc)
    assert change.pids == [42] and change.problem is None
    assert (proc / "42" / "autogroup").read_text() == "10\n"  # the kernel's write format

    (proc / "sys" / "kernel" / "sched_autogroup_enabled").write_text("0\n")
    off = lower_session_priority(42, nice=10, proc=proc)
    assert off.pids == [] and off.problem == "autogroups are off (sched_autogroup_enabled 0)"
    gone = lower_session_priority(43, nice=10, proc=tmp_path / "nowhere")
    assert gone.pids == [] and gone.problem is not None


@pytest.mark.skipif(
    not Path("/proc/sys/kernel/sched_autogroup_enabled").exists()
    or Path("/proc/sys/kernel/sched_autogroup_enabled").read_text().strip() != "1",
    reason="autogroups are off on this kernel",
)
def test_a_real_session_autogroup_is_lowered(fake_vllm_group: tuple[int, int]) -> None:
    leader, _worker = fake_vllm_group  # a session of its own (start_new_session)
    change = lower_session_priority(leader, nice=9)
    assert change.problem is None
    assert Path(f"/proc/{leader}/autogroup").read_text().endswith(" nice 9\n")
    assert not Path("/proc/self/autogroup").read_text().endswith(" nice 9\n")


def test_a_nice_value_of_0_leaves_the_server_as_vllm_starts_it() -> None:
    # The flags' 0 means "untouched" (None), whoever builds the config; other values stay.
    assert ServerConfig().engine_core_nice == 19
    assert ServerConfig().server_group_nice is None
    zero = ServerConfig(engine_core_nice=0, server_group_nice=0)
    assert (zero.engine_core_nice, zero.server_group_nice) == (None, None)
    set_ = ServerConfig(engine_core_nice=5, server_group_nice=10)
    assert (set_.engine_core_nice, set_.server_group_nice) == (5, 10)
