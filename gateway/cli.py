"""Command line for the gateway: ``gateway_command`` (click) and ``main(argv) -> int``.

Owns turning flags and an optional JSON config file into a :class:`GatewayConfig` (flags
override the file; validation errors become usage errors; the flags are built from the
config model's fields, their types, bounds and help) and running the gateway until
Ctrl-C or SIGTERM. Heavy imports (aiohttp) stay inside the command so ``--help`` is instant.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import types
import typing
from typing import Any

import annotated_types
import click
from pydantic import BaseModel
from pydantic.fields import FieldInfo

from server.net.errors import describe_exception
from server.net.urls import redact_urls_in


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
        why = describe_exception(exc)
        raise click.UsageError(f"cannot read gateway config {config_file}: {why}") from exc


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


#: Fields of ``GatewayConfig`` that no flag sets (the JSON config file still can).
_NO_FLAG = {"shutdown_timeout_s", "admission.retry_after_s"}
#: Fields whose flag is not the one their name gives (see :func:`_flag`).
_FLAG_NAMES = {
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


def _click_type(field: FieldInfo) -> click.ParamType:
    """The field's type as a click type, with its bounds (``gt``/``ge``/``lt``/``le``)."""
    base = field.annotation
    if typing.get_origin(base) in (typing.Union, types.UnionType):
        base = next(a for a in typing.get_args(base) if a is not type(None))
    bounds: dict[str, Any] = {}
    for m in field.metadata:
        if isinstance(m, annotated_types.Gt | annotated_types.Ge):
            bounds.update(min=m.gt if isinstance(m, annotated_types.Gt) else m.ge,
                          min_open=isinstance(m, annotated_types.Gt))  # fmt: skip
        elif isinstance(m, annotated_types.Lt | annotated_types.Le):
            bounds.update(max=m.lt if isinstance(m, annotated_types.Lt) else m.le,
                          max_open=isinstance(m, annotated_types.Lt))  # fmt: skip
    if typing.get_origin(base) is typing.Literal:
        return click.Choice([str(v) for v in typing.get_args(base)])
    if base is int:
        return click.IntRange(**bounds) if bounds else click.INT
    if base is float:
        return click.FloatRange(**bounds) if bounds else click.FLOAT
    return click.STRING


def config_options(model: type[BaseModel] | None = None, prefix: str = "") -> list[click.Option]:
    """One option per field of the gateway's config model (nested models: one per field of
    theirs), its type, bounds and help from the field: default ``None``, so a flag not given
    leaves the config file's value (or the model's default). The option's name is the field's
    path with ``__`` for the dots (``breaker__window_s``); :func:`_overrides` nests it back.
    ``upstreams``, ``propagate_cancellation`` and ``events_file`` have their own flags
    (``--upstream``, ``--no-propagate-cancellation``, ``--events-file``)."""
    from gateway.config import GatewayConfig

    options: list[click.Option] = []
    for name, field in (model or GatewayConfig).model_fields.items():
        path = f"{prefix}{name}"
        if path in _NO_FLAG or path in ("upstreams", "propagate_cancellation", "events_file"):
            continue
        if isinstance(field.annotation, type) and issubclass(field.annotation, BaseModel):
            options += config_options(field.annotation, f"{path}.")
            continue
        options.append(
            click.Option(
                [f"--{_flag(path)}", path.replace(".", "__")],
                type=_click_type(field),
                default=None,
                help=field.description,
            )
        )
    return options


def _overrides(values: dict[str, Any]) -> dict[str, Any]:
    """``{"breaker__window_s": 5}`` → ``{"breaker": {"window_s": 5}}``."""
    out: dict[str, Any] = {}
    for key, value in values.items():
        *groups, name = key.split("__")
        target = out
        for group in groups:
            target = target.setdefault(group, {})
        target[name] = value
    return out


def _serve(
    upstreams: tuple[str, ...],
    config_file: str | None,
    no_propagate: bool,
    events_file: str | None,
    log_level: str,
    **fields: Any,
) -> None:
    """Run the reverse proxy in front of vLLM upstreams until Ctrl-C."""
    overrides: dict[str, Any] = {
        **_overrides(fields),
        "upstreams": list(upstreams) or None,
        "propagate_cancellation": False if no_propagate else None,
        "events_file": events_file,
    }
    if config_file is None and not upstreams:
        raise click.UsageError("give at least one --upstream URL or a --config file")
    config = build_config(config_file, overrides)
    handler = logging.StreamHandler()
    handler.setFormatter(_RedactingFormatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    logging.basicConfig(level=log_level.upper(), handlers=[handler])
    try:
        run_event_loop(_serve_forever(config))
    except KeyboardInterrupt:
        click.echo("gateway stopped", err=True)
    except OSError as exc:  # the port is taken, the events file cannot be created, ...
        raise click.ClickException(f"cannot run the gateway: {describe_exception(exc)}") from exc


class _RedactingFormatter(logging.Formatter):
    """Log lines with URL passwords masked (an upstream given as ``http://user:pw@host``)."""

    def format(self, record: logging.LogRecord) -> str:
        return redact_urls_in(super().format(record))


gateway_command = click.Command(
    "gateway",
    callback=_serve,
    help=_serve.__doc__,
    params=[
        click.Option(["--upstream", "upstreams"], multiple=True, metavar="URL",
                     help="Upstream base URL, e.g. http://127.0.0.1:8000 (repeatable)."),
        click.Option(["--config", "config_file"], type=click.Path(exists=True, dir_okay=False),
                     help="JSON file with a GatewayConfig; flags override it."),
        click.Option(["--no-propagate-cancellation", "no_propagate"], is_flag=True,
                     default=False,
                     help="Emulate a broken proxy: keep upstream requests running after the "
                     "client disconnects (drain and discard)."),
        click.Option(["--events-file"], type=click.Path(dir_okay=False, writable=True),
                     default=None, help="Append one JSON line per breaker transition to this "
                     "file (created at start)."),
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
        return 130
    except click.ClickException as exc:
        exc.show()
        return exc.exit_code
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
