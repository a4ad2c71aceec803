"""An independent reading of cron text, for the tests that check ``tickwork.core.cron``
against it: the rules of docs/cron.md applied naively, one wall time at a time, and a
brute-force walk of every UTC minute of a window. It never calls ``tickwork.core.cron``,
so the two can only agree by both being right.
"""

from __future__ import annotations

import calendar
from dataclasses import dataclass
from datetime import date, datetime, timedelta

from tickwork.core import zones

MINUTE = timedelta(minutes=1)

MONTH_NAMES = ["jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"]
MONTHS = {name: number for number, name in enumerate(MONTH_NAMES, 1)}
WEEKDAYS = {"sun": 0, "mon": 1, "tue": 2, "wed": 3, "thu": 4, "fri": 5, "sat": 6}
# Zones with each kind of clock change: none (UTC, Asia/Kolkata), an hour forward and
# back north and south of the equator, and half an hour (Australia/Lord_Howe).
ZONES = [
    "UTC",
    "Europe/Berlin",
    "America/New_York",
    "Australia/Lord_Howe",
    "Asia/Kolkata",
    "America/Santiago",
]
# docs/cron.md's macros and the five fields each stands for, written out here rather
# than read from the module under test.
MACROS = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}


def _number(text: str, names: dict[str, int]) -> int:
    return int(text) if text.isdigit() else names[text.lower()]


def field_values(text: str, low: int, high: int, names: dict[str, int] | None = None) -> set[int]:
    """Plain Vixie list items: ``*``, ``*/n``, ``a``, ``a-b``, ``a-b/n``."""
    result: set[int] = set()
    for item in text.split(","):
        body, _, step_text = item.partition("/")
        step = int(step_text) if step_text else 1
        if body == "*":
            first, last = low, high
        elif "-" in body:
            first_text, last_text = body.split("-")
            first, last = _number(first_text, names or {}), _number(last_text, names or {})
        else:
            first = last = _number(body, names or {})
        result.update(range(first, last + 1, step))
    return result


@dataclass
class Matcher:
    """A deliberately naive reading of a cron expression, one wall time at a time."""

    minutes: set[int]
    hours: set[int]
    days: set[int]
    last_day: bool
    months: set[int]
    weekdays: set[int]
    nth: set[tuple[int, int]]
    last_weekdays: set[int]
    day_and: bool
    fixed_hour: bool

    @classmethod
    def of(cls, expression: str) -> Matcher:
        minute, hour, dom, month, dow = expression.split()
        day_items = dom.split(",")
        days = ",".join(i for i in day_items if i.upper() != "L")
        weekdays: set[int] = set()
        nth: set[tuple[int, int]] = set()
        last_weekdays: set[int] = set()
        for item in dow.split(","):
            if "#" in item:
                weekday, number = item.split("#")
                nth.add((_number(weekday, WEEKDAYS) % 7, int(number)))
            elif item[-1] in "lL" and item.lower() not in WEEKDAYS:
                last_weekdays.add(_number(item[:-1], WEEKDAYS) % 7)
            else:
                weekdays.update(v % 7 for v in field_values(item, 0, 7, WEEKDAYS))
        return cls(
            minutes=field_values(minute, 0, 59),
            hours=field_values(hour, 0, 23),
            days=field_values(days, 1, 31) if days else set(),
            last_day=any(i.upper() == "L" for i in day_items),
            months=field_values(month, 1, 12, MONTHS),
            weekdays=weekdays,
            nth=nth,
            last_weekdays=last_weekdays,
            day_and=dom.startswith("*") or dow.startswith("*"),
            fixed_hour=not hour.startswith("*"),
        )

    def day_matches(self, day: date) -> bool:
        length = calendar.monthrange(day.year, day.month)[1]
        by_day = day.day in self.days or (self.last_day and day.day == length)
        weekday = (day.weekday() + 1) % 7  # cron counts from Sunday = 0
        by_weekday = (
            weekday in self.weekdays
            or (weekday, (day.day - 1) // 7 + 1) in self.nth
            or (weekday in self.last_weekdays and day.day + 7 > length)
        )
        return (by_day and by_weekday) if self.day_and else (by_day or by_weekday)

    def matches(self, wall: datetime) -> bool:
        return (
            wall.minute in self.minutes
            and wall.hour in self.hours
            and wall.month in self.months
            and self.day_matches(wall.date())
        )


def reference_fires(expression: str, zone: str, start: datetime, end: datetime) -> list[datetime]:
    """Fire instants in ``(start, end]`` by walking every UTC minute."""
    matcher = Matcher.of(expression)
    tz = zones.get(zone)
    instant = start.replace(second=0, microsecond=0) + MINUTE
    previous_wall = (instant - MINUTE).astimezone(tz).replace(tzinfo=None)
    fires: list[datetime] = []
    while instant <= end:
        local = instant.astimezone(tz)
        wall = local.replace(tzinfo=None)
        # fold=1 marks the second pass through a repeated wall time.
        fires_here = matcher.matches(wall) and (local.fold == 0 or not matcher.fixed_hour)
        skipped = wall - previous_wall - MINUTE
        if matcher.fixed_hour and timedelta(0) < skipped:
            # This is the first instant after a gap (of any length: Pacific/Apia lost a
            # whole day): it stands for every wall time the gap swallowed.
            missing = previous_wall + MINUTE
            while missing < wall and not fires_here:
                fires_here = matcher.matches(missing)
                missing += MINUTE
        if fires_here and instant > start:
            fires.append(instant)
        previous_wall = wall
        instant += MINUTE
    return fires
