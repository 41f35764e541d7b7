"""A test session ended by SIGTERM still tears down its session fixtures (tests/conftest.py)."""

from __future__ import annotations

import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from tests.support.signals import default_signals

SESSION = """
import time
from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def shared_server():
    yield
    Path("torn_down").write_text("yes")


def test_long(shared_server):
    Path("started").write_text("")
    time.sleep(120)
"""


def test_sigterm_ends_the_session_with_its_teardown(tmp_path: Path) -> None:
    shutil.copy(Path(__file__).with_name("conftest.py"), tmp_path / "conftest.py")
    (tmp_path / "test_session.py").write_text(SESSION)
    proc = subprocess.Popen(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_session.py"],
        cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        preexec_fn=default_signals,
    )  # fmt: skip
    deadline = time.monotonic() + 60
    while not (tmp_path / "started").exists():
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()[0]
        time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=60)
    # pytest's exit code for an interrupted session is 2; the fixture's teardown ran.
    assert proc.returncode == 2, out.decode()
    assert (tmp_path / "torn_down").read_text() == "yes"
