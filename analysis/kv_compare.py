"""The engines' own evidence beside the model: a replica's recorded KV-cache events compared
block by block with the blocks the prefix-cache model predicts it stores and evicts.

- **Predicted**: :func:`scenarios.prefix_cache_model.replay.replay_events` on the replica's
  requests (prompt blocks keyed by content, :func:`content_block_keys`), in the order of
  their starts and ends, told (observer) which blocks each start caches (the prompt blocks
  from its first miss on, then its full blocks of generated tokens) and which cached blocks
  its allocation evicts.
- **Recorded**: :func:`analysis.kv_events.read_kv_events`, every block named by content.
  A stored block whose key is a prompt block of some request is that block (the first
  request predicted to store it that has not yet); any other stored block holds generated
  tokens and belongs to the request its parent block belongs to.
- **Stored** blocks are compared request by request, in order (prompt blocks by key,
  generated ones by count); **removed** blocks in arrival order (a prompt block by key, a
  generated one as such). The first difference is the divergence, named with its request
  and the block's index in that request's prompt.

The comparison is exact for requests one after another. Under concurrency vLLM allocates
step by step while the model allocates a request's blocks at its start, so evictions may
arrive in another order (stored blocks, compared per request, are unaffected). Events lost
in a gap, or blocks whose parent was never seen, make the comparison incomplete: it says so.
"""

from __future__ import annotations

from collections import defaultdict, deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from analysis.kv_events import UNKNOWN, RecordedEvents
from scenarios.prefix_cache_model import CacheRequest
from scenarios.prefix_cache_model.pool import GENERATED
from scenarios.prefix_cache_model.replay import check_requests, replay_events

#: A block as compared: ("prompt", key) or ("generated", 0).
Label = tuple[str, int]
_GEN: Label = ("generated", 0)


@dataclass(frozen=True)
class Divergence:
    """The first block where the engine and the model differ.

    Attributes:
        kind: ``stored`` or ``removed``.
        request_id: the request concerned (stored: the request the block belongs to;
            removed: the request whose allocation the model says evicted it).
        block: the block's index in that request's prompt (``None`` for a generated block).
        expected: what the model predicts there (``prompt block K of R``, ``a block of no
            prompt (generated tokens)`` or ``nothing``).
        recorded: what the engine reported there, in the same words.
        position: the block's position in the request's stored blocks, or in the sequence of
            removals.
    """

    kind: Literal["stored", "removed"]
    request_id: str | None
    block: int | None
    expected: str
    recorded: str
    position: int


@dataclass(frozen=True)
class BlockComparison:
    """The comparison's figures (blocks) and its first divergence (``None``: none).

    ``complete`` is false when events were lost or could not be named (``notes`` says how);
    then a divergence may be the loss's doing.
    """

    stored_predicted: int
    stored_recorded: int
    stored_matched: int
    removed_predicted: int
    removed_recorded: int
    removed_matched: int
    divergence: Divergence | None
    complete: bool
    notes: tuple[str, ...] = ()

    @property
    def matches(self) -> bool:
        """Every block equal on both sides and nothing lost."""
        return self.divergence is None and self.complete


class _Predicted:
    """Observer of the model's replay (``ReplayObserver``): stored labels per request in
    start order, evictions in order with the request whose allocation made them."""

    def __init__(self) -> None:
        self.by_request: dict[int, list[Label]] = {}
        self.removals: list[tuple[int, Label]] = []

    def stored(self, index: int, keys: Sequence[int], generated: int) -> None:
        self.by_request[index] = [("prompt", k) for k in keys] + [_GEN] * generated

    def evicted(self, index: int, key: int) -> None:
        self.removals.append((index, _GEN if key == GENERATED else ("prompt", key)))


def _where(key: int, requests: Sequence[CacheRequest]) -> tuple[str | None, int | None]:
    """(request id, block index) of the first request whose prompt holds block ``key``."""
    for r in requests:
        if key in r.block_keys:
            return r.request_id, r.block_keys.index(key)
    return None, None


def _describe(label: Label | None, requests: Sequence[CacheRequest]) -> str:
    if label is None:
        return "nothing"
    if label == _GEN:
        return "a block of no prompt (generated tokens)"
    request_id, block = _where(label[1], requests)
    return "an unknown block" if request_id is None else f"prompt block {block} of {request_id}"


def _recorded_stored(
    recorded: RecordedEvents, predicted: _Predicted, requests: Sequence[CacheRequest]
) -> dict[int, list[Label]]:
    """Recorded stored blocks per request (module doc's attribution)."""
    queues: dict[int, deque[int]] = defaultdict(deque)
    for index, labels in predicted.by_request.items():
        for kind, key in labels:
            if kind == "prompt":
                queues[key].append(index)
    first_holder: dict[int, int] = {}
    for index, r in enumerate(requests):
        for key in r.block_keys:
            first_holder.setdefault(key, index)
    owner: dict[int, int] = {}
    out: dict[int, list[Label]] = defaultdict(list)
    for block in recorded.blocks:
        if block.kind != "stored":
            continue
        if block.key in first_holder:
            queue = queues.get(block.key)
            index = queue.popleft() if queue else first_holder[block.key]
            out[index].append(("prompt", block.key))
        else:
            index = owner.get(block.parent, -1)
            out[index].append(_GEN)
        owner[block.key] = index
    return out


def _first_stored_divergence(
    predicted: _Predicted, got: dict[int, list[Label]], requests: Sequence[CacheRequest]
) -> tuple[Divergence | None, int]:
    """The first per-request difference in predicted start order, and the blocks matched."""
    matched = 0
    found: Divergence | None = None
    for index in [*predicted.by_request, *(i for i in got if i not in predicted.by_request)]:
        want, have = predicted.by_request.get(index, []), got.get(index, [])
        for pos in range(max(len(want), len(have))):
            w = want[pos] if pos < len(want) else None
            h = have[pos] if pos < len(have) else None
            if w == h:
                matched += 1
            elif found is None:
                request_id = requests[index].request_id if index >= 0 else None
                key = (w or h or _GEN)[1]
                block = None if (w or h) == _GEN else _where(key, requests)[1]
                found = Divergence("stored", request_id, block, _describe(w, requests),
                                   _describe(h, requests), pos)  # fmt: skip
    return found, matched


def _first_removed_divergence(
    predicted: _Predicted, recorded: RecordedEvents, requests: Sequence[CacheRequest]
) -> tuple[Divergence | None, int, int]:
    """The first difference between the two removal sequences, blocks matched, recorded."""
    keys = {k for r in requests for k in r.block_keys}
    got: list[Label] = [
        ("prompt", b.key) if b.key in keys else _GEN for b in recorded.blocks if b.kind == "removed"
    ]
    want = predicted.removals
    matched = 0
    for pos in range(max(len(want), len(got))):
        w = want[pos][1] if pos < len(want) else None
        h = got[pos] if pos < len(got) else None
        if w == h:
            matched += 1
            continue
        by = requests[want[pos][0]].request_id if pos < len(want) else None
        label = w or h or _GEN
        block = None if label == _GEN else _where(label[1], requests)[1]
        divergence = Divergence("removed", by, block, _describe(w, requests),
                                _describe(h, requests), pos)  # fmt: skip
        return divergence, matched, len(got)
    return None, matched, len(got)


def compare_blocks(
    recorded: RecordedEvents,
    requests: Sequence[CacheRequest],
    capacity_blocks: int,
    block_tokens: int,
    events: Sequence[tuple[str, int]] | None = None,
) -> BlockComparison:
    """Compare a replica's recorded events with the model's blocks for ``requests`` (prompt
    blocks keyed by content) on ``capacity_blocks`` usable blocks of ``block_tokens``, in
    ``events`` order (``None``: one after another).

    Raises:
        ValueError: what :func:`scenarios.prefix_cache_model.predict_hits` refuses.
    """
    check_requests(requests, capacity_blocks, block_tokens)
    predicted = _Predicted()
    replay_events(requests, capacity_blocks, block_tokens, events, predicted)
    stored_divergence, stored_matched = _first_stored_divergence(
        predicted, _recorded_stored(recorded, predicted, requests), requests
    )
    removed_divergence, removed_matched, removed_recorded = _first_removed_divergence(
        predicted, recorded, requests
    )
    notes = [f"messages {s}–{s + n - 1} lost" for s, n in recorded.gaps]
    unknown = sum(1 for b in recorded.blocks if b.key == UNKNOWN)
    if unknown:
        notes.append(f"{unknown} blocks could not be named (their parent was never stored)")
    if recorded.undecodable:
        notes.append(f"{recorded.undecodable} undecodable messages")
    if recorded.cleared:
        notes.append(f"the cache was cleared in message(s) {', '.join(map(str, recorded.cleared))}")
    notes += recorded.problems
    return BlockComparison(
        stored_predicted=sum(len(v) for v in predicted.by_request.values()),
        stored_recorded=sum(1 for b in recorded.blocks if b.kind == "stored"),
        stored_matched=stored_matched,
        removed_predicted=len(predicted.removals),
        removed_recorded=removed_recorded,
        removed_matched=removed_matched,
        divergence=stored_divergence or removed_divergence,
        complete=not (recorded.gaps or unknown or recorded.undecodable or recorded.problems),
        notes=tuple(notes),
    )
