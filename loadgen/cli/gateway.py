"""``loadgen gateway``: the gateway's own command (``gateway.cli``), mounted under ``loadgen``.

The command stays in the ``gateway`` package so the gateway runs alone
(``python -m gateway.cli``, as ``loadgen.proxies.gateway`` starts it for a case, writing its
files into the case directory) without the load generator. Mounted here, its output files
(``--events-file``, ``--decisions-file``, ``--holds-file``, or the same fields of
``--config``) go through the check every command's output paths do first
(``loadgen.cli.output_paths``): never inside a run directory, a place that takes files.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from gateway.cli import build_config
from gateway.cli import gateway_command as _gateway_command
from loadgen.cli.output_paths import check_output_file

#: The gateway's output files: config field → its flag.
OUTPUT_FIELDS = {
    "events_file": "--events-file",
    "decisions_file": "--decisions-file",
    "holds_file": "--holds-file",
}


def _checked_serve(**values: Any) -> None:
    config = build_config(
        values.get("config_file"),
        {k: v for k, v in values.items() if k not in ("config_file", "log_level")},
    )
    for field, flag in OUTPUT_FIELDS.items():
        path = getattr(config, field)
        if path is not None:
            check_output_file(Path(path), flag)
    assert _gateway_command.callback is not None
    _gateway_command.callback(**values)


gateway_command = click.Command(
    _gateway_command.name,
    callback=_checked_serve,
    help=_gateway_command.help,
    params=_gateway_command.params,
)

__all__ = ["gateway_command"]
