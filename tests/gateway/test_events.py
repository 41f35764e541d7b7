"""The events file: one JSON line per breaker transition, written by the transition listener."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import aiohttp
import msgspec
import pytest

from gateway.app import running_gateway
from gateway.breaker import BreakerState, Transition
from gateway.cli import build_config
from gateway.events import EventsFile, transition_event
from tests.support.gateway_fakes import fake_upstream, gateway_config, upstream_script

pytestmark = pytest.mark.timeout(30)

STREAM = {"model": "m", "prompt": [1, 2], "max_tokens": 4, "stream": True}
TOKEN = b'data: {"choices":[{"index":0,"text":"tok0 "}]}\n\n'
ERROR = b'data: {"error":{"message":"x","code":500}}\n\n'
DONE = b"data: [DONE]\n\n"


def read_events(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_transition_event_fields_and_nanosecond_stamp(tmp_path: Path) -> None:
    transition = Transition("http://u:1", BreakerState.OPEN, BreakerState.HALF_OPEN, 12.5, "r")
    assert msgspec.to_builtins(transition_event(transition)) == {
        "t_ns": 12_500_000_000,  # 12.5 s * 1e9
        "event": "breaker_transition",
        "upstream": "http://u:1",
        "from": "open",
        "to": "half_open",
        "reason": "r",
    }
    path = tmp_path / "sub" / "events.jsonl"
    events = EventsFile(path)
    assert path.read_text() == ""  # created at once: an empty file means no transitions
    events.on_breaker_transition(transition)
    events.on_breaker_transition(transition)
    assert path.read_text().count("\n") == 2  # flushed per line, readable while running


def test_a_line_that_cannot_be_written_is_logged_and_the_gateway_goes_on(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "events.jsonl"
    events = EventsFile(path)
    path.unlink()
    path.mkdir()  # appending to a directory fails: EISDIR
    transition = Transition("http://u:1", BreakerState.CLOSED, BreakerState.OPEN, 1.0, "r")
    events.on_breaker_transition(transition)  # raises nothing
    assert caplog.messages == [
        f"gateway event not written: cannot write {path}: Is a directory (EISDIR)"
    ]


def test_cli_flag_sets_the_events_file(tmp_path: Path) -> None:
    path = tmp_path / "e.jsonl"
    config = build_config(None, {"upstreams": ["http://127.0.0.1:1"], "events_file": str(path)})
    assert config.events_file == path


@pytest.mark.asyncio
async def test_the_gateway_writes_each_transition_with_monotonic_ns_stamps(
    tmp_path: Path,
) -> None:
    path = tmp_path / "gateway_events.jsonl"
    fake = fake_upstream(status=500)
    async with fake.serve():
        config = gateway_config(
            fake.url,
            events_file=str(path),
            breaker={"consecutive_failures": 1, "cooldown_s": 0.2},
        )
        before_ns = time.monotonic_ns()
        async with running_gateway(config) as url, aiohttp.ClientSession() as client:
            async with client.post(url + "/v1/completions", json={"prompt": "x"}) as resp:
                assert resp.status == 500  # failure 1 of 1: closed -> open
            fake.script = upstream_script()  # recovered
            await asyncio.sleep(0.3)  # past the 0.2 s cool-down
            async with client.post(url + "/v1/completions", json={"prompt": "x"}) as resp:
                assert resp.status == 200  # open -> half_open, probe succeeds: -> closed
        after_ns = time.monotonic_ns()
    events = read_events(path)
    assert [(e["event"], e["upstream"], e["from"], e["to"]) for e in events] == [
        ("breaker_transition", fake.url, "closed", "open"),
        ("breaker_transition", fake.url, "open", "half_open"),
        ("breaker_transition", fake.url, "half_open", "closed"),
    ]
    assert events[0]["reason"] == "1 consecutive failures (status_500)"
    stamps = [e["t_ns"] for e in events]
    assert all(isinstance(t, int) for t in stamps)
    assert before_ns <= stamps[0] <= stamps[1] <= stamps[2] <= after_ns  # monotonic_ns scale
    # half_open is stamped when the cool-down ended: 0.2 s after open (float rounding aside).
    assert stamps[1] - stamps[0] == pytest.approx(200_000_000, abs=1_000)


@pytest.mark.asyncio
async def test_a_probe_stream_failing_after_its_first_token_reopens_at_once(
    tmp_path: Path,
) -> None:
    path = tmp_path / "gateway_events.jsonl"
    fake = fake_upstream(status=500)
    async with fake.serve():
        config = gateway_config(
            fake.url,
            events_file=str(path),
            breaker={"consecutive_failures": 3, "cooldown_s": 0.2},
        )
        async with running_gateway(config) as url, aiohttp.ClientSession() as client:
            for _ in range(3):  # failures 1, 2, 3 of 3: opens
                async with client.post(url + "/v1/completions", json={"prompt": "x"}) as resp:
                    assert resp.status == 500
            # Now streams fail after their first token; a 0.3 s gap holds the probe open.
            fake.script = upstream_script(raw_writes=(TOKEN, ERROR, DONE), itl_s=0.3)
            await asyncio.sleep(0.3)  # past the cool-down
            async with client.post(url + "/v1/completions", json=STREAM) as resp:
                assert resp.status == 200
                assert await resp.content.readuntil(b"\n\n") == TOKEN
                # The probe's first token closed the breaker while its stream still runs.
                async with client.get(url + "/health") as health:
                    during = (await health.json())["upstreams"][0]["breaker"]
                assert await resp.read() == ERROR + DONE
    assert during == "closed"
    events = read_events(path)
    assert [(e["from"], e["to"]) for e in events] == [
        ("closed", "open"),
        ("open", "half_open"),
        ("half_open", "closed"),
        ("closed", "open"),  # one failure on probation, not three
    ]
    assert events[2]["reason"] == "probe's first token arrived"
    assert events[3]["reason"] == "probe failed after its first token: error_event"


@pytest.mark.asyncio
async def test_a_probe_whose_first_chunk_is_an_error_event_fails_as_a_probe(
    tmp_path: Path,
) -> None:
    path = tmp_path / "gateway_events.jsonl"
    fake = fake_upstream(status=500)
    async with fake.serve():
        config = gateway_config(
            fake.url,
            events_file=str(path),
            breaker={"consecutive_failures": 1, "cooldown_s": 0.2},
        )
        async with running_gateway(config) as url, aiohttp.ClientSession() as client:
            async with client.post(url + "/v1/completions", json={"prompt": "x"}) as resp:
                assert resp.status == 500  # failure 1 of 1: open
            fake.script = upstream_script(raw_writes=(ERROR + DONE,))  # one chunk
            await asyncio.sleep(0.3)  # past the cool-down
            async with client.post(url + "/v1/completions", json=STREAM) as resp:
                assert await resp.read() == ERROR + DONE
    events = read_events(path)
    assert [(e["from"], e["to"]) for e in events] == [
        ("closed", "open"),
        ("open", "half_open"),
        ("half_open", "open"),  # never closed in between
    ]
    assert events[2]["reason"] == "probe failed: error_event"
