"""server.manager.RunningServer.stop: a server that never became ready (an interrupted or
failed start) is stopped with the short grace, one that served with the long one."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

import server.manager as manager
from server.manager import READY_GRACE_S, UNREADY_GRACE_S, RunningServer
from server.process import StopResult, free_loopback_port, spawn_group, stop_group

pytestmark = pytest.mark.timeout(30)

# A leader that ignores SIGTERM, as vLLM part-way through its start was seen to; it says so
# once the handler is set, so the test never signals it before.
_IGNORES_SIGTERM = (
    "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
    "print('ignoring', flush=True); time.sleep(60)"
)


def _server(tmp_path: Path, startup_s: float | None) -> RunningServer:
    log = tmp_path / "log"
    proc = spawn_group([sys.executable, "-c", _IGNORES_SIGTERM], log, {})
    deadline = time.monotonic() + 10
    while "ignoring" not in (log.read_text() if log.exists() else ""):
        assert time.monotonic() < deadline, "the child never set its SIGTERM handler"
        time.sleep(0.02)
    url = f"http://127.0.0.1:{free_loopback_port()}"
    return RunningServer(url, "m", None, "", proc.pid, startup_s=startup_s, _proc=proc)


@pytest.mark.parametrize(("startup_s", "grace_s"), [(None, UNREADY_GRACE_S), (12.5, READY_GRACE_S)])
def test_the_grace_before_sigkill_depends_on_whether_the_server_became_ready(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    startup_s: float | None,
    grace_s: float,
) -> None:
    seen: list[tuple[float, StopResult]] = []

    def recording_stop(pgid: int, grace_s: float, **kwargs: object) -> StopResult:
        # The real stop, with the ready case's grace cut to the unready one's so the test
        # never waits 15 s; what is checked is the grace the server asked for.
        result = stop_group(pgid, grace_s=min(grace_s, UNREADY_GRACE_S), **kwargs)  # type: ignore[arg-type]
        seen.append((grace_s, result))
        return result

    monkeypatch.setattr(manager, "stop_group", recording_stop)
    server = _server(tmp_path, startup_s)
    server.stop()
    [(asked, result)] = seen
    assert (asked, UNREADY_GRACE_S, READY_GRACE_S) == (grace_s, 3.0, 15.0)
    # The leader ignored SIGTERM, so only SIGKILL ended it, and nothing of the group is left.
    assert (result.sent_sigkill, result.group_gone) == (True, True)
    assert server.exit_code() is None  # no longer owned


def test_an_explicit_grace_wins_over_the_default(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    asked: list[float] = []

    def recording_stop(pgid: int, grace_s: float, **kwargs: object) -> StopResult:
        asked.append(grace_s)
        return stop_group(pgid, grace_s=0.5, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(manager, "stop_group", recording_stop)
    _server(tmp_path, None).stop(grace_s=1.0)
    assert asked == [1.0]
