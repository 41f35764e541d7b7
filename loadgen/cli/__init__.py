"""``loadgen``: the command line, and the project's composition root (it may import every package;
nothing else imports it). One module per command: ``run``, ``report``, ``validate``,
``compare``, ``gate``, ``server`` (``server_start``: its ``start``), ``gateway``, ``trace``,
``export``; ``scenario_commands`` holds what ``run`` and ``gate`` share (one subcommand per
scenario, the checks before any start), ``run_and_report`` a run followed by its report and
manifest.

Thin: build a config, validate it, call one entry point. Heavy modules (pandas, matplotlib,
aiohttp) are imported inside commands so ``--help`` is quick.
"""

from __future__ import annotations

import click

from loadgen.cli.compare import compare
from loadgen.cli.export import export
from loadgen.cli.gate import gate
from loadgen.cli.gateway import gateway_command
from loadgen.cli.report import report
from loadgen.cli.run import run
from loadgen.cli.scenario_commands import list_scenarios
from loadgen.cli.server import server
from loadgen.cli.trace import trace
from loadgen.cli.validate import validate
from server.net.urls import redact_urls_in


class _Commands(click.Group):
    """The command group; an error any command raises is shown with URL passwords masked."""

    def invoke(self, ctx: click.Context) -> object:
        try:
            return super().invoke(ctx)
        except click.ClickException as exc:
            exc.message = redact_urls_in(exc.message)  # type: ignore[misc]  # shown once, after
            raise


@click.group(cls=_Commands)
def main() -> None:
    """Testbed and load generator for LLM inference servers (vLLM first)."""


main.add_command(list_scenarios, "list")
main.add_command(run, "run")
main.add_command(report, "report")
main.add_command(validate, "validate")
main.add_command(compare, "compare")
main.add_command(gate, "gate")
main.add_command(server, "server")
main.add_command(gateway_command, "gateway")
main.add_command(trace, "trace")
main.add_command(export, "export")

__all__ = ["main"]
