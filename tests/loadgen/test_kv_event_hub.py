"""The run's KV-event recorders: one per replica, bound before its server starts, writing
into whichever case runs now (rows that arrive before any case are held, not lost), and
closed with what arrived flushed."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import zmq
import zmq.asyncio

from analysis.load import read_jsonl
from loadgen.kvevents.hub import KvEventHub
from loadgen.runformat import KvEventRow
from server.config import ServerConfig

FIXTURE = json.loads((Path(__file__).parents[1] / "fixtures/kv_events/messages.json").read_text())
MESSAGES = [[bytes.fromhex(f) for f in m] for m in FIXTURE["messages"]]


def events(path: Path) -> list[str]:
    return [r.event for r in read_jsonl(path, KvEventRow).rows]


async def test_each_replicas_events_go_to_the_case_running_now(tmp_path: Path) -> None:
    hub = KvEventHub(drain_s=0.3)
    config = hub.config_for(ServerConfig(model="m", kv_cache_bytes=2**30), 1)
    assert config.kv_events_port == hub.port_for(1)  # the same recorder on every ask
    ctx = zmq.asyncio.Context()
    pub = ctx.socket(zmq.PUB)
    try:
        pub.connect(f"tcp://127.0.0.1:{config.kv_events_port}")
        await asyncio.sleep(0.5)  # the connection settles (ZMQ's slow joiner)
        await pub.send_multipart(MESSAGES[0])  # before any case: held
        await asyncio.sleep(0.3)
        hub.record_into(tmp_path / "a")
        await pub.send_multipart(MESSAGES[1])
        await asyncio.sleep(0.3)
        hub.record_into(tmp_path / "b")
        await pub.send_multipart(MESSAGES[2])
    finally:
        await hub.aclose()
        pub.close(linger=0)
        ctx.term()
    # Replica 1's files are under replicas/1/ of each case; message 0 was held for case a.
    assert events(tmp_path / "a/replicas/1/kv_events.jsonl") == ["stored", "stored", "removed"]
    assert events(tmp_path / "b/replicas/1/kv_events.jsonl") == ["gap", "stored", "removed",
                                                                 "cleared"]  # fmt: skip


async def test_every_message_is_passed_on_to_another_subscriber(tmp_path: Path) -> None:
    """vllm-router's kv_aware subscribes at the recorder's republishing endpoint: it gets
    each message as vLLM sent it, frame for frame."""
    hub = KvEventHub(drain_s=0.1)
    port = hub.port_for(0)
    assert hub.republished(2) is None  # replica 1 has no recorder
    (endpoint,) = hub.republished(1) or []
    ctx = zmq.asyncio.Context()
    pub, sub = ctx.socket(zmq.PUB), ctx.socket(zmq.SUB)
    try:
        sub.setsockopt(zmq.SUBSCRIBE, b"")
        sub.connect(endpoint)
        pub.connect(f"tcp://127.0.0.1:{port}")
        await asyncio.sleep(0.5)  # both connections settle
        hub.record_into(tmp_path)
        await pub.send_multipart(MESSAGES[1])
        got = await asyncio.wait_for(sub.recv_multipart(), 5)
        assert got == MESSAGES[1]
    finally:
        await hub.aclose()
        for s in (pub, sub):
            s.close(linger=0)
        ctx.term()
