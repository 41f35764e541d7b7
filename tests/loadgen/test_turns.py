"""Turns between a gate pair's two runs (``loadgen.turns``): phase-level ABBA, one side working
at a time, and a side that ends early never blocks the other. Sides here are hand-made
coroutines that log what they do; the expected orders are written out by hand."""

from __future__ import annotations

import asyncio

import pytest

from loadgen.turns import Baton, Turn


async def _side(baton: Baton, side: str, phases: int, log: list[str], fail_after: int = -1) -> str:
    """A run of ``phases`` phases: a start (its server, its plan), then each phase logged as
    it begins and ends with a yield in between (another side working then would show)."""
    log.append(f"{side} start")
    for p in range(phases):
        log.append(f"{side}{p} begins")
        await asyncio.sleep(0)
        log.append(f"{side}{p} ends")
        if p == fail_after:
            raise RuntimeError(f"{side}'s server died")
        await baton.hand_over(side, f"case/p{p}")
    return f"{side} done"


def _pair(first: str, phases: dict[str, int], fail: dict[str, int] | None = None) -> tuple:
    baton = Baton(first, next(s for s in phases if s != first))
    log: list[str] = []

    async def both() -> list[object]:
        return await asyncio.gather(
            *(baton.run(s, lambda s=s, n=n: _side(baton, s, n, log, (fail or {}).get(s, -1)))
              for s, n in phases.items()),
            return_exceptions=True,
        )  # fmt: skip

    return asyncio.run(both()), log, baton


def test_turns_go_abba_at_the_phase_level_one_side_at_a_time() -> None:
    # Turns 0..5 belong to A, B, B, A, A, B: phase 0 A then B, phase 1 B then A, phase 2 A then
    # B. Each phase begins and ends before the other side does anything, start included.
    results, log, baton = _pair("A", {"A": 3, "B": 3})
    assert results == ["A done", "B done"]
    assert log == [
        "A start", "A0 begins", "A0 ends",
        "B start", "B0 begins", "B0 ends",
        "B1 begins", "B1 ends",
        "A1 begins", "A1 ends",
        "A2 begins", "A2 ends",
        "B2 begins", "B2 ends",
    ]  # fmt: skip
    assert [t.side for t in baton.turns] == ["A", "B", "B", "A", "A", "B", "B", "A"]
    assert baton.turns[:3] == [Turn("A", "case/p0"), Turn("B", "case/p0"), Turn("B", "case/p1")]


def test_the_pairs_first_side_starts_and_owns_turns_0_3_4_7() -> None:
    baton = Baton("candidate", "baseline")
    assert [baton.owner(t) for t in range(8)] == [
        "candidate", "baseline", "baseline", "candidate",
        "candidate", "baseline", "baseline", "candidate",
    ]  # fmt: skip
    with pytest.raises(ValueError, match="two different sides"):
        Baton("A", "A")


def test_a_side_that_fails_early_leaves_and_the_other_runs_its_phases_alone() -> None:
    # B fails in its phase 0 (turn 1): its turns 2, 5, … are skipped; A goes on with phases
    # 1 and 2 in turns 3 and 4 without waiting.
    results, log, _ = _pair("A", {"A": 3, "B": 3}, fail={"B": 0})
    assert results[0] == "A done"
    assert isinstance(results[1], RuntimeError)
    assert log == [
        "A start", "A0 begins", "A0 ends",
        "B start", "B0 begins", "B0 ends",
        "A1 begins", "A1 ends", "A2 begins", "A2 ends",
    ]  # fmt: skip


def test_a_side_with_fewer_phases_does_not_block_the_longer_one() -> None:
    # B has one phase: after it, B's run ends and leaves; A's phases 1 and 2 follow.
    results, log, _ = _pair("B", {"A": 3, "B": 1})
    assert results == ["A done", "B done"]
    assert log == [
        "B start", "B0 begins", "B0 ends",
        "A start", "A0 begins", "A0 ends",
        "A1 begins", "A1 ends", "A2 begins", "A2 ends",
    ]  # fmt: skip


def test_a_side_cannot_hand_over_a_turn_it_does_not_hold() -> None:
    async def wrong() -> None:
        await Baton("A", "B").hand_over("B")

    with pytest.raises(ValueError, match="does not hold"):
        asyncio.run(wrong())
