"""Fixtures of the real-vLLM tier (see ``vllm_fixtures``)."""

from vllm_fixtures import server_1gib  # noqa: F401  (re-exported fixture)
