"""Recording one vLLM's KV-cache events into a case directory (``kv_events.jsonl``, rows
:class:`loadgen.runformat.KvEventRow`).

The recorder **binds** a ZMQ SUB socket on a loopback port and the server's publisher
connects to it (``server.kv_events``: an endpoint with an address, not ``*``, makes vLLM's
PUB socket connect). That keeps the events, which carry every prompt's token IDs, off the
network (``tcp://*:PORT`` would make vLLM bind every interface). A PUB socket drops what it
sends before a subscription reaches it (ZMQ's slow joiner); vLLM connects at engine start-up,
so the subscription is in place long before the first request, whereas a subscriber that
connected to a bound PUB would have to wait and guess when it is. Start the recorder before
the server; a loss would still show as a gap in the sequence numbers.

:class:`EventLog` turns messages into rows and notices lost ones: the publisher numbers its
messages from 0, so a first message numbered s > 0 means s were lost, and a jump from s to
t > s + 1 means t − s − 1 were (a ``gap`` row each time). A number lower than the last means
a new publisher (the server restarted, its cache empty): counting starts again.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable, Sequence
from pathlib import Path

import zmq
import zmq.asyncio

from loadgen.kvevents.wire import (
    BlockRemoved,
    BlockStored,
    Event,
    WireError,
    decode_message,
    hash_int,
)
from loadgen.runformat.layout import append_jsonl
from loadgen.runformat.rows import KvEventRow

#: How long the recorder keeps reading after it is asked to stop (s): the events of the last
#: engine steps are still on their way.
DRAIN_S = 1.0


def _row(event: Event, seq: int, index: int, recv_ns: int, ts: float) -> KvEventRow:
    """The row of one decoded event."""
    if isinstance(event, BlockStored):
        parent = event.parent_block_hash
        return KvEventRow(
            event="stored", seq=seq, index=index, recv_ns=recv_ns, ts=ts,
            block_hashes=[hash_int(h) for h in event.block_hashes],
            parent_block_hash=None if parent is None else hash_int(parent),
            token_ids=event.token_ids, block_size=event.block_size, medium=event.medium,
        )  # fmt: skip
    if isinstance(event, BlockRemoved):
        return KvEventRow(
            event="removed", seq=seq, index=index, recv_ns=recv_ns, ts=ts,
            block_hashes=[hash_int(h) for h in event.block_hashes], medium=event.medium,
        )  # fmt: skip
    return KvEventRow(event="cleared", seq=seq, index=index, recv_ns=recv_ns, ts=ts)


class EventLog:
    """Messages → rows, with lost messages noted (module doc). Pure: no socket, no file."""

    def __init__(self) -> None:
        self.expected: int | None = None
        self.messages = 0
        self.missing = 0

    def rows(self, frames: Sequence[bytes], recv_ns: int) -> list[KvEventRow]:
        """The rows of one message received at ``recv_ns`` (monotonic ns): a ``gap`` row
        first when messages were lost, then one row per event (or one ``undecodable``)."""
        self.messages += 1
        try:
            seq, batch = decode_message(frames)
        except WireError as exc:
            return [KvEventRow(event="undecodable", seq=-1, recv_ns=recv_ns, error=str(exc))]
        out: list[KvEventRow] = []
        start = 0 if self.expected is None or seq < self.expected else self.expected
        if seq > start:
            out.append(KvEventRow(event="gap", seq=start, recv_ns=recv_ns, missing=seq - start))
            self.missing += seq - start
        self.expected = seq + 1
        out += [
            _row(event, seq, index, recv_ns, batch.ts) for index, event in enumerate(batch.events)
        ]
        return out


class KvEventRecorder:
    """A SUB socket bound on ``127.0.0.1`` that appends every message's rows to ``path``
    (``None``: held in memory until :meth:`retarget` names a file).

    Use :func:`recording_kv_events` (or ``loadgen.kvevents.hub`` for a whole run);
    :attr:`port` is what the server's publisher connects to
    (``server.kv_events.kv_events_args``); every message is passed on, unchanged, to whoever
    subscribes at :attr:`republish_port` (a PUB socket bound on loopback).
    """

    def __init__(self, path: Path | None, clock: Callable[[], int] = time.monotonic_ns) -> None:
        self.path: Path | None = None
        self._held: list[KvEventRow] = []
        self.clock = clock
        self.log = EventLog()
        self._ctx = zmq.asyncio.Context()
        self._sock = self._ctx.socket(zmq.SUB)
        self._sock.setsockopt(zmq.SUBSCRIBE, b"")
        self._sock.setsockopt(zmq.LINGER, 0)
        self.port = self._sock.bind_to_random_port("tcp://127.0.0.1")
        # Every message is passed on unchanged from a PUB socket of its own, for other
        # subscribers (vllm-router's kv_aware): vLLM's publisher has one endpoint, ours.
        self._pub = self._ctx.socket(zmq.PUB)
        self._pub.setsockopt(zmq.LINGER, 0)
        self.republish_port = self._pub.bind_to_random_port("tcp://127.0.0.1")
        if path is not None:
            self.retarget(path)

    def retarget(self, path: Path) -> None:
        """Write the rows from now on (and any held) to ``path``, created empty if missing.

        Raises:
            RunWriteError: a held row could not be written.
            OSError: the file could not be created.
        """
        path.parent.mkdir(parents=True, exist_ok=True)
        path.touch()
        self.path = path
        held, self._held = self._held, []
        for row in held:
            append_jsonl(path, row)

    async def run(self) -> None:
        """Receive and write until cancelled."""
        while True:
            frames = await self._sock.recv_multipart()
            await self._pub.send_multipart(frames)
            for row in self.log.rows(frames, self.clock()):
                if self.path is None:
                    self._held.append(row)
                else:
                    append_jsonl(self.path, row)

    def close(self) -> None:
        self._pub.close(linger=0)
        self._sock.close(linger=0)
        self._ctx.term()


@contextlib.asynccontextmanager
async def recording_kv_events(
    path: Path, drain_s: float = DRAIN_S
) -> AsyncIterator[KvEventRecorder]:
    """Record KV-cache events into ``path`` while the block runs; on exit keep reading for
    ``drain_s`` seconds, then stop.

    Raises:
        zmq.ZMQError: no loopback port could be bound.
        loadgen.runformat.RunWriteError: ``path`` could not be written (raised on exit).
    """
    recorder = KvEventRecorder(path)
    task = asyncio.create_task(recorder.run())
    try:
        yield recorder
        await asyncio.sleep(drain_s)
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        recorder.close()
