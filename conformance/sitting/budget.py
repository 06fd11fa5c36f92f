"""The sitting's time: `budget_s` from its start, of which `reserve_s` is kept for the last stops and the
results. A step starts only when its worst case (its whole limit, and what it commits after: a server's stop)
ends before the reserve; otherwise it is not run, and the results say what it needed and what was left.
The dry run asks the same questions of a clock that each step moves by its whole limit."""

from __future__ import annotations

import time
from typing import Callable


class Budget:
    def __init__(self, budget_s: float, reserve_s: float, clock: Callable[[], float] = time.monotonic):
        self.budget_s, self.reserve_s, self.clock = budget_s, reserve_s, clock
        self.start = clock()

    def elapsed(self) -> float:
        return self.clock() - self.start

    def left(self) -> float:
        """Seconds a step may still take."""
        return self.budget_s - self.reserve_s - self.elapsed()

    def fits(self, worst_s: float) -> bool:
        return worst_s <= self.left()

    def shortfall(self, worst_s: float) -> str:
        return (f"needs up to {worst_s:.0f} s, {max(self.left(), 0):.0f} s left of the budget "
                f"({self.budget_s:g} s, {self.reserve_s:g} s kept for stops and results)")


class WorstCaseClock:
    """A clock for the dry run: moved by hand, by each step's whole limit."""

    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds
