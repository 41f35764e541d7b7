"""What gateway tests share: the one fake vLLM as an upstream (:func:`upstream`, three tokens
an answer by default), ports that refuse or hang (:func:`closed_port`,
:func:`unaccepting_listener`, whose full backlog makes connects hang, for connect timeouts), a
body's event data, a metric's value, and a test gateway's config. Durations are seconds.
"""

from __future__ import annotations

import contextlib
import socket
import time
from collections.abc import Iterator
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from gateway.config import GatewayConfig
from tests.support.fake_openai_server import FakeOpenAIServer, StreamScript


def upstream_script(**fields: Any) -> StreamScript:
    """A gateway test's script for the one fake vLLM: three tokens per answer unless ``fields``
    say otherwise (any :class:`tests.support.fake_openai_server.StreamScript` field)."""
    return StreamScript(**{"tokens": 3, **fields})


def fake_upstream(**fields: Any) -> FakeOpenAIServer:
    """The one fake vLLM (``tests.support.fake_openai_server``) as a gateway's upstream, with
    :func:`upstream_script`'s script, its answers still going cancelled 0.5 s into its stop;
    serve it with ``fake.serve()``."""
    return FakeOpenAIServer(upstream_script(**fields), grace_s=0.5)


def closed_port() -> int:
    """A 127.0.0.1 port with nothing listening (bound then released)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextlib.contextmanager
def unaccepting_listener() -> Iterator[int]:
    """A 127.0.0.1 port whose accept queue is full: new connects hang (SYNs are dropped)."""
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    fillers: list[socket.socket] = []
    try:
        listener.bind(("127.0.0.1", 0))
        listener.listen(0)
        port = int(listener.getsockname()[1])
        for _ in range(4):  # backlog 0 still queues one or two connections; fill them
            filler = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            filler.setblocking(False)
            fillers.append(filler)
            with contextlib.suppress(BlockingIOError):
                filler.connect(("127.0.0.1", port))
        time.sleep(0.05)
        yield port
    finally:
        for filler in fillers:
            filler.close()
        listener.close()


def sse_events(body: bytes) -> list[str]:
    """The ``data:`` payloads of an SSE body, in order."""
    return [
        line[len("data: ") :] for line in body.decode().split("\n") if line.startswith("data: ")
    ]


def metric_value(exposition: str, name: str, labels: dict[str, str] | None = None) -> float:
    """Value of the sample ``name`` whose labels include ``labels`` (0.0 when absent)."""
    wanted = labels or {}
    for family in text_string_to_metric_families(exposition):
        for sample in family.samples:
            if sample.name == name and all(sample.labels.get(k) == v for k, v in wanted.items()):
                return float(sample.value)
    return 0.0


def gateway_config(*upstreams: str, **overrides: Any) -> GatewayConfig:
    """A test gateway config on 127.0.0.1:0 with short, test-friendly limits (seconds)."""
    base: dict[str, Any] = {
        "upstreams": list(upstreams),
        "host": "127.0.0.1",
        "port": 0,
        "shutdown_timeout_s": 0.5,
        "timeouts": {"connect_s": 2.0, "first_token_s": 5.0, "idle_s": 5.0, "total_s": 10.0},
    }
    return GatewayConfig.model_validate(base).with_overrides(overrides)
