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
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

from gateway.breaker import Transition

logger = logging.getLogger(__name__)

BREAKER_TRANSITION = "breaker_transition"


def transition_event(transition: Transition) -> dict[str, Any]:
    """The events-file object of one breaker transition (format in the module docstring)."""
    return {
        "t_ns": round(transition.at_s * 1e9),
        "event": BREAKER_TRANSITION,
        "upstream": transition.name,
        "from": transition.from_state.name.lower(),
        "to": transition.to_state.name.lower(),
        "reason": transition.reason,
    }


class EventsFile:
    """Appends events to ``path`` (created, empty, at once: an empty file = no transitions)."""

    def __init__(self, path: Path) -> None:
        """Raises ``OSError`` when ``path`` cannot be created (reported at start, not later)."""
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        path.touch()

    def append(self, event: dict[str, Any]) -> None:
        """Write one line and flush it; a write error is logged, never raised into a request."""
        try:
            with open(self.path, "a", encoding="utf-8") as fh:
                fh.write(json.dumps(event) + "\n")
        except OSError as exc:
            logger.error("cannot write gateway event to %s: %s", self.path, exc)

    def on_breaker_transition(self, transition: Transition) -> None:
        """The breaker's transition listener: one ``breaker_transition`` line."""
        self.append(transition_event(transition))
