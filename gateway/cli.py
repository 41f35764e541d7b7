"""Command line for the gateway: ``gateway_command`` (click) and ``main(argv) -> int``.

Owns turning flags and an optional JSON config file into a :class:`GatewayConfig` (flags
override the file; validation errors become one usage line; the flags are generated from the
config model's fields, their types, bounds and help, by ``server.cli_options``) and running
the gateway until Ctrl-C or SIGTERM. Heavy imports (aiohttp) stay inside the command so
``--help`` is instant.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
from typing import Any

import click

from gateway.config import GatewayConfig
from server.cli_options import ModelOptions
from server.net.errors import describe_exception
from server.net.exit_codes import GatewayExit
from server.net.input_files import read_bounded
from server.net.json_text import loads_strict
from server.net.loop import run_event_loop
from server.net.urls import redact_urls_in


def build_config(config_file: str | None, values: dict[str, Any]) -> GatewayConfig:
    """A validated ``GatewayConfig`` from an optional JSON file, overridden by the flags given
    (``values`` as click passes them: :func:`config_options`' names, ``None`` = not given).

    Raises ``click.UsageError`` (one line naming the flags or the file's fields) on any
    validation problem or an unreadable file.
    """
    base: dict[str, Any] = {}
    if config_file is not None:
        try:
            text = read_bounded(config_file, CONFIG_MAX_BYTES, "a gateway config file")
            base = loads_strict(text.decode("utf-8"))
        except (OSError, ValueError, RecursionError) as exc:
            # A file that is no regular file says what it is (/dev/zero: a character device)
            why = exc.strerror if isinstance(exc, OSError) and exc.strerror else None
            why = why or describe_exception(exc)
            raise click.UsageError(f"cannot read gateway config {config_file}: {why}") from exc
        if not isinstance(base, dict):
            raise click.UsageError(f"gateway config {config_file}: not a JSON object")
    try:
        return _OPTIONS.build(values, base=base)
    except click.UsageError as exc:
        raise click.UsageError(f"invalid gateway configuration: {exc.message}") from None


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


#: Fields of ``GatewayConfig`` that no flag sets (the JSON config file still can).
#: Largest gateway config file read (bytes): 1 MiB, a thousand times a config's size; a
#: bigger file, or a device such as /dev/zero, is refused instead of read without end.
CONFIG_MAX_BYTES = 2**20
_NO_FLAG = {"shutdown_timeout_s", "admission.retry_after_s"}
#: Fields whose flag is not the one their name gives (see :func:`_flag`).
_FLAG_NAMES = {
    "upstreams": "upstream",
    "breaker.consecutive_failures": "breaker-failures",
    "breaker.half_open_probes": "breaker-probes",
}


def _flag(path: str) -> str:
    """The flag of a config field: its name without the seconds suffix ``_s``, dashed; a
    timeout's ends in ``-timeout`` (``timeouts.idle_s`` → ``idle-timeout``), a breaker
    threshold's starts with ``breaker-`` (``breaker.window_s`` → ``breaker-window``)."""
    if path in _FLAG_NAMES:
        return _FLAG_NAMES[path]
    group, _, name = path.rpartition(".")
    flag = name.removesuffix("_s").replace("_", "-")
    return {"timeouts": f"{flag}-timeout", "breaker": f"breaker-{flag}"}.get(group, flag)


#: The gateway's flags, one per field of ``GatewayConfig`` (nested models' fields included),
#: default ``None``: a flag not given leaves the config file's value (or the model's default).
_OPTIONS = ModelOptions(GatewayConfig, flag=_flag, skip=_NO_FLAG, flatten=True, given_only=True)


def config_options() -> list[click.Option]:
    """The click options of :data:`_OPTIONS` (``server.cli_options``)."""
    return _OPTIONS.options()


def _serve(config_file: str | None, log_level: str, **fields: Any) -> None:
    """Run the reverse proxy in front of vLLM upstreams until Ctrl-C."""
    if config_file is None and not fields.get("upstreams"):
        raise click.UsageError("give at least one --upstream URL or a --config file")
    config = build_config(config_file, fields)
    _refuse_unused_flags(config, fields)
    handler = logging.StreamHandler()
    handler.setFormatter(_RedactingFormatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    logging.basicConfig(level=log_level.upper(), handlers=[handler])
    try:
        run_event_loop(_serve_forever(config))
    except KeyboardInterrupt:
        click.echo("gateway stopped", err=True)
    except OSError as exc:  # the port is taken, the events file cannot be created, ...
        raise click.ClickException(f"cannot run the gateway: {describe_exception(exc)}") from exc


#: Flags that only one setting reads: (config field, the setting that reads it).
_NEEDS = {
    "routing_epsilon": "--routing prefix-hash",
    "routing_prefix_blocks": "--routing prefix-hash",
    "routing_prefix_chars": "--routing prefix-hash",
    "slowdown_scope": "a --slowdown above 0",
}


def _refuse_unused_flags(config: GatewayConfig, fields: dict[str, Any]) -> None:
    """Refuse a flag given (``fields``: click's values, ``None`` = not given) that the
    configured gateway would ignore, e.g. ``--routing-epsilon`` with ``--routing round-robin``.

    Raises:
        click.UsageError: one line naming the flag and what it needs.
    """
    used = {"slowdown_scope": config.slowdown > 0}
    for field, needs in _NEEDS.items():
        applies = used.get(field, config.routing == "prefix-hash")
        if fields.get(field) is not None and not applies:
            raise click.UsageError(
                f"--{_flag(field)} applies only with {needs}; it would be ignored"
            )


class _RedactingFormatter(logging.Formatter):
    """Log lines with URL passwords masked (an upstream given as ``http://user:pw@host``)."""

    def format(self, record: logging.LogRecord) -> str:
        return redact_urls_in(super().format(record))


gateway_command = click.Command(
    "gateway",
    callback=_serve,
    help=_serve.__doc__,
    params=[
        click.Option(["--config", "config_file"], type=click.Path(exists=True, dir_okay=False),
                     help="JSON file with a GatewayConfig; flags override it."),
        *config_options(),
        click.Option(["--log-level"], default="INFO", show_default=True,
                     type=click.Choice(["DEBUG", "INFO", "WARNING", "ERROR"],
                                       case_sensitive=False)),
    ],
)  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    """Run :data:`gateway_command` with ``argv``; return the exit code."""
    try:
        gateway_command.main(args=argv, prog_name="gateway", standalone_mode=False)
    except click.exceptions.Abort:
        return GatewayExit.ABORTED
    except click.ClickException as exc:
        exc.show()
        return exc.exit_code  # click's: 1 (GatewayExit.CANNOT_RUN) or 2 (GatewayExit.USAGE)
    return GatewayExit.STOPPED


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
