"""DST and calendar suite for ``tickwork.core.cron``.

Expected instants do not come from croniter: a brute-force reference below walks
every UTC minute of a window, reads it as local wall time in the zone and applies
the rules of docs/cron.md with its own small matcher. Hand-written literals pin the
rules down independently of both. The calendar rules over windows of months, a walk
too long for this tier, are checked against the same reference in
tests/test_cron_dst.py.
"""

from __future__ import annotations

import calendar
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta

import pytest

from tickwork.core import cron, zones

MINUTE = timedelta(minutes=1)

MONTH_NAMES = ["jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"]
MONTHS = {name: number for number, name in enumerate(MONTH_NAMES, 1)}
WEEKDAYS = {"sun": 0, "mon": 1, "tue": 2, "wed": 3, "thu": 4, "fri": 5, "sat": 6}


def _number(text: str, names: dict[str, int]) -> int:
    return int(text) if text.isdigit() else names[text.lower()]


def _values(text: str, low: int, high: int, names: dict[str, int] | None = None) -> set[int]:
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
                weekdays.update(v % 7 for v in _values(item, 0, 7, WEEKDAYS))
        return cls(
            minutes=_values(minute, 0, 59),
            hours=_values(hour, 0, 23),
            days=_values(days, 1, 31) if days else set(),
            last_day=any(i.upper() == "L" for i in day_items),
            months=_values(month, 1, 12, MONTHS),
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


def utc(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


# (zone, window start in UTC, hours): each window holds a transition, or for
# Asia/Kolkata none at all, or for Pacific/Apia a whole missing day.
WINDOWS = {
    "berlin-spring": ("Europe/Berlin", "2024-03-30T12:00", 36),
    "berlin-fall": ("Europe/Berlin", "2024-10-26T12:00", 36),
    "new-york-spring": ("America/New_York", "2024-03-09T12:00", 48),
    "new-york-fall": ("America/New_York", "2024-11-02T12:00", 48),
    "lord-howe-spring": ("Australia/Lord_Howe", "2024-10-05T00:00", 36),
    "lord-howe-fall": ("Australia/Lord_Howe", "2024-04-06T00:00", 36),
    "kolkata": ("Asia/Kolkata", "2024-03-30T00:00", 48),
    "apia-2011": ("Pacific/Apia", "2011-12-28T00:00", 96),
}

EXPRESSIONS = [
    "30 2 * * *",  # fixed: in Berlin/New York gaps and the Berlin overlap
    "0,30 2 * * *",  # fixed: two gap times collapse into one run
    "0 2,3 * * *",  # fixed: the collapsed gap run is also the 03:00 run
    "30 1 * * *",  # fixed: New York / Lord Howe overlap
    "45 1,2 * * *",  # fixed: Lord Howe overlap at 01:45, Berlin/New York gap at 02:45
    "15 2 * * *",  # fixed: inside Lord Howe's 30-minute gap
    "*/20 1-3 * * *",  # fixed hour given as a range
    "10 0-23/2 * * *",  # fixed by the text rule although it covers the whole day
    "0 9 * * *",  # fixed: Pacific/Apia's missing day
    "*/15 * * * *",  # wildcard: skip gap times, fire both overlap passes
    "0 * * * *",  # wildcard hourly: one run per real hour through the night
    "0 */3 * * *",  # wildcard with a step
    "15,45 * * * *",  # wildcard, minutes that fall in Lord Howe's half-hour gap
]

DST_CASES = [
    pytest.param(window, expression, id=f"{window}:{expression}")
    for window in WINDOWS
    for expression in EXPRESSIONS
]


@pytest.mark.parametrize(("window", "expression"), DST_CASES)
def test_matches_brute_force_reference_around_transitions(window: str, expression: str) -> None:
    zone, start_text, hours = WINDOWS[window]
    start = utc(start_text)
    end = start + timedelta(hours=hours)
    schedule = cron.CronSchedule.parse(expression, zone)
    assert schedule.between(start, end) == reference_fires(expression, zone, start, end)


LITERAL_CASES = [
    # Spring forward, fixed hour: the nonexistent time runs at the end of the gap.
    ("30 2 * * *", "Europe/Berlin", "2024-03-30T12:00", ["2024-03-31T01:00"]),
    ("0,30 2 * * *", "Europe/Berlin", "2024-03-30T12:00", ["2024-03-31T01:00"]),
    ("0 2,3 * * *", "Europe/Berlin", "2024-03-30T12:00", ["2024-03-31T01:00"]),
    ("30 2 * * *", "America/New_York", "2024-03-09T12:00", ["2024-03-10T07:00"]),
    ("15 2 * * *", "Australia/Lord_Howe", "2024-10-05T00:00", ["2024-10-05T15:30"]),
    # Fall back, fixed hour: only the first occurrence.
    ("30 2 * * *", "Europe/Berlin", "2024-10-26T12:00", ["2024-10-27T00:30"]),
    ("30 1 * * *", "America/New_York", "2024-11-02T12:00", ["2024-11-03T05:30"]),
    ("45 1 * * *", "Australia/Lord_Howe", "2024-04-06T00:00", ["2024-04-06T14:45"]),
    # Spring forward, wildcard hour: the gap is skipped, the cadence is kept.
    (
        "*/30 * * * *",
        "Europe/Berlin",
        "2024-03-31T00:00",
        ["2024-03-31T00:30", "2024-03-31T01:00", "2024-03-31T01:30"],
    ),
    # Fall back, wildcard hour: both passes, one run per real hour.
    (
        "0 * * * *",
        "Europe/Berlin",
        "2024-10-26T23:30",
        ["2024-10-27T00:00", "2024-10-27T01:00", "2024-10-27T02:00"],
    ),
    (
        "15,45 * * * *",
        "Australia/Lord_Howe",
        "2024-04-06T14:00",
        ["2024-04-06T14:15", "2024-04-06T14:45", "2024-04-06T15:15", "2024-04-06T15:45"],
    ),
    # +05:30, no DST.
    ("30 9 * * *", "Asia/Kolkata", "2024-06-01T00:00", ["2024-06-01T04:00"]),
    # Pacific/Apia skipped 2011-12-30: its fixed-hour times run once, at the first
    # instant after the gap (2011-12-31 00:00 +14:00).
    (
        "0 9 * * *",
        "Pacific/Apia",
        "2011-12-28T20:00",
        ["2011-12-29T19:00", "2011-12-30T10:00", "2011-12-30T19:00"],
    ),
    (
        "0 12 * * *",
        "Pacific/Apia",
        "2011-12-29T12:00",
        ["2011-12-29T22:00", "2011-12-30T10:00", "2011-12-30T22:00"],
    ),
    ("0 0 29 2 *", "UTC", "2023-01-01T00:00", ["2024-02-29T00:00"]),
    ("0 0 L * *", "UTC", "2024-02-01T00:00", ["2024-02-29T00:00"]),
    ("0 0 * * 5L", "UTC", "2024-03-01T00:00", ["2024-03-29T00:00"]),
    ("0 0 * * 1#2", "UTC", "2024-04-01T00:00", ["2024-04-08T00:00"]),
    ("0 0 */10 * 0", "UTC", "2024-02-01T00:00", ["2024-02-11T00:00"]),
    ("0 0 1 * 1", "UTC", "2024-01-31T00:00", ["2024-02-01T00:00", "2024-02-05T00:00"]),
]


@pytest.mark.parametrize(
    ("expression", "zone", "after", "expected"),
    [pytest.param(*case, id=f"{case[1]}:{case[0]}:{case[2]}") for case in LITERAL_CASES],
)
def test_literal_expectations(expression: str, zone: str, after: str, expected: list[str]) -> None:
    schedule = cron.CronSchedule.parse(expression, zone)
    assert schedule.preview(utc(after), len(expected)) == [utc(text) for text in expected]


def test_leap_day_schedule_waits_four_years() -> None:
    schedule = cron.CronSchedule.parse("0 0 29 2 *")
    assert schedule.preview(utc("2024-03-01T00:00"), 2) == [
        utc("2028-02-29T00:00"),
        utc("2032-02-29T00:00"),
    ]


def test_fifth_monday_of_february_is_rare_but_valid() -> None:
    schedule = cron.CronSchedule.parse("0 0 * feb mon#5")
    assert schedule.next_after(utc("2017-01-01T00:00")) == utc("2044-02-29T00:00")


@pytest.mark.parametrize(
    "expression",
    ["0 0 31 2 *", "0 0 30 2 *", "0 0 30,31 feb *", "0 0 31 4,6,9,11 *", "0 0 31 2 */1"],
)
def test_impossible_dates_are_refused(expression: str) -> None:
    with pytest.raises(cron.CronError, match="never fires") as caught:
        cron.CronSchedule.parse(expression)
    assert caught.value.field == "expression"


def test_gap_run_and_regular_run_are_one_instant() -> None:
    schedule = cron.CronSchedule.parse("0,30 2,3 * * *", "Europe/Berlin")
    fires = schedule.between(utc("2024-03-30T23:00"), utc("2024-03-31T03:00"))
    # 02:00 and 02:30 do not exist; they collapse into 03:00, which is also a match.
    assert fires == [utc("2024-03-31T01:00"), utc("2024-03-31T01:30")]


def test_next_after_a_gap_run_moves_on() -> None:
    schedule = cron.CronSchedule.parse("0,30 2 * * *", "Europe/Berlin")
    assert schedule.next_after(utc("2024-03-31T01:00")) == utc("2024-04-01T00:00")


def test_wildcard_overlap_from_inside_the_second_pass() -> None:
    schedule = cron.CronSchedule.parse("*/15 * * * *", "Europe/Berlin")
    # 01:20Z is 02:20 CET, the second pass through 02:xx.
    assert schedule.preview(utc("2024-10-27T01:20"), 3) == [
        utc("2024-10-27T01:30"),
        utc("2024-10-27T01:45"),
        utc("2024-10-27T02:00"),
    ]


def test_fixed_overlap_from_inside_the_second_pass_waits_a_day() -> None:
    schedule = cron.CronSchedule.parse("45 2 * * *", "Europe/Berlin")
    assert schedule.next_after(utc("2024-10-27T01:20")) == utc("2024-10-28T01:45")


def test_reference_agrees_with_itself_on_a_literal() -> None:
    # Guards the guard: the reference must produce the hand-computed answer.
    assert reference_fires(
        "30 2 * * *", "Europe/Berlin", utc("2024-03-30T12:00"), utc("2024-03-31T12:00")
    ) == [utc("2024-03-31T01:00")]
