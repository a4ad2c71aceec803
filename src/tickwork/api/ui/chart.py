"""The overview's chart: attempts started, succeeded and failed per minute, as the
coordinates of an inline SVG (no script, no library: the page draws it as it loads).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from tickwork.engine.overview import Minute

WIDTH: Final = 600
HEIGHT: Final = 150
TOP: Final = 6  # room for the stroke at the maximum


@dataclass(frozen=True, slots=True)
class Slot:
    """One minute's hover area and its numbers."""

    x: float
    width: float
    minute: Minute


@dataclass(frozen=True, slots=True)
class Chart:
    width: int
    height: int
    peak: int
    started: str  # polyline points
    succeeded: str
    failed: str
    started_area: str  # polygon points under the started line
    slots: list[Slot]
    gridlines: list[float]  # y of the quarter lines

    @property
    def empty(self) -> bool:
        return self.peak == 0


def _nice(value: int) -> int:
    """The smallest 1, 2 or 5 times a power of ten at or above ``value``."""
    if value <= 4:
        return 4
    magnitude = 1
    while True:
        for step in (1, 2, 5):
            if step * magnitude >= value:
                return step * magnitude
        magnitude *= 10


def build(minutes: list[Minute]) -> Chart:
    peak = _nice(max([0, *(max(m.started, m.succeeded, m.failed) for m in minutes)]))
    count = max(len(minutes), 2)
    step = WIDTH / (count - 1)

    def y(value: int) -> float:
        return round(HEIGHT - (HEIGHT - TOP) * value / peak, 1)

    def points(values: list[int]) -> str:
        return " ".join(f"{round(i * step, 1)},{y(v)}" for i, v in enumerate(values))

    started = points([m.started for m in minutes])
    area = f"0,{HEIGHT} {started} {round((len(minutes) - 1) * step, 1)},{HEIGHT}"
    slots = [
        Slot(x=round(max(0.0, i * step - step / 2), 1), width=round(step, 1), minute=m)
        for i, m in enumerate(minutes)
    ]
    return Chart(
        width=WIDTH,
        height=HEIGHT,
        peak=peak if any(m.started or m.succeeded or m.failed for m in minutes) else 0,
        started=started,
        succeeded=points([m.succeeded for m in minutes]),
        failed=points([m.failed for m in minutes]),
        started_area=area,
        slots=slots,
        gridlines=[y(peak * q // 4) for q in (1, 2, 3)],
    )
