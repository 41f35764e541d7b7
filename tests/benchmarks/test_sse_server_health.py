"""The benchmarks' fake vLLM answers ``GET /health`` with 200, as vLLM does: vllm-router polls
its workers' ``/health`` at start-up and takes no request before one answers 200 (the gateway
benchmark's vllm-router anchor depends on it). Driven with a fake transport, no socket."""

from __future__ import annotations

import sse_server


class FakeTransport:
    """Collects every write (one list entry per ``write`` call)."""

    def __init__(self) -> None:
        self.writes: list[bytes] = []

    def write(self, data: bytes) -> None:
        self.writes.append(data)


def test_health_is_200_with_an_empty_body_on_a_kept_alive_connection() -> None:
    proto = sse_server.StreamProtocol(sse_server.State(b""))
    transport = FakeTransport()
    proto.connection_made(transport)  # type: ignore[arg-type]
    # Two checks on one connection, as a poller with a connection pool sends them.
    request = b"GET /health HTTP/1.1\r\nhost: 127.0.0.1\r\naccept: */*\r\n\r\n"
    proto.data_received(request + request)
    answer = b"HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ncontent-length: 0\r\n\r\n"
    assert transport.writes == [answer, answer]
