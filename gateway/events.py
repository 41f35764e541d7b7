"""The gateway's events file: breaker transitions as JSON lines, for the analysis to read.

Owns the file format (the contract with ``analysis``; the run directory calls the file
``gateway_events.jsonl``). One JSON object per line, appended and flushed as it happens, so a
gateway that is killed leaves every line it wrote::

    {"t_ns": 81234567890123, "event": "breaker_transition", "upstream": "http://127.0.0.1:8001",
     "from": "closed", "to": "open", "reason": "3 consecutive failures (connect_error)"}

``t_ns`` is the breaker's transition time on ``time.monotonic_ns()``'s scale (the breaker's
``at_s`` * 1e9). CLOCK_MONOTONIC is one clock for every process of a Linux machine, so these
stamps compare directly with the load generator's records. ``from``/``to`` are ``closed``,
``open`` or ``half_open``. The lines come from the breaker's transition listener, never from
parsing the log (the log keeps its human line per transition too).

Writing opens, appends and closes the file each time: transitions are rare (a handful per
run), and a short append to the page cache does not stall the event loop.

The row type, :class:`GatewayEvent`, is defined here because ``gateway`` imports no other
project package; ``loadgen.runformat`` re-exports it for the readers.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Literal

import msgspec

from gateway.breaker import Transition

logger = logging.getLogger(__name__)

BREAKER_TRANSITION: Literal["breaker_transition"] = "breaker_transition"

StateName = Literal["closed", "open", "half_open"]


class GatewayEvent(msgspec.Struct, kw_only=True):
    """One line of ``gateway_events.jsonl``: a breaker transition (the one event kind).

    Attributes:
        t_ns: when the breaker changed state (monotonic ns, the load generator's clock).
        event: ``breaker_transition``.
        upstream: the upstream's URL.
        from_state / to_state: the states before and after (``from`` / ``to`` in the file).
        reason: why, in words (e.g. ``3 consecutive failures (connect_error)``).
    """

    t_ns: int
    event: Literal["breaker_transition"] = BREAKER_TRANSITION
    upstream: str
    from_state: StateName = msgspec.field(name="from")
    to_state: StateName = msgspec.field(name="to")
    reason: str = ""


def transition_event(transition: Transition) -> GatewayEvent:
    """The events-file row of one breaker transition (format in the module docstring)."""
    return GatewayEvent(
        t_ns=round(transition.at_s * 1e9),
        upstream=transition.name,
        from_state=transition.from_state.name.lower(),  # type: ignore[arg-type]
        to_state=transition.to_state.name.lower(),  # type: ignore[arg-type]
        reason=transition.reason,
    )


class EventsFile:
    """Appends events to ``path`` (created, empty, at once: an empty file = no transitions)."""

    def __init__(self, path: Path) -> None:
        """Raises ``OSError`` when ``path`` cannot be created (reported at start, not later)."""
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        path.touch()

    def append(self, event: GatewayEvent) -> None:
        """Write one line and flush it; a write error is logged, never raised into a request."""
        try:
            with open(self.path, "ab") as fh:
                fh.write(msgspec.json.encode(event) + b"\n")
        except OSError as exc:
            logger.error("cannot write gateway event to %s: %s", self.path, exc)

    def on_breaker_transition(self, transition: Transition) -> None:
        """The breaker's transition listener: one ``breaker_transition`` line."""
        self.append(transition_event(transition))
