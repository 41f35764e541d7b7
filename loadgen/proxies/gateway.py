"""The project's gateway as a relay: ``python -m gateway.cli`` in its own process.

A separate process, so the proxy's work never runs on the event loop that timestamps tokens;
its log, its events file (breaker transitions), its routing decisions and, with a delay
injector (``--slowdown``), its holds go to the case directory. It counts as
ready when its ``/health`` says 200, which it only does once an upstream really answers its
own ``/health``.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any, ClassVar

from loadgen.proxies.relay import Relay, RelayCommand, RelayKind, running_relay
from loadgen.runformat.layout import (
    GATEWAY_EVENTS_FILE,
    GATEWAY_HOLDS_FILE,
    GATEWAY_LOG,
    ROUTING_DECISIONS_FILE,
)
from server.process import free_loopback_port


def gateway_command(
    upstreams: Sequence[str],
    log_path: Path,
    *,
    propagate_cancellation: bool,
    events_path: Path | None = None,
    routing: str | None = None,
    decisions_path: Path | None = None,
    holds_path: Path | None = None,
    extra_args: Sequence[str] = (),
) -> RelayCommand:
    """The gateway on a free loopback port in front of ``upstreams``; ``events_path``
    receives its breaker transitions (``--events-file``), ``routing`` is its policy
    (``--routing``; ``None``: its default), ``decisions_path`` receives its routing decisions
    (``--decisions-file``), ``holds_path`` the delay injector's holds (``--holds-file``,
    written only with a ``--slowdown`` among ``extra_args``), ``extra_args`` go to
    ``loadgen gateway`` as they are."""
    port = free_loopback_port()
    argv = [sys.executable, "-m", "gateway.cli", "--port", str(port)]
    for upstream in upstreams:
        argv += ["--upstream", upstream]
    if not propagate_cancellation:
        argv.append("--no-propagate-cancellation")
    if events_path is not None:
        argv += ["--events-file", str(events_path)]
    if routing is not None:
        argv += ["--routing", routing]
    if decisions_path is not None:
        argv += ["--decisions-file", str(decisions_path)]
    if holds_path is not None:
        argv += ["--holds-file", str(holds_path)]
    argv += list(extra_args)
    # Unbuffered, so the log shows transitions as they happen.
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    return RelayCommand(argv, env, f"http://127.0.0.1:{port}", log_path, [log_path])


class GatewayKind(RelayKind):
    """The project's gateway (``scenarios.plan.GatewaySpec``): always installed."""

    name: ClassVar[str] = "the gateway"
    timeout_s: ClassVar[float] = 30.0

    def find(self) -> str:
        return sys.executable

    def command(
        self, spec: Any, binary: str, upstreams: Sequence[str], workdir: Path
    ) -> RelayCommand:
        return gateway_command(
            upstreams,
            workdir / GATEWAY_LOG,
            propagate_cancellation=spec.propagate_cancellation,
            events_path=workdir / GATEWAY_EVENTS_FILE,
            routing=spec.routing,
            decisions_path=workdir / ROUTING_DECISIONS_FILE,
            holds_path=workdir / GATEWAY_HOLDS_FILE,
            extra_args=spec.extra_args,
        )


@contextlib.asynccontextmanager
async def running_gateway_process(
    upstreams: list[str],
    log_path: Path,
    *,
    propagate_cancellation: bool,
    events_path: Path | None = None,
    extra_args: tuple[str, ...] = (),
    timeout_s: float = GatewayKind.timeout_s,
) -> AsyncIterator[Relay]:
    """Start the gateway (:func:`gateway_command`) for ``upstreams``; yield it once its
    ``/health`` answers 200; stop it on exit.

    Raises:
        RuntimeError: it did not answer ``/health`` in time; the message quotes its log.
    """
    command = gateway_command(
        upstreams, log_path, propagate_cancellation=propagate_cancellation,
        events_path=events_path, extra_args=extra_args,
    )  # fmt: skip
    async with running_relay(command, GatewayKind.name, timeout_s) as relay:
        yield relay
