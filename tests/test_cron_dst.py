"""Calendar rules of ``tickwork.core.cron`` (``L``, ``#``, ``5L``, day-of-month with
day-of-week, names and steps) against the brute-force reference of
tests/cron_reference.py, over windows of several weeks: a walk of every minute of
them, too long for the unit tier.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from cron_reference import reference_fires
from unit.test_cron_dst import utc

from tickwork.core import cron

# Calendar rules, over windows of several weeks in a zone with DST and in UTC.
CALENDAR_CASES = [
    ("0 0 L * *", "UTC", "2024-01-15T00:00", 80),  # last day, leap February
    ("30 2 L * *", "Europe/Berlin", "2024-03-01T00:00", 70),  # L meets the March gap
    ("0 12 * * 5L", "America/New_York", "2024-01-01T00:00", 70),  # last Friday
    ("0 8 * * 1#2", "Europe/Berlin", "2024-01-01T00:00", 70),  # second Monday
    ("0 8 * * sun#1,fri#5", "UTC", "2024-01-01T00:00", 100),  # first Sunday, fifth Friday
    ("0 0 */10 * 0", "UTC", "2024-01-01T00:00", 120),  # DOM starts with '*': AND
    ("0 0 13 * 5", "UTC", "2024-09-01T00:00", 60),  # both restricted: OR
    ("0 0 */15 * mon", "UTC", "2024-01-01T00:00", 100),  # AND, days 1, 16, 31
    ("0 0 15 * */1", "UTC", "2024-01-01T00:00", 70),  # DOW starts with '*': AND
    ("0 0 1-7 * */7", "UTC", "2024-01-01T00:00", 70),  # AND: first Sunday only
    ("0 0 L * 5L", "Asia/Kolkata", "2024-01-01T00:00", 70),  # OR of L and 5L
    ("0 6 1,L * 1-5,6L", "Australia/Lord_Howe", "2024-03-01T00:00", 70),  # mixed lists
    ("0 0 29 2 *", "UTC", "2024-02-20T00:00", 15),  # leap day
    ("0 0 31 2 1", "UTC", "2024-01-25T00:00", 40),  # OR keeps the Mondays of February
    ("0 12 * jan-mar/2 sat", "Pacific/Apia", "2011-12-25T00:00", 100),  # names, step
]


@pytest.mark.parametrize(
    ("expression", "zone", "start_text", "days"),
    [pytest.param(*case, id=f"{case[1]}:{case[0]}") for case in CALENDAR_CASES],
)
def test_calendar_rules_match_brute_force_reference(
    expression: str, zone: str, start_text: str, days: int
) -> None:
    start = utc(start_text)
    end = start + timedelta(days=days)
    expected = reference_fires(expression, zone, start, end)
    assert expected, "a window without fires tests nothing"
    assert cron.CronSchedule.parse(expression, zone).between(start, end) == expected
