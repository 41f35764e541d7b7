"""KV-cache event messages: vLLM 0.32's own encoding decoded (tests/fixtures/kv_events/
messages.json, made by vLLM's classes), rows with a gap and a cleared cache, and the server
flag that turns the publisher on."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import msgspec
import pytest

from loadgen.kvevents.recorder import EventLog
from loadgen.kvevents.wire import BlockRemoved, BlockStored, WireError, decode_message
from loadgen.runformat import KvEventRow
from server.config import ServerConfig
from server.kv_events import kv_events_args

FIXTURE = json.loads((Path(__file__).parents[1] / "fixtures/kv_events/messages.json").read_text())
MESSAGES = [[bytes.fromhex(f) for f in m] for m in FIXTURE["messages"]]


def test_the_fixture_is_vllm_0_32_s_encoding() -> None:
    assert FIXTURE["vllm"] == "0.32.0"


def test_a_batch_decodes_to_its_step_time_and_events() -> None:
    seq, batch = decode_message(MESSAGES[0])
    assert (seq, batch.ts) == (0, 1000.5)
    (stored,) = batch.events
    assert isinstance(stored, BlockStored)
    assert (stored.block_hashes, stored.parent_block_hash) == ([101, 102], None)
    assert (stored.token_ids, stored.block_size, stored.medium) == (
        [1, 2, 3, 4, 5, 6, 7, 8],
        4,
        "CPU",
    )
    seq, batch = decode_message(MESSAGES[1])
    assert seq == 1 and isinstance(batch.events[1], BlockRemoved)


def test_rows_note_the_gap_and_the_cleared_cache() -> None:
    """Messages 0, 1, 3 arrive: message 2 is lost (a gap row: from 2, 1 missing). Message 3
    stores a block whose hash came as 32 bytes (0…07: the integer 7), removes one and clears
    the cache."""
    log = EventLog()
    rows = [row for i, m in enumerate(MESSAGES) for row in log.rows(m, recv_ns=100 + i)]
    assert [(r.event, r.seq) for r in rows] == [
        ("stored", 0),
        ("stored", 1),
        ("removed", 1),
        ("gap", 2),
        ("stored", 3),
        ("removed", 3),
        ("cleared", 3),
    ]
    gap = rows[3]
    assert (gap.missing, gap.recv_ns) == (1, 102)
    assert rows[4].block_hashes == [7]
    assert rows[1].parent_block_hash == 102 and rows[1].token_ids == [9, 10, 11, 12]
    assert (log.messages, log.missing) == (3, 1)
    # Rows survive their JSON line unchanged.
    line = msgspec.json.encode(rows[1])
    assert msgspec.json.decode(line, type=KvEventRow) == rows[1]


def test_a_first_message_after_zero_is_a_gap_and_a_restart_starts_counting_again() -> None:
    log = EventLog()
    first = log.rows(MESSAGES[1], 1)  # sequence 1: message 0 was lost
    assert (first[0].event, first[0].seq, first[0].missing) == ("gap", 0, 1)
    again = log.rows(MESSAGES[0], 2)  # sequence 0 again: a new publisher
    assert [r.event for r in again] == ["stored"]


def test_a_message_that_is_not_a_batch_is_one_undecodable_row() -> None:
    (row,) = EventLog().rows([b"", b"\x00" * 8, b"\x01\x02"], 5)
    assert row.event == "undecodable" and row.error and "undecodable" in row.error
    with pytest.raises(WireError, match="3 frames"):
        decode_message([b""])


def test_the_server_flag_points_the_publisher_at_a_loopback_subscriber() -> None:
    """An address (not ``*``) makes vLLM's PUB socket connect: to the recorder on loopback."""
    flag, value = kv_events_args(5557)
    assert flag == "--kv-events-config"
    assert json.loads(value) == {
        "enable_kv_cache_events": True,
        "publisher": "zmq",
        "endpoint": "tcp://127.0.0.1:5557",
    }
    argv = ServerConfig(kv_events_port=5557).command("python", "/m", 8000)
    assert argv[argv.index("--kv-events-config") + 1] == value
    assert "--kv-events-config" not in ServerConfig().command("python", "/m", 8000)
    with pytest.raises(ValueError, match="1–65535"):
        kv_events_args(0)


async def test_the_recorder_writes_what_a_connecting_publisher_sends(tmp_path: Path) -> None:
    """A PUB socket connecting to the recorder (as vLLM's does with a loopback endpoint, at
    engine start, long before any request) sends the fixture's messages once the connection
    has settled (a PUB drops what it sends before the subscription reaches it: ZMQ's slow
    joiner); kv_events.jsonl holds the rows, gap included."""
    import zmq
    import zmq.asyncio

    from analysis.load import read_jsonl
    from loadgen.kvevents.recorder import recording_kv_events

    path = tmp_path / "kv_events.jsonl"
    ctx = zmq.asyncio.Context()
    pub = ctx.socket(zmq.PUB)
    try:
        async with recording_kv_events(path, drain_s=0.5) as recorder:
            pub.connect(f"tcp://127.0.0.1:{recorder.port}")
            await asyncio.sleep(0.5)
            for message in MESSAGES:
                await pub.send_multipart(message)
    finally:
        pub.close(linger=0)
        ctx.term()
    rows = read_jsonl(path, KvEventRow).rows
    assert [r.event for r in rows] == [
        "stored",
        "stored",
        "removed",
        "gap",
        "stored",
        "removed",
        "cleared",
    ]
