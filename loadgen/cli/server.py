"""``loadgen server start|stop|status``: a vLLM left running while you experiment.

State of each started server is a JSON file under ``<cache>/servers/PORT.json`` (pid, URL,
log, capacity) so ``stop`` and ``status`` work from any later shell.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import click

from server.model_variant import VARIANT_CHOICES, VariantChoice
from server.priority import ENGINE_CORE_NICE, SERVER_GROUP_NICE
from server.sizes import parse_size


def _state_dir() -> Path:
    from server.embedded_model import cache_root

    path = cache_root() / "servers"
    path.mkdir(parents=True, exist_ok=True)
    return path


def _states() -> list[dict[str, Any]]:
    return [json.loads(p.read_text()) for p in sorted(_state_dir().glob("*.json"))]


class _Size(click.ParamType):
    name = "SIZE"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> int:
        try:
            return value if isinstance(value, int) else parse_size(str(value))
        except ValueError as exc:
            self.fail(str(exc), param, ctx)


@click.group()
def server() -> None:
    """Start, stop and inspect vLLM servers left running in the background."""


@server.command()
@click.option(
    "--cache",
    type=_Size(),
    default="1GiB",
    show_default=True,
    help="KV cache size (1GiB = 2^30 B).",
)
@click.option("--model", default=None, help="Model directory (default: the embedded model).")
@click.option(
    "--model-variant",
    type=click.Choice(VARIANT_CHOICES),
    default="auto",
    show_default=True,
    help="Embedded model: auto (the faster on this CPU), bf16 or fp32 (same KV bytes/token).",
)
@click.option("--max-model-len", type=int, default=2048, show_default=True)
@click.option("--max-num-seqs", type=int, default=None)
@click.option("--prefix-caching/--no-prefix-caching", default=True, show_default=True)
@click.option(
    "--speculative-config", default=None, help="JSON passed to vLLM's --speculative-config."
)
@click.option(
    "--compile", "compile_", is_flag=True, help="Use torch.compile (slower start) instead of eager."
)
@click.option("--extra-arg", multiple=True, help="Extra vLLM argument (repeatable).")
@click.option(
    "--vllm",
    "vllm_version",
    default=None,
    help="vLLM version to serve with: the project's own or one from `make engine VLLM=X`.",
)
@click.option("--engine-python", default=None, help="Interpreter of a vLLM installed elsewhere.")
@click.option(
    "--engine-core-nice",
    type=click.IntRange(0, 19),
    default=ENGINE_CORE_NICE,
    show_default=True,
    help="Nice value for vLLM's busy-waiting engine-core process, so the load generator on "
    "the same cores wakes on time (0: as vLLM starts it).",
)
@click.option(
    "--server-group-nice",
    type=click.IntRange(0, 19),
    default=0,
    show_default=True,
    help=f"Nice value of the server's session (its autogroup) against the load generator's, "
    f"e.g. {SERVER_GROUP_NICE}: the client's timing improves but vLLM slows (0: as vLLM starts "
    "it).",
)
@click.option(
    "--timeout",
    "timeout_s",
    type=float,
    default=900.0,
    show_default=True,
    help="Seconds to wait for health.",
)
@click.option(
    "--json", "as_json", is_flag=True, help="Print one JSON line (url, pid, capacity, variant)."
)
def start(
    cache: int,
    model: str | None,
    model_variant: VariantChoice,
    max_model_len: int,
    max_num_seqs: int | None,
    prefix_caching: bool,
    speculative_config: str | None,
    compile_: bool,
    extra_arg: tuple[str, ...],
    vllm_version: str | None,
    engine_python: str | None,
    engine_core_nice: int,
    server_group_nice: int,
    timeout_s: float,
    as_json: bool,
) -> None:
    """Start vLLM and return once it is healthy (it keeps running; stop it with `stop`)."""
    import asyncio
    import tempfile

    from rich.console import Console

    from server.config import ServerConfig
    from server.engine_flags import UnsupportedFlagError, adapt_command
    from server.engines import EngineNotFoundError, resolve_engine
    from server.manager import ServerStartError, start_server

    try:
        engine = resolve_engine(vllm_version, engine_python)
    except EngineNotFoundError as exc:
        raise click.UsageError(str(exc)) from None

    try:
        spec = json.loads(speculative_config) if speculative_config else None
    except json.JSONDecodeError as exc:
        raise click.BadParameter(f"not JSON: {exc}", param_hint="--speculative-config") from None
    config = ServerConfig(
        model=model,
        model_variant=model_variant,
        kv_cache_bytes=cache,
        max_model_len=max_model_len,
        max_num_seqs=max_num_seqs,
        enable_prefix_caching=prefix_caching,
        speculative_config=spec,
        enforce_eager=not compile_,
        extra_args=extra_arg,
        python=engine.python,
        engine_core_nice=engine_core_nice,
        server_group_nice=server_group_nice,
    )
    try:  # flags the engine's release lacks fail here, before the start
        adapt_command(config.command(engine.python, "MODEL", 0), engine)
    except UnsupportedFlagError as exc:
        raise click.UsageError(str(exc)) from None
    console = Console(stderr=True)
    workdir = Path(tempfile.mkdtemp(prefix="vllm-", dir=_state_dir()))
    with console.status("starting vLLM…") as status:

        def on_status(elapsed: float, line: str) -> None:
            status.update(f"starting vLLM… {elapsed:.0f} s  [dim]{line[-90:]}[/dim]")

        try:
            running = asyncio.run(
                start_server(config, workdir, start_timeout_s=timeout_s, on_status=on_status)
            )
        except ServerStartError as exc:
            raise click.ClickException(str(exc)) from None
    cap = running.capacity
    state = {
        "url": running.url,
        "pid": running.pid,
        "port": running.port,
        "model_name": running.model_name,
        "version": running.version,
        "kv_capacity_tokens": cap.tokens if cap else None,
        "block_size": cap.block_size if cap else None,
        "kv_cache_bytes": cache,
        "log": str(running.log_path),
        "startup_s": running.startup_s,
        "model_variant": running.model_variant,
        "engine_python": engine.python,
        **({"kv_capacity_error": running.capacity_error} if running.capacity_error else {}),
    }
    (_state_dir() / f"{running.port}.json").write_text(json.dumps(state, indent=2))
    running.detach()  # it outlives this command
    if as_json:
        click.echo(json.dumps(state))
    else:
        variant = running.model_variant
        model = f"model {variant['variant']} ({variant['reason']})" if variant else f"model {model}"
        click.echo(
            f"vLLM {state['version']} healthy at {state['url']} (pid {state['pid']}) in "
            f"{state['startup_s']} s; {model}; KV capacity {state['kv_capacity_tokens']} "
            f"tokens, block size {state['block_size']}; log {state['log']}"
            + (f" (unknown: {running.capacity_error})" if running.capacity_error else "")
        )


@server.command()
@click.option("--port", type=int, default=None, help="Stop the server on this port.")
@click.option("--all", "stop_all", is_flag=True, help="Stop every server started with `start`.")
def stop(port: int | None, stop_all: bool) -> None:
    """Stop server(s) started with `loadgen server start` (SIGTERM, then SIGKILL)."""
    from server.process import port_is_free, stop_group

    states = _states()
    if port is not None:
        states = [s for s in states if s["port"] == port]
    elif not stop_all and len(states) > 1:
        raise click.UsageError(f"{len(states)} servers running; pass --port or --all")
    if not states:
        click.echo("no server started with `loadgen server start` is recorded: nothing to stop")
        return
    failed = False
    for state in states:
        result = stop_group(int(state["pid"]))
        gone = result.group_gone and port_is_free(int(state["port"]))
        (_state_dir() / f"{state['port']}.json").unlink(missing_ok=True)
        verdict = "stopped" if gone else "NOT fully stopped"
        click.echo(f"{state['url']}: {verdict} in {result.elapsed_s:.1f} s")
        failed |= not gone
    if failed:
        sys.exit(1)


@server.command()
@click.option("--json", "as_json", is_flag=True)
def status(as_json: bool) -> None:
    """Show servers started with `loadgen server start` and whether they are healthy."""
    import httpx

    rows = []
    for state in _states():
        try:
            healthy = httpx.get(f"{state['url']}/health", timeout=2).status_code == 200
        except httpx.HTTPError:
            healthy = False
        rows.append({**state, "healthy": healthy})
    if as_json:
        click.echo(json.dumps(rows))
        return
    if not rows:
        click.echo("no server recorded")
    for row in rows:
        click.echo(
            f"{row['url']} pid {row['pid']} {'healthy' if row['healthy'] else 'NOT healthy'}; "
            f"KV {row['kv_capacity_tokens']} tokens; log {row['log']}"
        )
