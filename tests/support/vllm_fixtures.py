"""Session-wide real vLLM servers, started once and shared by the real-vLLM tier."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from server.process import group_alive, port_is_free

LOADGEN = [sys.executable, "-m", "loadgen.cli"]


@dataclass(frozen=True)
class SharedServer:
    """A vLLM started with ``loadgen server start --json`` (the CLI path users take)."""

    url: str
    pid: int
    port: int
    model_name: str
    kv_capacity_tokens: int
    block_size: int
    state: dict[str, object]


def loadgen(
    *args: str, timeout: float = 900, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """Run the ``loadgen`` CLI in a subprocess, capturing output."""
    return subprocess.run(
        [*LOADGEN, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **(env or {})},
    )


def start_shared(*args: str) -> SharedServer:
    """``loadgen server start --json ARGS``, to share; stop it with :func:`stop_shared`."""
    proc = loadgen("server", "start", "--json", *args)
    assert proc.returncode == 0, f"loadgen server start failed:\n{proc.stdout}\n{proc.stderr}"
    state = json.loads(proc.stdout.strip().splitlines()[-1])
    return SharedServer(
        url=str(state["url"]),
        pid=int(state["pid"]),
        port=int(state["port"]),
        model_name=str(state["model_name"]),
        kv_capacity_tokens=int(state["kv_capacity_tokens"]),
        block_size=int(state["block_size"]),
        state=state,
    )


def stop_shared(server: SharedServer) -> None:
    """Stop with ``loadgen server stop``; assert no process of its group is left, port free."""
    stop = loadgen("server", "stop", "--port", str(server.port), timeout=120)
    assert stop.returncode == 0, f"loadgen server stop failed:\n{stop.stdout}\n{stop.stderr}"
    assert not group_alive(server.pid), f"processes of vLLM group {server.pid} left running"
    assert port_is_free(server.port), f"port {server.port} still bound after stop"


@pytest.fixture(scope="session")
def server_1gib(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SharedServer]:
    """The embedded model (variant ``auto``) with a 1 GiB KV cache, shared by the session.

    Teardown stops it and checks that nothing of it is left (:func:`stop_shared`).
    """
    server = start_shared("--cache", "1GiB")
    yield server
    stop_shared(server)


def run_scenario(tmp: pytest.TempPathFactory, scenario: str, *args: str) -> Path:
    """``loadgen run SCENARIO ARGS --out DIR`` in a fresh temp dir; the run directory.

    Fails the calling fixture (with the output's tail) when the run exits non-zero.
    """
    out = tmp.mktemp(scenario) / "run"
    proc = loadgen("run", scenario, *args, "--out", str(out), timeout=900)
    assert proc.returncode == 0, f"run failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return out


def read_report(run: Path) -> dict:
    return json.loads((run / "report.json").read_text())
