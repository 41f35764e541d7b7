"""Fixtures of the real-vLLM tier (see ``tests.support.vllm_fixtures``)."""

from tests.support.vllm_fixtures import server_1gib  # noqa: F401  (re-exported fixture)
