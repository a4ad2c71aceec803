"""DST and calendar suite for ``tickwork.core.cron``.

Expected instants do not come from croniter: the brute-force reference of
tests/cron_reference.py walks every UTC minute of a window, reads it as local wall time
in the zone and applies the rules of docs/cron.md with its own small matcher.
Hand-written literals pin the rules down independently of both. The calendar rules over
windows of months, a walk too long for this tier, are checked against the same
reference in tests/test_cron_dst.py.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from cron_reference import reference_fires

from tickwork.core import cron


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
