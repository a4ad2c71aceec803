"""A job's DST policy (``schedule.dst``): ``repeated`` first | last | both, ``skipped``
shift | skip, checked against an independent minute walk (hundreds of generated jobs
around real clock changes; the documented examples, the preview's notes and the spec's
field are checked in tests/unit/test_cron_dst_policy.py).

The oracle walks every UTC minute of a window around a clock change, reads each as a
wall time in the zone with ``zoneinfo`` and decides from first principles: a wall time
shown at one instant fires there; one shown at two instants fires at the first, the
last or both; one shown at no instant (the clock jumped over it) fires at the first
instant after the jump (shift) or not at all (skip). It never asks ``CronSchedule``,
nor reads ``fold``: wall times are matched by the independent reading of cron text in
tests/cron_reference.py.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import pytest
from cron_reference import MACROS, MINUTE, Matcher
from hypothesis import given, settings
from hypothesis import strategies as st
from unit.test_cron_dst_policy import schedule, utc

from tickwork.core import zones
from tickwork.core.cron import DstRepeated, DstSkipped

# Wide enough that the other occurrence of any wall time shown in the window, and any
# jump of the clock next to it, is seen (no zone's offset changes by more than 26 h).
MARGIN = timedelta(days=2)
BERLIN = "Europe/Berlin"

COMBINATIONS = [(repeated, skipped) for repeated in DstRepeated for skipped in DstSkipped]

# (zone, an instant of a clock change in UTC): forward and back, by an hour, half an
# hour, two hours and a whole day, at 02:00, at midnight and elsewhere.
CHANGES = [
    ("Europe/Berlin", datetime(2026, 3, 29, 1, tzinfo=UTC)),
    ("Europe/Berlin", datetime(2026, 10, 25, 1, tzinfo=UTC)),
    ("America/New_York", datetime(2026, 3, 8, 7, tzinfo=UTC)),
    ("America/New_York", datetime(2026, 11, 1, 6, tzinfo=UTC)),
    ("Australia/Lord_Howe", datetime(2024, 4, 6, 15, tzinfo=UTC)),
    ("Australia/Lord_Howe", datetime(2024, 10, 5, 15, 30, tzinfo=UTC)),
    ("Antarctica/Troll", datetime(2024, 3, 31, 1, tzinfo=UTC)),
    ("Antarctica/Troll", datetime(2024, 10, 27, 1, tzinfo=UTC)),
    ("America/Havana", datetime(2018, 3, 11, 5, tzinfo=UTC)),
    ("America/Havana", datetime(2018, 11, 4, 5, tzinfo=UTC)),
    ("America/Sao_Paulo", datetime(2018, 11, 4, 3, tzinfo=UTC)),
    ("America/Sao_Paulo", datetime(2019, 2, 17, 2, tzinfo=UTC)),
    ("Pacific/Apia", datetime(2011, 12, 30, 10, tzinfo=UTC)),
    ("America/Santiago", datetime(2024, 4, 7, 3, tzinfo=UTC)),
]

MINUTE_PIECES = ["0", "30", "0,30", "*/15", "15,45", "*/20", "59", "0-4"]
HOUR_PIECES = ["*", "*/2", "*/3", "0", "1", "2", "1-3", "2,3", "0,12", "0-23/2", "23"]
WEEKDAY_PIECES = ["*", "0", "1-5", "0,6"]


def matcher(expression: str) -> tuple[bool, Callable[[datetime], bool]]:
    """(fixed hour, predicate over naive wall times)."""
    found = Matcher.of(MACROS.get(expression, expression))
    return found.fixed_hour, found.matches


def oracle(
    expression: str,
    zone: str,
    repeated: DstRepeated | None,
    skipped: DstSkipped | None,
    start: datetime,
    end: datetime,
) -> list[datetime]:
    """The fire instants in ``(start, end]``, from every UTC minute around them."""
    fixed_hour, matches = matcher(expression)
    # The documented defaults: a fixed hour runs once a day, a '*' hour keeps real time.
    repeated = repeated or (DstRepeated.first if fixed_hour else DstRepeated.both)
    skipped = skipped or (DstSkipped.shift if fixed_hour else DstSkipped.skip)
    tz = zones.get(zone)
    shown: dict[datetime, list[datetime]] = defaultdict(list)
    jumps: list[tuple[datetime, datetime, datetime]] = []  # (first wall skipped, wall, at)
    instant = (start - MARGIN).replace(second=0, microsecond=0)
    previous: datetime | None = None
    while instant <= end + MARGIN:
        wall = instant.astimezone(tz).replace(tzinfo=None)
        shown[wall].append(instant)
        if previous is not None and wall - previous > MINUTE:
            jumps.append((previous + MINUTE, wall, instant))
        previous = wall
        instant += MINUTE

    fires: set[datetime] = set()
    for wall, instants in shown.items():
        if not matches(wall):
            continue
        if len(instants) == 1 or repeated is DstRepeated.both:
            fires.update(instants)
        elif repeated is DstRepeated.first:
            fires.add(min(instants))
        else:
            fires.add(max(instants))
    if skipped is DstSkipped.shift:
        for missing, until, after_jump in jumps:
            while missing < until:
                if missing not in shown and matches(missing):
                    fires.add(after_jump)  # the first instant after the gap
                    break
                missing += MINUTE
    return sorted(fire for fire in fires if start < fire <= end)


# --- the oracle, on the documented defaults ---------------------------------------------


def test_the_oracle_agrees_with_the_documented_examples() -> None:
    spring = (utc("2024-03-30T23:00:00Z"), utc("2024-03-31T22:00:00Z"))
    assert oracle("30 2 * * *", BERLIN, None, None, *spring) == [utc("2024-03-31T01:00:00Z")]
    assert oracle("0,30 2 * * *", BERLIN, None, None, *spring) == [utc("2024-03-31T01:00:00Z")]
    assert oracle("0 2,3 * * *", BERLIN, None, None, *spring) == [utc("2024-03-31T01:00:00Z")]
    fall = (utc("2024-10-26T23:30:00Z"), utc("2024-10-27T02:30:00Z"))
    assert oracle("0 * * * *", BERLIN, None, None, *fall) == [
        utc(f"2024-10-27T0{hour}:00:00Z") for hour in range(3)
    ]
    new_york = (utc("2024-11-03T04:00:00Z"), utc("2024-11-03T08:00:00Z"))
    assert oracle("30 1 * * *", "America/New_York", None, None, *new_york) == [
        utc("2024-11-03T05:30:00Z")
    ]


# --- every combination against the minute walk ------------------------------------------


expressions = st.one_of(
    st.tuples(
        st.sampled_from(MINUTE_PIECES),
        st.sampled_from(HOUR_PIECES),
        st.just("*"),
        st.just("*"),
        st.sampled_from(WEEKDAY_PIECES),
    ).map(" ".join),
    st.sampled_from(["@daily", "@hourly", "@weekly"]),  # the macros a window can see fire
)
windows = st.tuples(
    st.sampled_from(CHANGES),
    st.integers(-20 * 60, 4 * 60),  # minutes from the change to the window's start
    st.integers(60, 30 * 60),  # the window's length in minutes
    st.integers(0, 59),  # seconds: a window need not start on a minute
)


@pytest.mark.parametrize(("repeated", "skipped"), COMBINATIONS, ids=lambda v: str(v))
@settings(max_examples=40, deadline=None)
@given(expression=expressions, window=windows)
def test_each_combination_fires_exactly_where_the_minute_walk_says(
    repeated: DstRepeated,
    skipped: DstSkipped,
    expression: str,
    window: tuple[tuple[str, datetime], int, int, int],
) -> None:
    (zone, change), offset, length, seconds = window
    start = change + timedelta(minutes=offset, seconds=seconds)
    end = start + timedelta(minutes=length)
    expected = oracle(expression, zone, repeated, skipped, start, end)
    parsed = schedule(expression, zone, repeated, skipped)
    assert parsed.between(start, end) == expected, (expression, zone, start, end)
    # Each fire time is also what next_after finds from a second before it.
    for fire in expected:
        assert parsed.next_after(fire - timedelta(seconds=1)) == fire


@settings(max_examples=60, deadline=None)
@given(expression=expressions, window=windows)
def test_no_policy_is_the_hour_fields_rule(
    expression: str, window: tuple[tuple[str, datetime], int, int, int]
) -> None:
    (zone, change), offset, length, seconds = window
    start = change + timedelta(minutes=offset, seconds=seconds)
    end = start + timedelta(minutes=length)
    default = schedule(expression, zone)
    assert default.between(start, end) == oracle(expression, zone, None, None, start, end)
    fixed_hour = matcher(expression)[0]
    named = schedule(
        expression,
        zone,
        DstRepeated.first if fixed_hour else DstRepeated.both,
        DstSkipped.shift if fixed_hour else DstSkipped.skip,
    )
    assert named == default  # the same schedule, not just the same times
    assert named.between(start, end) == default.between(start, end)
