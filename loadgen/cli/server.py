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

from server.net.exit_codes import ServerExit


def state_dir() -> Path:
    """Where each started server's state file lives (``<cache>/servers/PORT.json``)."""
    from server.embedded_model import cache_root

    path = cache_root() / "servers"
    path.mkdir(parents=True, exist_ok=True)
    return path


def _states() -> list[dict[str, Any]]:
    return [json.loads(p.read_text()) for p in sorted(state_dir().glob("*.json"))]


class _ServerGroup(click.Group):
    """``loadgen server``: ``start`` is built on first use (its options come from a model
    whose module imports numpy), so ``loadgen --help`` stays quick."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), "start"})

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name == "start":
            from loadgen.cli.server_start import start_command

            return start_command()
        return super().get_command(ctx, name)


@click.group(cls=_ServerGroup)
def server() -> None:
    """Start, stop and inspect vLLM servers left running in the background."""


@server.command()
@click.option(
    "--port", type=click.IntRange(1, 65535), default=None, help="Stop the server on this port."
)
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
        (state_dir() / f"{state['port']}.json").unlink(missing_ok=True)
        verdict = "stopped" if gone else "NOT fully stopped"
        click.echo(f"{state['url']}: {verdict} in {result.elapsed_s:.1f} s")
        failed |= not gone
    if failed:
        sys.exit(ServerExit.FAILED)


@server.command()
@click.option("--json", "as_json", is_flag=True)
def status(as_json: bool) -> None:
    """Show servers started with `loadgen server start` and whether they are healthy."""
    import asyncio

    from loadgen.server_watch import server_answers

    async def check_all(states: list[dict[str, Any]]) -> list[bool]:
        return await asyncio.gather(*(server_answers(s["url"], attempts=1) for s in states))

    states = _states()
    healthy = asyncio.run(check_all(states))
    rows = [{**state, "healthy": ok} for state, ok in zip(states, healthy, strict=True)]
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
