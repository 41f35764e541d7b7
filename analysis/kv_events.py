"""A replica's recorded KV-cache events (``kv_events.jsonl``) with every block named by its
token content, so they can be set beside the prefix-cache model's blocks.

vLLM's block hashes are its own (seeded per process), so each stored block is renamed by
:func:`scenarios.prefix_cache_model.chain_block`: the content key of its parent (the block
before it, found through ``parent_block_hash``; 0 for a prompt's first block) chained with
its own ``block_size`` token IDs. A removed block gets the content key its hash was stored
with. The model keys a request's prompt blocks the same way
(:func:`scenarios.prefix_cache_model.content_block_keys`), so equal keys mean equal token
prefixes on both sides.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from analysis.load import read_jsonl
from loadgen.runformat import KvEventRow
from scenarios.prefix_cache_model import chain_block

#: A content key the recorder could not name: the block's hash (or its parent's) arrived in
#: no stored event (lost in a gap, or stored before recording began).
UNKNOWN = -1


@dataclass(frozen=True)
class RecordedBlock:
    """One block of one recorded event.

    Attributes:
        kind: ``stored`` or ``removed``.
        seq: the message it came in.
        key: its content key (:data:`UNKNOWN` when it cannot be named).
        parent: the content key of the block before it (``stored``; 0 for a first block).
        tokens: its token IDs (``stored``).
    """

    kind: Literal["stored", "removed"]
    seq: int
    key: int
    parent: int = 0
    tokens: tuple[int, ...] = ()


@dataclass(frozen=True)
class RecordedEvents:
    """A replica's events as content-keyed blocks, in arrival order.

    Attributes:
        blocks: every stored and removed block.
        gaps: (first lost message, messages lost) per gap.
        cleared: the messages that cleared the whole cache.
        undecodable: messages that were not KV-event batches.
        problems: what reading the file found wrong (torn or mistyped lines).
    """

    blocks: tuple[RecordedBlock, ...]
    gaps: tuple[tuple[int, int], ...]
    cleared: tuple[int, ...]
    undecodable: int
    problems: tuple[str, ...] = ()


def name_blocks(rows: list[KvEventRow]) -> RecordedEvents:
    """Content-key every block of ``rows`` (module doc)."""
    key_of: dict[int, int] = {}
    blocks: list[RecordedBlock] = []
    gaps: list[tuple[int, int]] = []
    cleared: list[int] = []
    undecodable = 0
    for row in rows:
        if row.event == "stored" and row.block_size:
            size = row.block_size
            parent = (
                0 if row.parent_block_hash is None else key_of.get(row.parent_block_hash, UNKNOWN)
            )
            for j, block_hash in enumerate(row.block_hashes):
                tokens = tuple(row.token_ids[j * size : (j + 1) * size])
                key = UNKNOWN if parent == UNKNOWN else chain_block(parent, tokens)
                key_of[block_hash] = key
                blocks.append(RecordedBlock("stored", row.seq, key, parent, tokens))
                parent = key
        elif row.event == "removed":
            blocks += [
                RecordedBlock("removed", row.seq, key_of.get(h, UNKNOWN)) for h in row.block_hashes
            ]
        elif row.event == "cleared":
            cleared.append(row.seq)
        elif row.event == "gap":
            gaps.append((row.seq, row.missing or 0))
        else:
            undecodable += 1
    return RecordedEvents(tuple(blocks), tuple(gaps), tuple(cleared), undecodable)


def read_kv_events(path: Path) -> RecordedEvents:
    """:func:`name_blocks` of the rows of ``path`` (a missing file holds none; its torn or
    mistyped lines are skipped and named in ``problems``)."""
    read = read_jsonl(path, KvEventRow)
    named = name_blocks(read.rows)
    return RecordedEvents(
        named.blocks, named.gaps, named.cleared, named.undecodable, tuple(read.problems(path.name))
    )
