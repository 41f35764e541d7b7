"""Servers a gate keeps up across runs (``loadgen.kept_servers``): taken again by config, never
stopped by a run, restarted when one exited, stopped by their owner; the cases they serve
start with the prefix cache reset."""

from __future__ import annotations

import asyncio
import warnings
from dataclasses import dataclass
from pathlib import Path

import pytest

import loadgen.kept_servers
from loadgen.case.hooks import RunHooks
from loadgen.execute import _stop_unless_kept
from loadgen.kept_servers import KeptServers, ServerMemory, kept_case, kept_plan, server_bytes
from scenarios.plan import CaseSpec
from scenarios.prefix_eviction import PrefixEviction, PrefixEvictionParams
from server.capacity import KVCapacity


@dataclass
class _Server:
    """What a kept server is asked: whether it exited, and to stop."""

    url: str
    exited: int | None = None
    stopped: int = 0

    def exit_code(self) -> int | None:
        return self.exited

    def stop(self) -> None:
        self.stopped += 1


def _plan():  # type: ignore[no-untyped-def]
    params = PrefixEvictionParams(cache="1GiB")
    return PrefixEviction().plan(params, KVCapacity(18688, 128, 146, 2**30, "metrics"))


def test_kept_cases_reset_the_prefix_cache_with_the_dev_endpoints_on() -> None:
    plan = kept_plan(_plan())
    assert plan.cases and all(c.reset_prefix_cache for c in plan.cases)
    with warnings.catch_warnings():  # model_copy skips validation: a list where the field
        warnings.simplefilter("error")  # is a tuple only warns when plan.json is written
        assert type(plan).model_validate_json(plan.model_dump_json()) == plan
    assert all(c.server and c.server.env["VLLM_SERVER_DEV_MODE"] == "1" for c in plan.cases)
    attached = plan.cases[0].model_copy(update={"server": None, "url": "http://127.0.0.1:1"})
    assert kept_case(attached) is attached  # not ours to reset


def test_a_kept_server_is_taken_again_restarted_when_it_exited_and_stopped_by_its_owner(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    started: list[_Server] = []

    async def start(case: object, workdir: Path, hooks: RunHooks) -> _Server:
        assert workdir == tmp_path / f"server-{len(started) + 1}"  # outside every run
        started.append(_Server(f"http://127.0.0.1:{8000 + len(started)}"))
        return started[-1]

    monkeypatch.setattr(loadgen.kept_servers, "open_server", start)
    kept = KeptServers(tmp_path, ServerMemory(available=lambda: 2**40))
    tested, control = kept_plan(_plan()).cases[:2]
    first = asyncio.run(kept.open(tested, RunHooks()))
    assert asyncio.run(kept.open(tested, RunHooks())) is first  # same config
    other = asyncio.run(kept.open(control, RunHooks()))
    assert other is not first and len(started) == 2
    # A run ending never stops a kept server; one that is not kept is stopped.
    asyncio.run(_stop_unless_kept(first, kept))  # type: ignore[arg-type]
    stray = _Server("http://127.0.0.1:9")
    asyncio.run(_stop_unless_kept(stray, kept))  # type: ignore[arg-type]
    assert (first.stopped, stray.stopped) == (0, 1)
    first.exited = 1  # died between runs: the next run starts it again
    again = asyncio.run(kept.open(tested, RunHooks()))
    assert again is not first and len(started) == 3
    kept.stop_all()
    assert (again.stopped, other.stopped) == (1, 1)
    assert not kept.owns(again)  # type: ignore[arg-type]


def test_kept_servers_of_either_side_are_stopped_least_recently_used_first_to_make_room(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # A 10 GiB machine; a server takes its KV cache + 1.5 GiB; 1 GiB stays free. Tested case:
    # 1 GiB cache (2.5 GiB a server), control: 4 GiB (5.5 GiB). By hand: A.t, A.c start (2.0
    # GiB left); B.t needs 3.5: A.t (least recent) stops; B.c needs 6.5: A.c stops; B.t is
    # taken again; A.t needs 3.5 with 2.0 left: B.c (used before B.t's retake) stops.
    gib = 2**30
    running: list[tuple[_Server, int]] = []

    async def start(case: CaseSpec, workdir: Path, hooks: RunHooks) -> _Server:
        running.append((_Server(f"http://127.0.0.1:{8000 + len(running)}"), server_bytes(case)))
        return running[-1][0]

    def available() -> int:
        return 10 * gib - sum(b for s, b in running if not s.stopped)

    monkeypatch.setattr(loadgen.kept_servers, "open_server", start)
    memory = ServerMemory(available)
    sides = {s: KeptServers(tmp_path / s, memory) for s in "AB"}
    tested, control = kept_plan(_plan()).cases[:2]
    assert tested.server and control.server
    tested = tested.model_copy(
        update={"server": tested.server.model_copy(update={"kv_cache_bytes": gib})}
    )
    control = control.model_copy(
        update={"server": control.server.model_copy(update={"kv_cache_bytes": 4 * gib})}
    )
    said: list[str] = []
    hooks = RunHooks(on_message=said.append)
    for side, case in (
        ("A", tested),
        ("A", control),
        ("B", tested),
        ("B", control),
        ("B", tested),
        ("A", tested),
    ):
        server = asyncio.run(sides[side].open(case, hooks))
        sides[side].release(server)  # each run ends before the next opens: all idle
    stopped = [s.url for s, _ in running if s.stopped]
    assert stopped == ["http://127.0.0.1:8000", "http://127.0.0.1:8001", "http://127.0.0.1:8003"]
    assert len(running) == 5 and available() == 5 * gib  # B.t and A.t up: 10 - 2 × 2.5
    assert sum("stopped kept server" in m for m in said) == 3
    assert "2.0 GiB available, the next server needs about 2.5 GiB" in said[0]


def test_a_server_the_other_side_is_using_is_never_stopped_to_make_room(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # A gate pair runs both sides at once. A 10 GiB machine, servers of 2.5 GiB (1 GiB cache)
    # and 5.5 GiB (4 GiB), 1 GiB headroom. B.t opens first (the least recently used), then
    # A.t: 5 GiB left. A moves to its control case (6.5 GiB needed): it lets A.t go, and only
    # idle servers may be stopped, so A.t stops (7.5 GiB left, enough) and B.t, which B is
    # between two phases on, stays up although it is older. Without that rule B.t would go.
    gib = 2**30
    running: list[tuple[_Server, int]] = []

    async def start(case: CaseSpec, workdir: Path, hooks: RunHooks) -> _Server:
        running.append((_Server(f"http://127.0.0.1:{8000 + len(running)}"), server_bytes(case)))
        return running[-1][0]

    monkeypatch.setattr(loadgen.kept_servers, "open_server", start)
    memory = ServerMemory(lambda: 10 * gib - sum(b for s, b in running if not s.stopped))
    sides = {s: KeptServers(tmp_path / s, memory) for s in "AB"}
    tested, control = kept_plan(_plan()).cases[:2]
    assert tested.server and control.server
    tested = tested.model_copy(
        update={"server": tested.server.model_copy(update={"kv_cache_bytes": gib})}
    )
    control = control.model_copy(
        update={"server": control.server.model_copy(update={"kv_cache_bytes": 4 * gib})}
    )
    b_tested = asyncio.run(sides["B"].open(tested, RunHooks()))
    a_tested = asyncio.run(sides["A"].open(tested, RunHooks()))
    asyncio.run(_stop_unless_kept(a_tested, sides["A"]))  # type: ignore[arg-type]
    asyncio.run(sides["A"].open(control, RunHooks()))
    assert (a_tested.stopped, b_tested.stopped) == (1, 0)
    assert sides["B"].idle_keys() == [] and len(sides["A"].idle_keys()) == 0
    # Once B's run lets it go, B.t is idle and may make room like any other.
    sides["B"].release(b_tested)  # type: ignore[arg-type]
    assert len(sides["B"].idle_keys()) == 1
