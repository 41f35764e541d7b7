"""Test-session wiring: the real-vLLM tier runs last and is never skipped silently.

Tests marked ``vllm`` need the real embedded vLLM. They run after every fast test; they are
skipped only when ``SKIP_VLLM_TESTS=1`` is set explicitly (never because vLLM is missing:
then they fail, so CI cannot go green without them).
"""

from __future__ import annotations

import os

import pytest


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    fast = [i for i in items if i.get_closest_marker("vllm") is None]
    slow = [i for i in items if i.get_closest_marker("vllm") is not None]
    items[:] = fast + slow
    if os.environ.get("SKIP_VLLM_TESTS") == "1":
        skip = pytest.mark.skip(reason="SKIP_VLLM_TESTS=1: real-vLLM tier opted out explicitly")
        for item in slow:
            item.add_marker(skip)
