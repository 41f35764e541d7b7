"""KV-cache event recorders kept for a whole run, one per replica index.

A fleet run (docs/fleet.md) starts its replicas once and sends one routing policy after
another through them; each replica's vLLM publishes its KV-cache events to a recorder bound
before it starts (``server.kv_events``: the publisher connects to the recorder). The
recorders therefore live as long as the run, not a case: :meth:`KvEventHub.config_for` gives
a replica's server config the port of replica K's recorder (the same port again when the
replica restarts, so the recorder sees the new publisher's numbering start again), and
:meth:`KvEventHub.record_into` points every recorder at the case now running
(``kv_events.jsonl`` of the case directory for replica 0, of ``replicas/K/`` for replica K).
:meth:`KvEventHub.aclose` keeps reading for a moment (the last steps' events are on their
way), then stops every recorder; every row is flushed as it is written, so a run ended by a
signal keeps what arrived.
"""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path

from loadgen.kvevents.recorder import DRAIN_S, KvEventRecorder
from loadgen.runformat.layout import KV_EVENTS_FILE, replica_dir
from server.config import ServerConfig


class KvEventHub:
    """A recorder per replica index (0…), bound on loopback when first asked for."""

    def __init__(self, drain_s: float = DRAIN_S) -> None:
        self.drain_s = drain_s
        self._recorders: dict[int, KvEventRecorder] = {}
        self._tasks: dict[int, asyncio.Task[None]] = {}

    def port_for(self, replica: int) -> int:
        """The loopback port replica ``replica``'s publisher connects to (its recorder is
        bound and started on the first call).

        Raises:
            zmq.ZMQError: no loopback port could be bound.
        """
        if replica not in self._recorders:
            recorder = KvEventRecorder(None)
            self._recorders[replica] = recorder
            self._tasks[replica] = asyncio.create_task(recorder.run())
        return self._recorders[replica].port

    def config_for(self, config: ServerConfig, replica: int) -> ServerConfig:
        """``config`` publishing its KV-cache events to replica ``replica``'s recorder, and
        logging the id of every request it receives (``ServerConfig.log_requests``): the
        events say what a replica's cache did, its log which requests did it."""
        update = {"kv_events_port": self.port_for(replica), "log_requests": True}
        return config.model_copy(update=update)

    def republished(self, replicas: int) -> list[str] | None:
        """The loopback endpoints where replicas 0…replicas−1's events are passed on, in
        order; ``None`` when one of them has no recorder."""
        if any(k not in self._recorders for k in range(replicas)):
            return None
        return [f"tcp://127.0.0.1:{self._recorders[k].republish_port}" for k in range(replicas)]

    def record_into(self, cdir: Path) -> None:
        """Write every replica's events from now on into case directory ``cdir``.

        Raises:
            RunWriteError: a file could not be created or a held row written.
        """
        for replica, recorder in self._recorders.items():
            recorder.retarget(replica_dir(cdir, replica) / KV_EVENTS_FILE)

    async def aclose(self) -> None:
        """Read for ``drain_s`` more seconds, then stop and close every recorder.

        Raises:
            RunWriteError: a recorder could not write a row (after every one is closed).
        """
        try:
            if self._recorders:
                await asyncio.sleep(self.drain_s)
        finally:
            failure: BaseException | None = None
            for replica, task in self._tasks.items():
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    try:
                        await task
                    except Exception as exc:  # a write error ends a recorder; report it
                        failure = failure or exc
                self._recorders[replica].close()
            self._recorders.clear()
            self._tasks.clear()
            if failure is not None:
                raise failure
