"""The gateway's events files: breaker transitions and routing decisions as JSON lines.

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

Writing opens, appends and closes the file each time (the one JSONL appender,
``server.net.jsonl``): transitions are rare (a handful per run), and a short append to the
page cache does not stall the event loop. A line that cannot be written is logged, and the
gateway goes on serving.

The routing decisions go to a file of their own (``routing_decisions.jsonl`` in a run
directory), one line per upstream choice, retries included, written as the choice is made::

    {"t_ns": 81234567890123, "upstream": "http://127.0.0.1:8001", "replica": 1,
     "policy": "prefix-hash", "key": "9f0c41d2a7b3e5f1", "why": "matched", "home": 1,
     "attempt": 0, "request_id": "bench-17"}

``key`` and ``home`` are ``null`` for policies without a key; ``request_id`` is the client's
``X-Request-Id`` header (``null`` without one), so the analysis can join a decision to the
load generator's record of the same request.

A gateway with a delay injector (``--slowdown``, ``gateway.proxy.pace``) writes one line per
slowed request to its holds file (``gateway_holds.jsonl`` in a run directory) when the
request's answer has been passed on::

    {"t_ns": 81234567890123, "request_id": "bench-17", "upstream": "http://127.0.0.1:8001",
     "streamed": true, "slowdown": 0.15, "chunks": 17, "upstream_s": 0.812,
     "first_planned_s": 0.031, "first_actual_s": 0.032, "last_planned_s": 0.122,
     "last_actual_s": 0.123}

The row types, :class:`GatewayEvent`, :class:`RoutingDecisionRow` and :class:`HoldRow`, are
defined here
because ``gateway`` imports no other project package; ``loadgen.runformat`` re-exports them
for the readers.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Literal

import msgspec

from gateway.breaker import Transition
from gateway.routing import Decision
from server.net.jsonl import RunWriteError, append_lines

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


class RoutingDecisionRow(msgspec.Struct, kw_only=True):
    """One line of ``routing_decisions.jsonl``: where one attempt of one request went, and why.

    Attributes:
        t_ns: when the gateway chose (monotonic ns, the load generator's clock).
        upstream: the chosen upstream's URL; ``replica`` its index in the configured order.
        policy: the routing policy (``least-loaded``, ``round-robin``, ``prefix-hash``).
        key: prefix-hash's routing key, 16 hex digits; ``None`` for the other policies or a
            request without a usable prompt.
        why: ``matched``, ``passed-on-load``, ``passed-on-breaker``, ``round-robin`` or
            ``least-loaded`` (:class:`gateway.routing.Decision`).
        home: prefix-hash: the key's own replica, whether or not it took the request.
        attempt: 0 for a request's first choice, 1 for its retry after a refused connection.
        request_id: the client's ``X-Request-Id`` header, ``None`` without one.
    """

    t_ns: int
    upstream: str
    replica: int
    policy: str
    key: str | None = None
    why: str
    home: int | None = None
    attempt: int = 0
    request_id: str | None = None


def decision_row(
    t_ns: int, upstream: str, decision: Decision, attempt: int, request_id: str | None
) -> RoutingDecisionRow:
    """The decisions-file row of one routing decision (format in the module docstring)."""
    return RoutingDecisionRow(
        t_ns=t_ns, upstream=upstream, replica=decision.replica, policy=decision.policy,
        key=decision.key, why=decision.why, home=decision.home, attempt=attempt,
        request_id=request_id,
    )  # fmt: skip


class HoldRow(msgspec.Struct, kw_only=True):
    """One line of ``gateway_holds.jsonl``: how long the delay injector held one request's
    answer (``gateway.proxy.pace``; all durations in seconds, on the gateway's monotonic
    clock).

    Attributes:
        t_ns: when the answer's last chunk was released (monotonic ns).
        request_id: the client's ``X-Request-Id`` header, ``None`` without one.
        upstream: the upstream's URL.
        streamed: an event stream (held chunk by chunk) or a buffered answer (held once).
        slowdown: the factor f: a chunk is due at t0 + (1 + f)(t_i − t0).
        chunks: body chunks released (a buffered answer: 1).
        upstream_s: from sending the request upstream to its last chunk's arrival.
        first_planned_s, first_actual_s: the first chunk's hold, planned (due − arrival) and
            actual (release − arrival).
        last_planned_s, last_actual_s: the same for the last chunk.
    """

    t_ns: int
    request_id: str | None = None
    upstream: str
    streamed: bool
    slowdown: float
    chunks: int
    upstream_s: float
    first_planned_s: float
    first_actual_s: float
    last_planned_s: float
    last_actual_s: float


class EventsFile:
    """Appends events to ``path`` (created, empty, at once: an empty file = no transitions)."""

    def __init__(self, path: Path) -> None:
        """Raises ``OSError`` when ``path`` cannot be created (reported at start, not later).
        The same class appends the decisions file (:meth:`append` a
        :class:`RoutingDecisionRow`) and the holds file (a :class:`HoldRow`)."""
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        path.touch()

    def append(self, event: GatewayEvent | RoutingDecisionRow | HoldRow) -> None:
        """Write one line and flush it (``server.net.jsonl.append_lines``); its
        :class:`RunWriteError` is logged (``cannot write PATH: …``), never raised into a
        request: the gateway goes on serving."""
        try:
            append_lines(self.path, msgspec.json.encode(event) + b"\n")
        except RunWriteError as exc:
            logger.error("gateway event not written: %s", exc)

    def on_breaker_transition(self, transition: Transition) -> None:
        """The breaker's transition listener: one ``breaker_transition`` line."""
        self.append(transition_event(transition))
