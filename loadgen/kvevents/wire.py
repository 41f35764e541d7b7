"""vLLM's KV-cache event messages, decoded.

Read in vLLM 0.32.0, ``vllm/distributed/kv_events.py`` (``ZmqEventPublisher``,
``KVEventBatch``, ``BlockStored``, ``BlockRemoved``, ``AllBlocksCleared``) and pinned by
``tests/fixtures/kv_events/`` (bytes encoded by vLLM's own classes):

- one ZMQ message per engine step that changed the cache, three frames: the topic (UTF-8,
  empty by default), the sequence number (8 bytes, big-endian, counting from 0 per publisher
  process), the payload;
- the payload is msgpack of ``KVEventBatch``, an array ``[ts, events, data_parallel_rank]``
  (``ts``: the engine's wall clock, s; the rank ``None`` on a single engine);
- each event is a map tagged by ``"type"``: ``BlockStored`` (``block_hashes``,
  ``parent_block_hash`` (``None`` for a prompt's first block), ``token_ids`` (the tokens of
  every block stored, in order), ``block_size``, ``medium``, ``lora_id`` and optional
  fields), ``BlockRemoved`` (``block_hashes``, ``medium``) or ``AllBlocksCleared``.

Block hashes are 64-bit integers by default (``VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES=1``: the
low 64 bits of vLLM's hash, big-endian), else the raw hash bytes; :func:`hash_int` makes
either an integer. They are vLLM's own, seeded per process, so readers identify blocks by
their token content instead (:mod:`analysis.kv_events`).
"""

from __future__ import annotations

from collections.abc import Sequence

import msgspec


class BlockStored(msgspec.Struct, tag=True):
    """Blocks cached by one request in one step, in prompt order."""

    block_hashes: list[int | bytes]
    parent_block_hash: int | bytes | None
    token_ids: list[int]
    block_size: int
    medium: str | None = None
    lora_id: int | None = None


class BlockRemoved(msgspec.Struct, tag=True):
    """Blocks evicted (one event per hash in vLLM 0.32)."""

    block_hashes: list[int | bytes]
    medium: str | None = None


class AllBlocksCleared(msgspec.Struct, tag=True):
    """The whole prefix cache was reset."""


Event = BlockStored | BlockRemoved | AllBlocksCleared


class EventBatch(msgspec.Struct, array_like=True):
    """One message's payload: the engine step's wall-clock time (s) and its events."""

    ts: float
    events: list[Event]
    data_parallel_rank: int | None = None


_DECODER = msgspec.msgpack.Decoder(EventBatch)


class WireError(ValueError):
    """A message that is not a KV-event message (its problem in one line)."""


def hash_int(value: int | bytes) -> int:
    """A block hash as an integer (bytes read big-endian, as vLLM's int form is made)."""
    return value if isinstance(value, int) else int.from_bytes(value, "big")


def decode_message(frames: Sequence[bytes]) -> tuple[int, EventBatch]:
    """(sequence number, batch) of one publisher message.

    Raises:
        WireError: not 3 frames, a sequence frame that is not 8 bytes, or a payload that is
            not a KV-event batch.
    """
    if len(frames) != 3:
        raise WireError(f"a KV-event message has 3 frames, got {len(frames)}")
    _topic, seq_bytes, payload = frames
    if len(seq_bytes) != 8:
        raise WireError(f"the sequence frame has 8 bytes, got {len(seq_bytes)}")
    try:
        batch = _DECODER.decode(payload)
    except msgspec.DecodeError as exc:
        raise WireError(f"undecodable KV-event payload: {exc}") from None
    return int.from_bytes(seq_bytes, "big", signed=True), batch
