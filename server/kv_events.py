"""The flags that make vLLM publish its KV-cache events (``--kv-events-config``).

vLLM's ZMQ publisher (``vllm/distributed/kv_events.py``, ``ZmqEventPublisher``) binds its
PUB socket when the endpoint holds ``*`` or ``::`` and connects it otherwise. The testbed
gives it ``tcp://127.0.0.1:PORT``, the port of a subscriber that the recorder
(``loadgen.kvevents.recorder``) bound on loopback first, so nothing is published beyond this
host and the subscription is in place from engine start-up; ``tcp://*:PORT`` (vLLM's default
form) would make every replica listen on every interface. Checked in vLLM 0.32.0 (the CPU build).
"""

from __future__ import annotations

import json


def kv_events_config(port: int) -> dict[str, object]:
    """vLLM's ``--kv-events-config`` for a subscriber bound on ``127.0.0.1:port``.

    Raises:
        ValueError: a port outside 1–65535.
    """
    if not 1 <= port <= 65535:
        raise ValueError(f"KV-event port must be 1–65535, got {port}")
    return {
        "enable_kv_cache_events": True,
        "publisher": "zmq",
        "endpoint": f"tcp://127.0.0.1:{port}",
    }


def kv_events_args(port: int) -> list[str]:
    """The command-line flags for :func:`kv_events_config`.

    Raises:
        ValueError: a port outside 1–65535.
    """
    return ["--kv-events-config", json.dumps(kv_events_config(port))]
