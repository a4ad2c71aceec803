"""Parsing, validation and the shape of the ``tickwork.core.cron`` API."""

from __future__ import annotations

import pickle
from datetime import UTC, datetime, timedelta, timezone

import pytest

from tickwork.core import cron


def utc(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


@pytest.mark.parametrize(
    ("expression", "field", "fragment"),
    [
        ("* * * *", "expression", "has 4 fields, expected 5"),
        ("* * * * * *", "expression", "has 6 fields, expected 5"),
        ("", "expression", "has 0 fields"),
        ("@reboot", "expression", "tickwork has no boot"),
        ("@every 5m", "expression", "write it as the cron step '*/5 * * * *'"),
        ("@fortnightly", "expression", "unknown macro '@fortnightly'"),
        ("@daily 0", "expression", "a macro stands for all five fields"),
        ("60 * * * *", "minute", "60 is out of range 0-59"),
        ("0 24 * * *", "hour", "24 is out of range 0-23"),
        ("0 0 0 * *", "day-of-month", "0 is out of range 1-31"),
        ("0 0 32 * *", "day-of-month", "32 is out of range 1-31"),
        ("0 0 * 13 *", "month", "13 is out of range 1-12"),
        ("0 0 * 0 *", "month", "0 is out of range 1-12"),
        ("0 0 * * 8", "day-of-week", "8 is out of range 0-7"),
        ("0 0 * foo *", "month", "'foo' is not a value"),
        ("0 0 * * funday", "day-of-week", "'funday' is not a value"),
        ("0 0 * jan-foo *", "month", "'foo' in 'jan-foo' is not a value"),
        ("10-5 * * * *", "minute", "range '10-5' runs backwards"),
        ("0 22-2 * * *", "hour", "range '22-2' runs backwards"),
        ("0 0 * * sat-sun", "day-of-week", "range 'sat-sun' runs backwards"),
        ("*/0 * * * *", "minute", "step 0"),
        ("5/15 * * * *", "minute", "a step needs a range or '*'"),
        ("1,,2 * * * *", "minute", "empty list item"),
        ("0 0 ? * *", "day-of-month", "cannot read '?'"),
        ("0 0 15W * *", "day-of-month", "cannot read '15W'"),
        ("H * * * *", "minute", "'H' is not a value"),
        ("0 0 * * 1#6", "day-of-week", "week number must be 1-5"),
        ("0 0 * * 1#0", "day-of-week", "week number must be 1-5"),
        ("0 0 * * 8L", "day-of-week", "8 in '8L' is out of range 0-7"),
        ("0 0 * * L", "day-of-week", "'L' needs a weekday"),
        ("0 0 L-2 * *", "day-of-month", "or 'L' as a list item of its own"),
        ("0 0 * L *", "month", "'L' is not a value"),
        ("0 0 31 2 *", "expression", "never fires"),
        ("-1 * * * *", "minute", "cannot read '-1'"),
    ],
)
def test_invalid_expressions_name_the_problem(expression: str, field: str, fragment: str) -> None:
    with pytest.raises(cron.CronError) as caught:
        cron.CronSchedule.parse(expression)
    assert fragment in str(caught.value)
    assert caught.value.field == field
    if field != "expression":
        assert f"{field} field" in str(caught.value)


def test_cron_error_is_a_value_error() -> None:
    with pytest.raises(ValueError, match="out of range"):
        cron.validate("61 * * * *")


@pytest.mark.parametrize("zone", ["Mars/Olympus_Mons", "Europe/berlin", "", "../etc/passwd"])
def test_unknown_zone_is_named(zone: str) -> None:
    with pytest.raises(cron.CronError, match="unknown time zone") as caught:
        cron.CronSchedule.parse("0 0 * * *", zone)
    assert caught.value.field == "zone"
    assert repr(zone) in str(caught.value)


def test_machine_local_zone_is_refused() -> None:
    with pytest.raises(cron.CronError, match="not a place"):
        cron.validate("0 0 * * *", "localtime")


@pytest.mark.parametrize(
    "expression",
    [
        "* * * * *",
        "*/15 * * * *",
        "0 9-17 * * 1-5",
        "0 0 1,15 * *",
        "30 2 * * *",
        "0 0 L * *",
        "0 0 * * 5L",
        "0 0 * * friL",
        "0 0 * * 1#2",
        "0 0 * * MON#1,fri#5",
        "0 0 * * 1,3,5L",
        "0 12 * JAN-MAR,dec Mon-Fri",
        "0 0 * * 7",
        "0 0 * * 0-7/7",
        "0-59/20 */2 1-31/3 */2 *",
        "0 0 29 2 *",
        "0 0 31 2 1",
    ],
)
def test_valid_expressions_are_accepted(expression: str) -> None:
    cron.validate(expression, "Europe/Berlin")


def test_fixed_hour_is_read_from_the_hour_field_text() -> None:
    assert cron.CronSchedule.parse("0 2 * * *").fixed_hour
    assert cron.CronSchedule.parse("0 9-17 * * *").fixed_hour
    assert cron.CronSchedule.parse("0 0-23 * * *").fixed_hour
    assert not cron.CronSchedule.parse("0 * * * *").fixed_hour
    assert not cron.CronSchedule.parse("0 */3 * * *").fixed_hour


def test_schedule_is_a_value() -> None:
    first = cron.CronSchedule.parse("0  2 * *\t*", "Europe/Berlin")
    second = cron.CronSchedule.parse("0 2 * * *", "Europe/Berlin")
    assert first.expression == "0 2 * * *"
    assert first.zone == "Europe/Berlin"
    assert first == second
    assert hash(first) == hash(second)
    assert first != cron.CronSchedule.parse("0 2 * * *", "UTC")
    with pytest.raises(AttributeError):
        first.zone = "UTC"  # type: ignore[misc]
    assert pickle.loads(pickle.dumps(first)) == first


def test_sunday_is_zero_and_seven() -> None:
    after = utc("2024-01-01T00:00")
    sundays = cron.CronSchedule.parse("0 0 * * 0").preview(after, 3)
    assert cron.CronSchedule.parse("0 0 * * 7").preview(after, 3) == sundays
    assert cron.CronSchedule.parse("0 0 * * sun").preview(after, 3) == sundays


@pytest.mark.parametrize("method", ["next_after", "iter_after", "preview"])
def test_naive_datetimes_are_refused(method: str) -> None:
    schedule = cron.CronSchedule.parse("0 0 * * *")
    naive = datetime(2024, 1, 1)
    with pytest.raises(ValueError, match="timezone-aware"):
        if method == "next_after":
            schedule.next_after(naive)
        elif method == "iter_after":
            next(schedule.iter_after(naive))
        else:
            schedule.preview(naive, 1)


def test_between_refuses_a_naive_end() -> None:
    schedule = cron.CronSchedule.parse("0 0 * * *")
    with pytest.raises(ValueError, match="end must be"):
        schedule.between(utc("2024-01-01T00:00"), datetime(2024, 2, 1))


def test_next_after_is_strict_and_answers_in_utc() -> None:
    schedule = cron.CronSchedule.parse("30 9 * * *", "Asia/Kolkata")
    first = schedule.next_after(utc("2024-06-01T00:00"))
    assert first == utc("2024-06-01T04:00")
    assert first is not None and first.tzinfo is UTC
    assert schedule.next_after(first) == utc("2024-06-02T04:00")
    # Any aware instant works, whatever its zone.
    kolkata = timezone(timedelta(hours=5, minutes=30))
    assert schedule.next_after(datetime(2024, 6, 1, 9, 29, tzinfo=kolkata)) == first


def test_next_after_ignores_seconds_but_stays_strict() -> None:
    schedule = cron.CronSchedule.parse("* * * * *")
    assert schedule.next_after(utc("2024-01-01T00:00:30")) == utc("2024-01-01T00:01")
    assert schedule.next_after(utc("2024-01-01T00:00:00.000001")) == utc("2024-01-01T00:01")


def test_between_is_half_open() -> None:
    schedule = cron.CronSchedule.parse("0 * * * *")
    fires = schedule.between(utc("2024-01-01T00:00"), utc("2024-01-01T03:00"))
    assert fires == [utc("2024-01-01T01:00"), utc("2024-01-01T02:00"), utc("2024-01-01T03:00")]
    assert schedule.between(utc("2024-01-01T03:00"), utc("2024-01-01T03:00")) == []


def test_preview_and_iter_after_agree() -> None:
    schedule = cron.CronSchedule.parse("*/7 3 * * 1-5", "America/New_York")
    after = utc("2024-03-08T00:00")
    iterator = schedule.iter_after(after)
    assert [next(iterator) for _ in range(20)] == schedule.preview(after, 20)
    assert schedule.preview(after, 0) == []
    with pytest.raises(ValueError, match="count"):
        schedule.preview(after, -1)


def test_the_end_of_the_calendar_is_none() -> None:
    schedule = cron.CronSchedule.parse("0 0 1 1 *")
    assert schedule.next_after(utc("9999-06-01T00:00")) is None
    assert (
        cron.CronSchedule.parse("* * * * *", "Pacific/Kiritimati").next_after(
            datetime(9999, 12, 31, 23, 59, tzinfo=UTC)
        )
        is None
    )
    assert schedule.preview(utc("9998-06-01T00:00"), 5) == [utc("9999-01-01T00:00")]


def test_validate_accepts_silently() -> None:
    cron.validate("0 0 * * *")
    cron.validate("0 0 * * *", "Pacific/Apia")
