"""``loadgen gateway``: the gateway's own command (``gateway.cli``), mounted under ``loadgen``.

The command stays in the ``gateway`` package so the gateway runs alone
(``python -m gateway.cli``, as ``loadgen.proxies.gateway`` starts it) without the load
generator.
"""

from __future__ import annotations

from gateway.cli import gateway_command

__all__ = ["gateway_command"]
