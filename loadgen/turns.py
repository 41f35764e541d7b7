"""Turns between two runs that share one event loop: a gate pair's baseline and candidate
runs go phase by phase, one side working at a time, so the two sides' phases p run seconds
apart instead of a whole run apart.

A :class:`Baton` hands the turn between two sides in phase-level ABBA order: turn t belongs
to the pair's first side when ⌊t/2⌋ and t are both even or both odd (turns 0, 3, 4, 7, …), to
the other side otherwise (1, 2, 5, 6, …): phase 0 first then second, phase 1 second then
first, and so on, which also cancels a drift that is linear across the phases. A side takes
its first turn before it does anything (its server start and its plan included) and, at the
end of each phase, hands the turn over and waits for its next one (:meth:`Baton.hand_over`).
A side whose run ends, however it ends (a failure, a dead server, Ctrl-C), leaves the baton
(:meth:`Baton.leave`): its remaining turns are skipped, so the other side never waits on it.
Each side keeps its own servers, so each prefix cache still sees exactly its scenario's
sequence of phases; only the other side's phases sit between them.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

T = TypeVar("T")


@dataclass(frozen=True)
class Turn:
    """One finished turn: the side that held it and the phase it ended with
    (``case/phase``; ``None`` when the side's run ended without one in that turn)."""

    side: str
    phase: str | None


class Baton:
    """Phase-level ABBA turns between two sides (module docstring)."""

    def __init__(self, first: str, second: str) -> None:
        """``first``: the side whose turn is turn 0 (the gate order's first of the pair)."""
        if first == second:
            raise ValueError(f"two different sides needed (got {first!r} twice)")
        self.sides = (first, second)
        self.turns: list[Turn] = []
        self._turn = 0
        self._left: set[str] = set()
        self._changed = asyncio.Condition()

    def owner(self, turn: int) -> str:
        """The side turn ``turn`` (0-based) belongs to in ABBA order, ignoring sides that left."""
        block, position = divmod(turn, 2)
        first, second = self.sides
        return first if (block % 2 == 0) == (position == 0) else second

    def holder(self) -> str | None:
        """The side whose turn it is now; ``None`` once both sides left."""
        if set(self.sides) <= self._left:
            return None
        while self.owner(self._turn) in self._left:
            self._turn += 1
        return self.owner(self._turn)

    async def take(self, side: str) -> None:
        """Wait until it is ``side``'s turn.

        Raises:
            ValueError: ``side`` is not one of the two or has left.
        """
        self._check(side)
        async with self._changed:
            await self._changed.wait_for(lambda: self.holder() == side)

    async def hand_over(self, side: str, phase: str | None = None) -> None:
        """End ``side``'s turn (its last phase ``phase``) and wait for its next one.

        Raises:
            ValueError: ``side`` is unknown, has left, or does not hold the turn.
        """
        self._check(side)
        async with self._changed:
            if self.holder() != side:
                raise ValueError(f"{side} handed over a turn it does not hold")
            self.turns.append(Turn(side, phase))
            self._turn += 1
            self._changed.notify_all()
        await self.take(side)

    async def leave(self, side: str) -> None:
        """``side``'s run ended: its remaining turns are skipped from now on."""
        async with self._changed:
            if self.holder() == side:
                self.turns.append(Turn(side, None))
            self._left.add(side)
            self._changed.notify_all()

    async def run(self, side: str, work: Callable[[], Awaitable[T]]) -> T:
        """Await ``work()`` (a side's run) from ``side``'s first turn, leaving the baton when
        it ends, however it ends."""
        try:
            await self.take(side)
            return await work()
        finally:
            await asyncio.shield(self.leave(side))

    def _check(self, side: str) -> None:
        if side not in self.sides:
            raise ValueError(f"unknown side {side!r} (sides {self.sides})")
        if side in self._left:
            raise ValueError(f"{side} has left the baton")
