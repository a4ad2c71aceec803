"""Property tests for ``tickwork.core.cron`` over generated expressions and zones.

The expected fire times come from the independent reading of cron text in
tests/cron_reference.py, shared with the DST suite.
"""

from __future__ import annotations

import itertools
from datetime import UTC, datetime, timedelta

import cron_reference
from cron_reference import MACROS, MINUTE, reference_fires
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from tickwork.core import cron

MINUTE_PIECES = ["*", "*/15", "0", "30", "0,30", "5-50/15", "*/7", "59", "0-4"]
HOUR_PIECES = ["*", "*/3", "2", "1-3", "0,12", "2,3", "*/5", "9-17", "0-23/2", "1", "0"]
DAY_PIECES = ["*", "1", "15", "L", "*/10", "1-7", "29", "31", "1,L", "30"]
MONTH_PIECES = ["*", "2", "3,10", "*/4", "jan-jun", "11", "feb", "4,9-11"]
WEEKDAY_PIECES = ["*", "0", "1-5", "5L", "1#2", "mon,fri", "*/2", "0#1", "sun#5,3", "7", "6L,1"]
# Besides the usual changes: a skipped day, a change at midnight, and a two-hour one.
ZONES = [*cron_reference.ZONES, "Pacific/Apia", "America/Sao_Paulo", "Antarctica/Troll"]
# Instants near transitions (UTC), where mistakes live.
ANCHORS = [
    datetime(2024, 3, 31, 1, tzinfo=UTC),
    datetime(2024, 10, 27, 1, tzinfo=UTC),
    datetime(2024, 3, 10, 7, tzinfo=UTC),
    datetime(2024, 11, 3, 6, tzinfo=UTC),
    datetime(2024, 10, 5, 15, 30, tzinfo=UTC),
    datetime(2024, 4, 6, 15, tzinfo=UTC),
    datetime(2011, 12, 30, 10, tzinfo=UTC),
    datetime(2018, 11, 4, 3, tzinfo=UTC),
    datetime(2019, 2, 17, 2, tzinfo=UTC),
    datetime(2024, 4, 7, 3, tzinfo=UTC),
    datetime(2024, 9, 8, 4, tzinfo=UTC),
]


def explains(instant: datetime, expression: str, zone: str) -> bool:
    """True if ``instant`` is a matching wall time, or the end of a gap holding one."""
    return reference_fires(expression, zone, instant - MINUTE, instant) == [instant]


expressions = st.tuples(
    st.sampled_from(MINUTE_PIECES),
    st.sampled_from(HOUR_PIECES),
    st.sampled_from(DAY_PIECES),
    st.sampled_from(MONTH_PIECES),
    st.sampled_from(WEEKDAY_PIECES),
).map(" ".join)

instants = st.one_of(
    st.builds(
        lambda anchor, minutes, seconds: anchor + timedelta(minutes=minutes, seconds=seconds),
        st.sampled_from(ANCHORS),
        st.integers(-36 * 60, 36 * 60),
        st.integers(0, 59),
    ),
    st.datetimes(
        min_value=datetime(1995, 1, 1), max_value=datetime(2040, 1, 1), timezones=st.just(UTC)
    ),
)


def schedule_or_skip(expression: str, zone: str) -> cron.CronSchedule:
    try:
        return cron.CronSchedule.parse(expression, zone)
    except cron.CronError as error:
        assert "never fires" in str(error), error
        assume(False)
        raise


@settings(max_examples=200, deadline=None)
@given(expression=expressions, zone=st.sampled_from(ZONES), after=instants)
def test_fires_increase_and_are_explained(expression: str, zone: str, after: datetime) -> None:
    schedule = schedule_or_skip(expression, zone)
    fires = schedule.preview(after, 6)
    assert fires, "every accepted schedule fires again before year 9999"
    assert all(fire.tzinfo is UTC for fire in fires)
    assert after < fires[0]
    assert all(a < b for a, b in itertools.pairwise(fires))
    for fire in fires:
        assert explains(fire, expression, zone), fire
        # Nothing fires between a second before a fire and the fire itself.
        assert schedule.next_after(fire - timedelta(seconds=1)) == fire


@settings(max_examples=120, deadline=None)
@given(
    expression=st.tuples(
        st.sampled_from(MINUTE_PIECES),
        st.sampled_from(HOUR_PIECES),
        st.sampled_from(["*", "1", "L", "*/10"]),
        st.just("*"),
        st.sampled_from(["*", "1-5", "0", "*/2", "6L"]),
    ).map(" ".join),
    zone=st.sampled_from(ZONES),
    anchor=st.sampled_from(ANCHORS),
    minutes=st.integers(-24 * 60, 24 * 60),
)
def test_no_fire_is_missed_near_transitions(
    expression: str, zone: str, anchor: datetime, minutes: int
) -> None:
    schedule = cron.CronSchedule.parse(expression, zone)
    start = anchor + timedelta(minutes=minutes)
    end = start + timedelta(hours=30)
    assert schedule.between(start, end) == reference_fires(expression, zone, start, end)


# Zones that change their clocks at midnight, where the macros' fire times live.
MIDNIGHT_ZONES = ["America/Havana", "America/Santiago", "America/Asuncion", "Asia/Beirut"]
MIDNIGHT_ANCHORS = [
    datetime(2018, 3, 11, 5, tzinfo=UTC),  # Havana: 00:00 does not exist
    datetime(2018, 11, 4, 5, tzinfo=UTC),  # Havana: 00:00-00:59 twice
    datetime(2018, 8, 12, 4, tzinfo=UTC),  # Santiago: 00:00 does not exist
    datetime(2018, 3, 24, 22, tzinfo=UTC),  # Beirut: 00:00 does not exist
    datetime(2018, 10, 27, 21, tzinfo=UTC),  # Beirut: 23:00-23:59 twice
    datetime(2019, 1, 1, 3, tzinfo=UTC),
]

macros = st.builds(
    lambda name, upper, before, after: (
        before + "".join(c.upper() if up else c for c, up in zip(name, upper, strict=False)) + after
    ),
    st.sampled_from(sorted(MACROS)),
    st.lists(st.booleans(), min_size=9, max_size=9),
    st.sampled_from(["", " ", "\t"]),
    st.sampled_from(["", " ", " \t"]),
)


@settings(max_examples=60, deadline=None)
@given(
    written=macros,
    zone=st.sampled_from(ZONES + MIDNIGHT_ZONES),
    anchor=st.sampled_from(ANCHORS + MIDNIGHT_ANCHORS),
    minutes=st.integers(-48 * 60, 48 * 60),
)
def test_a_macro_fires_exactly_when_its_five_fields_do(
    written: str, zone: str, anchor: datetime, minutes: int
) -> None:
    fields = MACROS[written.strip(" \t").lower()]
    schedule = cron.CronSchedule.parse(written, zone)
    start = anchor + timedelta(minutes=minutes)
    end = start + timedelta(hours=30)
    assert schedule.between(start, end) == reference_fires(fields, zone, start, end)
    fires = schedule.preview(start, 3)
    assert fires == cron.CronSchedule.parse(fields, zone).preview(start, 3)
    assert all(explains(fire, fields, zone) for fire in fires)
