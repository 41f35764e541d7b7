"""Extra identical servers of a case (replicas 1…n−1) and the faults injected into them.

Replica 0 is the case's main server (scraped, used for sizing); the others exist so that a
gateway has somewhere to move traffic when one is killed. A killed replica restarts on the same
port so the gateway's upstream URL stays valid. Every fault is recorded in ``faults.jsonl``
(monotonic ns) as it happens.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

from loadgen.clock import Clock
from loadgen.kvevents.hub import KvEventHub
from loadgen.runformat.layout import FAULTS_FILE, REPLICA_SERVER_DIR, append_jsonl
from loadgen.runformat.rows import FaultRow
from scenarios.plan import KillReplica
from server.config import ServerConfig
from server.manager import RunningServer, start_server


class Replicas:
    """Replicas 1…n−1 of a case's server: start, kill/restart on schedule, stop."""

    def __init__(
        self,
        config: ServerConfig,
        case_dir: Path,
        clock: Clock,
        kv_events: KvEventHub | None = None,
    ) -> None:
        self._config = config
        self._kv_events = kv_events
        self._case_dir = case_dir
        self._clock = clock
        self.servers: dict[int, RunningServer] = {}

    def _config_for(self, k: int) -> ServerConfig:
        """Replica k's config: on vLLM's CPU backend, its compute threads on core k.

        vLLM's automatic binding puts every instance's model threads on the same core (core
        0, reserving the rest for the front end); two replicas then share one core while the
        other idles, and a restart took over 100 s here. Pinning replica k to core k (mod the
        core count) spreads them. A binding set in the config's env is kept; GPU builds
        ignore the variable. With a KV-event hub, it publishes to replica k's recorder.
        """
        config = self._config
        if self._kv_events is not None:
            config = self._kv_events.config_for(config, k)
        if "VLLM_CPU_OMP_THREADS_BIND" in config.env:
            return config
        core = str(k % (os.cpu_count() or 1))
        env = {**config.env, "VLLM_CPU_OMP_THREADS_BIND": core}
        return config.model_copy(update={"env": env})

    async def start(self, count: int) -> None:
        """Start replicas 1…count−1 (replica 0 is the case's server)."""
        for k in range(1, count):
            self.servers[k] = await start_server(self._config_for(k), self._workdir(k))

    def _workdir(self, k: int) -> Path:
        return self._case_dir / REPLICA_SERVER_DIR.format(k=k)

    def all_running(self) -> bool:
        """Whether every replica's process still runs."""
        return all(s.exit_code() is None for s in self.servers.values())

    def retarget(self, case_dir: Path) -> None:
        """Record the next case's faults in ``case_dir`` (replicas shared by several cases)."""
        self._case_dir = case_dir

    def urls(self) -> list[str]:
        return [self.servers[k].url for k in sorted(self.servers)]

    async def inject(self, faults: tuple[KillReplica, ...], phase_start_ns: int) -> None:
        """Apply ``faults`` at their times (seconds after ``phase_start_ns``), in order."""
        for fault in sorted(faults, key=lambda f: f.at_s):
            await self._clock.sleep_until_ns(phase_start_ns + int(fault.at_s * 1e9))
            server = self.servers[fault.replica]
            event = FaultRow(
                fault=fault.kind, replica=fault.replica, url=server.url,
                killed_ns=self._clock.now_ns(),
            )  # fmt: skip
            try:
                await asyncio.to_thread(server.stop, 5.0)
            finally:  # recorded even if the stop itself failed
                event.stopped_ns = self._clock.now_ns()
                append_jsonl(self._case_dir / FAULTS_FILE, event)
            if fault.restart:
                restarted = await start_server(
                    self._config_for(fault.replica), self._workdir(fault.replica), port=server.port
                )
                self.servers[fault.replica] = restarted
                append_jsonl(
                    self._case_dir / FAULTS_FILE,
                    FaultRow(
                        fault="restarted",
                        replica=fault.replica,
                        url=restarted.url,
                        healthy_ns=self._clock.now_ns(),
                        startup_s=restarted.startup_s,
                    ),
                )

    async def stop_all(self) -> None:
        for server in self.servers.values():
            await asyncio.shield(asyncio.to_thread(server.stop))
        self.servers.clear()


class SharedReplicas:
    """Replicas 1…n−1 kept across consecutive cases of one server config and replica count,
    as replica 0 is (a fleet run's policies share one start); owned by the plan's executor,
    which stops them when the config changes or the run ends. ``kv_events``: the run's
    KV-event recorders, for cases that record them.
    """

    def __init__(self, clock: Clock, kv_events: KvEventHub | None = None) -> None:
        self._clock = clock
        self.kv_events = kv_events
        self._key: tuple[str, int, bool] | None = None
        self.current: Replicas | None = None

    async def for_case(
        self, config: ServerConfig, replicas: int, case_dir: Path, record_kv_events: bool = False
    ) -> Replicas:
        """The replicas of a case with ``replicas`` > 1 servers of ``config``: those of the case
        before when it had the same config, count and recording and all of them still run,
        else new ones (the old ones stopped; with ``record_kv_events`` each publishing to its
        recorder of :attr:`kv_events`). Faults of the case are recorded in ``case_dir``.

        Raises:
            whatever ``server.manager.start_server`` raises for a replica that fails to start.
        """
        key = (config.model_dump_json(), replicas, record_kv_events)
        kept = self.current
        if kept is not None and key == self._key and kept.all_running():
            kept.retarget(case_dir)
            return kept
        await self.stop()
        hub = self.kv_events if record_kv_events else None
        self.current, self._key = Replicas(config, case_dir, self._clock, hub), key
        await self.current.start(replicas)
        return self.current

    async def stop(self) -> None:
        """Stop the replicas kept, if any."""
        if self.current is not None:
            await self.current.stop_all()
        self.current, self._key = None, None
