"""Command line for the gateway: ``gateway_command`` (click) and ``main(argv) -> int``.

Owns turning flags and an optional JSON config file into a :class:`GatewayConfig` (flags
override the file; validation errors become usage errors) and running the gateway until
Ctrl-C or SIGTERM. Heavy imports (aiohttp) stay inside the command so ``--help`` is instant.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
from typing import Any

import click


def build_config(config_file: str | None, overrides: dict[str, Any]) -> Any:
    """Build a validated ``GatewayConfig`` from an optional JSON file plus flag overrides.

    Raises ``click.UsageError`` on any validation problem.
    """
    from pydantic import ValidationError

    from gateway.config import GatewayConfig

    try:
        if config_file is not None:
            return GatewayConfig.from_json_file(config_file).with_overrides(overrides)
        return GatewayConfig.model_validate(_drop_none(overrides))
    except ValidationError as exc:
        raise click.UsageError(f"invalid gateway configuration:\n{exc}") from exc
    except (OSError, ValueError) as exc:
        raise click.UsageError(f"cannot read gateway config {config_file}: {exc}") from exc


def _drop_none(d: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in d.items():
        if isinstance(value, dict):
            value = _drop_none(value)
            if value:
                out[key] = value
        elif value is not None:
            out[key] = value
    return out


async def _serve_forever(config: Any) -> None:
    from gateway.app import running_gateway

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    # SIGINT too, explicitly: a process started from a background job inherits SIGINT as
    # ignored, and Python then never raises KeyboardInterrupt, so Ctrl-C (or `kill -INT`)
    # would not stop the gateway.
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError, RuntimeError):  # non-Unix loops
            loop.add_signal_handler(sig, stop.set)
    async with running_gateway(config) as url:
        click.echo(f"gateway listening on {url} -> {', '.join(config.upstreams)}", err=False)
        click.echo("press Ctrl-C to stop", err=True)
        await stop.wait()
    click.echo("gateway stopped", err=True)


def run_event_loop(coro: Any) -> Any:
    """Run ``coro`` on uvloop (plain asyncio if it is missing): every relayed chunk costs two
    loop wake-ups (read upstream, write client), which uvloop makes several times cheaper
    (tests/benchmarks/bench_gateway.py measures what the gateway adds)."""
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is a dependency
        return asyncio.run(coro)
    return uvloop.run(coro)


_SECONDS = click.FloatRange(min=0, min_open=True)


@click.command("gateway")
@click.option(
    "--upstream",
    "upstreams",
    multiple=True,
    metavar="URL",
    help="Upstream base URL, e.g. http://127.0.0.1:8000 (repeatable).",
)
@click.option(
    "--config",
    "config_file",
    type=click.Path(exists=True, dir_okay=False),
    help="JSON file with a GatewayConfig; flags override it.",
)
@click.option("--host", default=None, help="Address to bind (default 127.0.0.1).")
@click.option(
    "--port",
    type=click.IntRange(0, 65535),
    default=None,
    help="Port to bind (default 0 = a free port).",
)
@click.option(
    "--no-propagate-cancellation",
    "no_propagate",
    is_flag=True,
    default=False,
    help="Emulate a broken proxy: keep upstream requests running after the client "
    "disconnects (drain and discard).",
)
@click.option(
    "--max-body-bytes",
    type=click.IntRange(min=1),
    default=None,
    help="Request body limit in bytes (413 above it).",
)
@click.option(
    "--max-response-bytes",
    type=click.IntRange(min=1),
    default=None,
    help="Limit in bytes on a buffered upstream body and on one event of a stream (502 above).",
)
@click.option(
    "--events-file",
    type=click.Path(dir_okay=False, writable=True),
    default=None,
    help="Append one JSON line per breaker transition to this file (created at start).",
)
@click.option(
    "--health-check-timeout",
    "health_check_timeout_s",
    type=_SECONDS,
    default=None,
    help="Seconds each upstream's /health may take when the gateway's /health is asked.",
)
@click.option(
    "--connect-retries",
    type=click.IntRange(min=0),
    default=None,
    help="Retries on another upstream after a refused connection (default 1).",
)
@click.option(
    "--connect-timeout",
    "connect_s",
    type=_SECONDS,
    default=None,
    help="Upstream connect timeout, seconds.",
)
@click.option(
    "--first-token-timeout",
    "first_token_s",
    type=_SECONDS,
    default=None,
    help="Streaming: seconds from sending to the first body chunk.",
)
@click.option(
    "--idle-timeout",
    "idle_s",
    type=_SECONDS,
    default=None,
    help="Seconds allowed between two body chunks.",
)
@click.option(
    "--total-timeout",
    "total_s",
    type=_SECONDS,
    default=None,
    help="Deadline for the whole exchange, seconds.",
)
@click.option(
    "--breaker-failures",
    "consecutive_failures",
    type=click.IntRange(min=1),
    default=None,
    help="Consecutive failures that open a breaker.",
)
@click.option(
    "--breaker-error-rate",
    "error_rate",
    type=click.FloatRange(0, 1, min_open=True),
    default=None,
    help="Failure fraction (0-1) over the window that opens a breaker.",
)
@click.option(
    "--breaker-window", "window_s", type=_SECONDS, default=None, help="Error-rate window, seconds."
)
@click.option(
    "--breaker-min-requests",
    "min_requests",
    type=click.IntRange(min=1),
    default=None,
    help="Results needed in the window before the error rate counts.",
)
@click.option(
    "--breaker-slow-first-token",
    "slow_first_token_s",
    type=_SECONDS,
    default=None,
    help="First-token latency (s) above which a streaming request counts as failed.",
)
@click.option(
    "--breaker-cooldown",
    "cooldown_s",
    type=click.FloatRange(min=0),
    default=None,
    help="Seconds a breaker stays open before half-open probes.",
)
@click.option(
    "--breaker-probes",
    "half_open_probes",
    type=click.IntRange(min=1),
    default=None,
    help="Concurrent probes admitted while half-open.",
)
@click.option(
    "--max-in-flight", type=click.IntRange(min=1), default=None, help="Requests forwarded at once."
)
@click.option(
    "--max-queue",
    type=click.IntRange(min=0),
    default=None,
    help="Requests waiting for a slot; beyond it 429.",
)
@click.option(
    "--queue-timeout",
    "queue_timeout_s",
    type=_SECONDS,
    default=None,
    help="Seconds a request may wait for a slot before 429.",
)
@click.option(
    "--log-level",
    default="INFO",
    show_default=True,
    type=click.Choice(["DEBUG", "INFO", "WARNING", "ERROR"], case_sensitive=False),
)
def gateway_command(
    upstreams: tuple[str, ...],
    config_file: str | None,
    host: str | None,
    port: int | None,
    no_propagate: bool,
    max_body_bytes: int | None,
    max_response_bytes: int | None,
    events_file: str | None,
    health_check_timeout_s: float | None,
    log_level: str,
    **limits: Any,
) -> None:
    """Run the reverse proxy in front of vLLM upstreams until Ctrl-C."""
    import logging

    timeouts = {k: limits.pop(k) for k in ("connect_s", "first_token_s", "idle_s", "total_s")}
    admission = {k: limits.pop(k) for k in ("max_in_flight", "max_queue", "queue_timeout_s")}
    connect_retries = limits.pop("connect_retries")
    overrides: dict[str, Any] = {
        "connect_retries": connect_retries,
        "upstreams": list(upstreams) or None,
        "host": host,
        "port": port,
        "propagate_cancellation": False if no_propagate else None,
        "max_body_bytes": max_body_bytes,
        "max_response_bytes": max_response_bytes,
        "events_file": events_file,
        "health_check_timeout_s": health_check_timeout_s,
        "timeouts": timeouts,
        "breaker": limits,
        "admission": admission,
    }
    if config_file is None and not upstreams:
        raise click.UsageError("give at least one --upstream URL or a --config file")
    config = build_config(config_file, overrides)
    logging.basicConfig(
        level=log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    try:
        run_event_loop(_serve_forever(config))
    except KeyboardInterrupt:
        click.echo("gateway stopped", err=True)
    except OSError as exc:  # the port is taken, the events file cannot be created, ...
        raise click.ClickException(f"cannot run the gateway: {exc}") from exc


def main(argv: list[str] | None = None) -> int:
    """Run :data:`gateway_command` with ``argv``; return the exit code."""
    try:
        gateway_command.main(args=argv, prog_name="gateway", standalone_mode=False)
    except click.exceptions.Abort:
        return 130
    except click.ClickException as exc:
        exc.show()
        return exc.exit_code
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
