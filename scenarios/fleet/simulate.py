"""The fleet replay: N replica caches, each the single-server model, fed the requests a
placement rule sends them, in one pass over the event order.

Each start asks the rule for a replica (given every replica's requests in flight and its
cache, so a rule may read either), then admits the request to that replica's
:class:`scenarios.prefix_cache_model.replay.Replayer`; each end frees it there. A replica's
cache thus sees exactly its own requests in the global order, with vLLM's rules and the real
per-replica capacity.

The event order may also say when each request's first output token came back
(``("first", i)``, :data:`FIRST_TOKEN`): the caches ignore it, but a :class:`WatchingRule`
is told, as it is told what each replica's cache stores and evicts: vllm-router's
``kv_aware`` learns a replica's cache from the KV events the engine publishes once a step
has run, and counts a request's prompt as pending work until its first output.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from gateway.routing import Decision
from scenarios.fleet.requests import FleetRequest
from scenarios.prefix_cache_model.replay import (
    Replayer,
    ReplayObserver,
    check_requests,
    event_order,
)

#: The event kind of a request's first output token reaching the client.
FIRST_TOKEN = "first"


@dataclass
class FleetState:
    """The fleet when a request is placed: per replica, requests in flight, requests placed
    so far and its cache."""

    in_flight: list[int]
    caches: list[Replayer]
    placed: list[int] = field(default_factory=list)

    @property
    def replicas(self) -> int:
        return len(self.in_flight)


#: A placement rule: (request index, request, fleet) → (replica, the gateway's decision or
#: ``None`` for rules that are not the gateway's).
Rule = Callable[[int, FleetRequest, FleetState], tuple[int, Decision | None]]


@runtime_checkable
class WatchingRule(Protocol):
    """A :data:`Rule` that also watches the replay: each replica's cache tells the rule's
    :meth:`observer` what it stores and evicts, and :meth:`on_event` hears each request's
    first token (:data:`FIRST_TOKEN`; with no such event, its end stands for it) and end,
    after the caches have seen them."""

    def __call__(
        self, index: int, request: FleetRequest, state: FleetState
    ) -> tuple[int, Decision | None]: ...

    def observer(self, replica: int) -> ReplayObserver:
        """The observer of replica ``replica``'s cache."""
        ...

    def on_event(self, kind: str, index: int, replica: int) -> None:
        """Request ``index`` on ``replica`` reached its first token (``kind`` =
        :data:`FIRST_TOKEN`) or ended (``"end"``)."""
        ...


def split_first_tokens(
    events: Sequence[tuple[str, int]] | None, n: int
) -> tuple[list[tuple[str, int]] | None, list[tuple[str, int]] | None]:
    """(``events`` without their first-token events, for the caches; ``events`` whole, for
    the replay), both ``None`` for ``None``.

    Raises:
        ValueError: a first-token event of no request of the ``n``, given twice, or not
            between its request's start and end.
    """
    if events is None:
        return None, None
    started: set[int] = set()
    ended: set[int] = set()
    firsts: set[int] = set()
    for kind, index in events:
        if kind == "start":
            started.add(index)
        elif kind == "end":
            ended.add(index)
        elif kind == FIRST_TOKEN and (
            not 0 <= index < n or index in firsts or index not in started or index in ended
        ):
            raise ValueError(
                f"first-token event of request {index}: none of {n}, twice, or not between "
                "its start and end"
            )
        elif kind == FIRST_TOKEN:
            firsts.add(index)
    core = [e for e in events if e[0] != FIRST_TOKEN]
    return core, list(events)


@dataclass(frozen=True)
class FleetOutcome:
    """What one replay of a fleet gives, per request in input order.

    Attributes:
        replicas: N.
        placement: the replica of each request.
        decisions: the gateway's decision of each request (``None`` for other rules).
        hit_tokens: hit tokens of each request on its replica (whole blocks × B).
        query_tokens: prompt tokens of each request.
        lent_blocks: blocks each request's replica could not give when it started.
    """

    replicas: int
    placement: tuple[int, ...]
    decisions: tuple[Decision | None, ...]
    hit_tokens: tuple[int, ...]
    query_tokens: tuple[int, ...]
    lent_blocks: tuple[int, ...] = field(default=())

    @property
    def hit_rate(self) -> float:
        """Fleet hit rate: Σ hit tokens ÷ Σ prompt tokens over all replicas (0 without
        queries), as the replicas' ``prefix_cache_hits`` and ``_queries`` counters summed."""
        queries = sum(self.query_tokens)
        return sum(self.hit_tokens) / queries if queries else 0.0

    def requests_per_replica(self) -> list[int]:
        """Requests each replica served."""
        counts = [0] * self.replicas
        for replica in self.placement:
            counts[replica] += 1
        return counts

    def prefill_tokens_per_replica(self) -> list[int]:
        """Prompt tokens each replica computed: its requests' prompt tokens minus their hits."""
        tokens = [0] * self.replicas
        for replica, q, h in zip(self.placement, self.query_tokens, self.hit_tokens, strict=True):
            tokens[replica] += q - h
        return tokens


def simulate(
    requests: Sequence[FleetRequest],
    replicas: int,
    capacity_blocks: int | None,
    block_tokens: int,
    rule: Rule,
    events: Sequence[tuple[str, int]] | None = None,
) -> FleetOutcome:
    """Replay ``requests`` on ``replicas`` caches of ``capacity_blocks`` usable blocks each
    (``None``: unbounded), placed by ``rule``, in ``events`` order (``None``: one after
    another; first-token events, :data:`FIRST_TOKEN`, are told to a :class:`WatchingRule`),
    following vLLM's rules on every replica.

    Raises:
        ValueError: fewer than 1 replica, a rule that names no replica of the fleet, a
            misplaced first-token event (:func:`split_first_tokens`), or what
            :func:`scenarios.prefix_cache_model.predict_hits` refuses.
    """
    if replicas < 1:
        raise ValueError(f"a fleet needs at least 1 replica, got {replicas}")
    check_requests([r.cache for r in requests], capacity_blocks, block_tokens)
    n = len(requests)
    core, whole = split_first_tokens(events, n)
    order = event_order(n, core)  # checks every request starts and ends once
    if whole is not None:
        order = whole
    watcher = rule if isinstance(rule, WatchingRule) else None
    caches = [
        Replayer(capacity_blocks, block_tokens, watcher.observer(r) if watcher else None)
        for r in range(replicas)
    ]
    state = FleetState([0] * replicas, caches, [0] * replicas)
    placement = [-1] * n
    decisions: list[Decision | None] = [None] * n
    hits = [0] * n
    lent = [0] * n
    for kind, i in order:
        if kind == FIRST_TOKEN:
            if watcher is not None:
                watcher.on_event(kind, i, placement[i])
            continue
        if kind == "end":
            replica = placement[i]
            state.caches[replica].end(i)
            state.in_flight[replica] -= 1
            if watcher is not None:
                watcher.on_event(kind, i, replica)
            continue
        replica, decisions[i] = rule(i, requests[i], state)
        if not 0 <= replica < replicas:
            raise ValueError(f"placement rule chose replica {replica} of {replicas}")
        placement[i] = replica
        state.in_flight[replica] += 1
        state.placed[replica] += 1
        hits[i], lent[i] = state.caches[replica].start(i, requests[i].cache)
    return FleetOutcome(
        replicas=replicas,
        placement=tuple(placement),
        decisions=tuple(decisions),
        hit_tokens=tuple(hits),
        query_tokens=tuple(r.cache.prompt_tokens for r in requests),
        lent_blocks=tuple(lent),
    )
