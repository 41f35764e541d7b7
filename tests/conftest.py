"""Test-session wiring: the real-vLLM tier runs last and is never skipped silently.

Tests marked ``vllm`` need the real embedded vLLM. They run after every fast test; they are
skipped only when ``SKIP_VLLM_TESTS=1`` is set explicitly (never because vLLM is missing:
then they fail, so CI cannot go green without them).

A SIGTERM (a CI time limit, ``timeout``) ends the session as Ctrl-C does, so session
fixtures still run their teardown: the shared vLLM servers are started detached
(``loadgen server start``), and a session killed without teardown left them running.
"""

from __future__ import annotations

import os
import signal
from types import FrameType

import pytest


def _interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt(f"signal {signal.Signals(signum).name}")


def pytest_configure(config: pytest.Config) -> None:
    signal.signal(signal.SIGTERM, _interrupt)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    fast = [i for i in items if i.get_closest_marker("vllm") is None]
    slow = [i for i in items if i.get_closest_marker("vllm") is not None]
    items[:] = fast + slow
    if os.environ.get("SKIP_VLLM_TESTS") == "1":
        skip = pytest.mark.skip(reason="SKIP_VLLM_TESTS=1: real-vLLM tier opted out explicitly")
        for item in slow:
            item.add_marker(skip)
