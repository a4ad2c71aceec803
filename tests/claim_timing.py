"""Time for claim tests that drive ``now`` themselves, and the measure of a rate limit."""

from __future__ import annotations

import bisect
from datetime import datetime

from tickwork.core.clock import FrozenClock


class TickingClock(FrozenClock):
    """Each reading is a step later than the one before: every claim has its own now."""

    def __init__(self, start: datetime, step: float) -> None:
        super().__init__(start)
        self.step = step

    def now(self) -> datetime:
        return self.advance(self.step)


def fullest_window(times: list[float], period: float) -> int:
    """The most of ``times`` in any window of ``period`` seconds (the fullest windows
    start at one of the times, so only those are counted)."""
    ordered = sorted(times)
    return max(
        bisect.bisect_left(ordered, start + period) - index for index, start in enumerate(ordered)
    )
