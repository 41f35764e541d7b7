"""``loadgen server start``: a vLLM started and left running, its flags generated from
:class:`ServerStartParams` (``server.cli_options``); the knobs it shares with the scenarios
have the same names there (``scenarios.common.ServerParams``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click
from pydantic import Field

from loadgen.cli.server import state_dir
from scenarios.common import MAX_CONCURRENCY, MAX_RUN_S, ServerParams, SizeText
from server.cli_options import Deprecated, ModelOptions
from server.config import ServerConfig
from server.sizes import parse_size

if TYPE_CHECKING:
    from server.manager import RunningServer


class ServerStartParams(ServerParams):
    """What ``loadgen server start`` starts vLLM with (each a ``--flag``); the knobs it shares
    with the scenarios (``scenarios.common.ServerParams``) have the same flags there."""

    cache: SizeText = Field(default="1GiB", description="KV cache size (1GiB = 2^30 B).")
    max_num_seqs: int | None = Field(
        default=None,
        gt=0,
        le=MAX_CONCURRENCY,
        description="Scheduler's running-batch limit (none: vLLM's default).",
    )
    prefix_caching: bool = Field(default=True, description="vLLM's automatic prefix caching.")
    speculative_config: dict[str, object] | None = Field(
        default=None, description="JSON passed to vLLM's --speculative-config."
    )
    start_timeout_s: float = Field(
        default=900.0,
        gt=0,
        le=MAX_RUN_S,
        description=f"Seconds to wait for /health (≤ {MAX_RUN_S:g}).",
    )

    def config(self) -> ServerConfig:
        """The server configuration these knobs make."""
        return self.server(
            parse_size(self.cache),
            max_num_seqs=self.max_num_seqs,
            enable_prefix_caching=self.prefix_caching,
            speculative_config=self.speculative_config,
        )


#: ``--compile``, the old name of ``--no-enforce-eager``, kept hidden for scripts.
_START_OPTIONS = ModelOptions(
    ServerStartParams, deprecated=[Deprecated("--compile", "enforce_eager", False)]
)


def _start(as_json: bool, **values: Any) -> None:
    """Start vLLM and return once it is healthy (it keeps running; stop it with `stop`)."""
    from server.engine_flags import UnsupportedFlagError, adapt_command
    from server.engines import check_cache_fits, resolve_engine

    params = _START_OPTIONS.build(values)
    config = params.config()
    engine = resolve_engine(params.vllm, params.engine_python)  # installed: validated
    try:  # flags the engine's release lacks, a cache no memory holds: here, before the start
        adapt_command(config.command(engine.python, "MODEL", 0), engine)
        check_cache_fits(config.kv_cache_bytes, 1, engine)
    except (UnsupportedFlagError, ValueError) as exc:
        raise click.UsageError(str(exc)) from None
    running = _start_server(config, params.start_timeout_s)
    cap = running.capacity
    state = {
        "url": running.url,
        "pid": running.pid,
        "port": running.port,
        "model_name": running.model_name,
        "version": running.version,
        "kv_capacity_tokens": cap.tokens if cap else None,
        "block_size": cap.block_size if cap else None,
        "kv_cache_bytes": config.kv_cache_bytes,
        "log": str(running.log_path),
        "startup_s": running.startup_s,
        "model_variant": running.model_variant,
        "engine_python": engine.python,
        **({"kv_capacity_error": running.capacity_error} if running.capacity_error else {}),
    }
    (state_dir() / f"{running.port}.json").write_text(json.dumps(state, indent=2))
    running.detach()  # it outlives this command
    if as_json:
        click.echo(json.dumps(state))
        return
    variant = running.model_variant
    model = (
        f"model {variant['variant']} ({variant['reason']})" if variant else f"model {config.model}"
    )
    click.echo(
        f"vLLM {state['version']} healthy at {state['url']} (pid {state['pid']}) in "
        f"{state['startup_s']} s; {model}; KV capacity {state['kv_capacity_tokens']} "
        f"tokens, block size {state['block_size']}; log {state['log']}"
        + (f" (unknown: {running.capacity_error})" if running.capacity_error else "")
    )


def _start_server(config: ServerConfig, timeout_s: float) -> RunningServer:
    """Start ``config`` in a fresh directory under the state directory, showing progress.

    Raises:
        click.ClickException: the server did not become healthy (its log's reason).
    """
    import asyncio
    import tempfile

    from rich.console import Console

    from server.manager import ServerStartError, start_server

    console = Console(stderr=True)
    workdir = Path(tempfile.mkdtemp(prefix="vllm-", dir=state_dir()))
    with console.status("starting vLLM…") as status:

        def on_status(elapsed: float, line: str) -> None:
            status.update(f"starting vLLM… {elapsed:.0f} s  [dim]{line[-90:]}[/dim]")

        try:
            return asyncio.run(
                start_server(config, workdir, start_timeout_s=timeout_s, on_status=on_status)
            )
        except ServerStartError as exc:
            raise click.ClickException(str(exc)) from None


def start_command() -> click.Command:
    """``loadgen server start``, its options from :class:`ServerStartParams`."""
    return click.Command(
        "start",
        callback=_start,
        help=_start.__doc__,
        params=[
            *_START_OPTIONS.options(),
            click.Option(["--json", "as_json"], is_flag=True,
                         help="Print one JSON line (url, pid, capacity, variant)."),
        ],
    )  # fmt: skip
