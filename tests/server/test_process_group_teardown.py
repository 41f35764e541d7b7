"""server.process: spawning a command as its own process group and stopping the whole group.

Orphaned children are reaped by PID 1, which on this machine does so about every 2 s; graces
below leave room for that. Every test stops what it spawned, even when an assertion fails.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from server.process import (
    StopResult,
    free_loopback_port,
    group_alive,
    port_is_free,
    spawn_group,
    stop_group,
)

pytestmark = pytest.mark.timeout(30)


def wait_for_lines(path: Path, n: int, timeout_s: float = 5.0) -> list[str]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        lines = path.read_text().splitlines() if path.exists() else []
        if len(lines) >= n:
            return lines
        time.sleep(0.02)
    raise AssertionError(f"{path} did not reach {n} lines")


def pid_exists(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def pid_running(pid: int) -> bool:
    """The process exists and is not a zombie (a dead child waiting for init to reap it)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


@pytest.fixture
def spawned() -> Iterator[list[subprocess.Popen[bytes]]]:
    """Processes a test spawned; their groups are SIGKILLed at teardown if still there."""
    procs: list[subprocess.Popen[bytes]] = []
    yield procs
    for proc in procs:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(5)


def test_stop_group_takes_down_the_leader_and_its_children(
    tmp_path: Path, spawned: list[subprocess.Popen[bytes]]
) -> None:
    log = tmp_path / "logs" / "server.log"
    env = {"PATH": os.environ["PATH"], "TESTBED_MARK": "hello"}
    proc = spawn_group(
        ["sh", "-c", 'echo "$TESTBED_MARK"; sleep 60 & echo $!; sleep 60 & echo $!; wait'],
        log,
        env,
        cwd=tmp_path,
    )
    spawned.append(proc)
    mark, *child_lines = wait_for_lines(log, 3)
    children = [int(x) for x in child_lines]
    assert mark == "hello"  # env reached the child, stdout went to the log
    assert os.getpgid(proc.pid) == proc.pid  # leader of its own group
    assert [os.getpgid(c) for c in children] == [proc.pid, proc.pid]

    result = stop_group(proc.pid, grace_s=10.0, reap=proc.poll)

    assert result.sent_sigkill is False
    assert result.group_gone is True
    assert not group_alive(proc.pid)
    # Dead: gone, or a zombie waiting for init (which reaps orphans only every ~2 s here).
    assert not any(pid_running(c) for c in children)
    assert proc.returncode == -signal.SIGTERM


def test_a_group_ignoring_sigterm_is_killed_after_the_grace(
    tmp_path: Path, spawned: list[subprocess.Popen[bytes]]
) -> None:
    log = tmp_path / "stubborn.log"
    code = (
        "import signal, time\n"
        "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
        "print('ready', flush=True)\n"
        "time.sleep(60)\n"
    )
    proc = spawn_group([sys.executable, "-c", code], log, dict(os.environ))
    spawned.append(proc)
    assert wait_for_lines(log, 1) == ["ready"]

    result = stop_group(proc.pid, grace_s=1.0, reap=proc.poll)

    assert result.sent_sigkill is True
    assert result.group_gone is True
    assert result.elapsed_s >= 1.0
    assert proc.returncode == -signal.SIGKILL
    assert not group_alive(proc.pid)


def test_stopping_a_group_that_is_already_gone(
    tmp_path: Path, spawned: list[subprocess.Popen[bytes]]
) -> None:
    proc = spawn_group(["true"], tmp_path / "t.log", {"PATH": os.environ["PATH"]})
    spawned.append(proc)
    assert proc.wait(5) == 0
    assert not group_alive(proc.pid)
    assert stop_group(proc.pid, grace_s=1.0) == StopResult(
        sent_sigkill=False, group_gone=True, elapsed_s=0.0
    )


def test_a_group_of_only_zombies_is_gone(tmp_path: Path) -> None:
    proc = spawn_group(["true"], tmp_path / "z.log", {"PATH": os.environ["PATH"]})
    deadline = time.monotonic() + 5
    while pid_running(proc.pid) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert pid_exists(proc.pid)  # not reaped yet: a zombie, still signalable
    assert not group_alive(proc.pid)  # but nothing of the group runs any more
    assert proc.wait(5) == 0


def test_spawn_appends_to_an_existing_log(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    log.write_text("earlier start\n")
    proc = spawn_group(["sh", "-c", "echo again"], log, {"PATH": os.environ["PATH"]})
    assert proc.wait(5) == 0
    assert log.read_text() == "earlier start\nagain\n"


def test_free_port_is_free_until_something_listens_on_it() -> None:
    port = free_loopback_port()
    assert 0 < port < 65536
    assert port_is_free(port)
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", port))
        sock.listen()
        assert not port_is_free(port)
    assert port_is_free(port)
