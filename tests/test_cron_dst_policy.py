"""A job's DST policy (``schedule.dst``): ``repeated`` first | last | both, ``skipped``
shift | skip, checked against an independent minute walk.

The oracle walks every UTC minute of a window around a clock change, reads each as a
wall time in the zone with ``zoneinfo`` and decides from first principles: a wall time
shown at one instant fires there; one shown at two instants fires at the first, the
last or both; one shown at no instant (the clock jumped over it) fires at the first
instant after the jump (shift) or not at all (skip). It never asks ``CronSchedule``,
nor reads ``fold``: the matcher is a small reading of cron text of its own (test
modules do not import each other).
"""

from __future__ import annotations

import pickle
from collections import defaultdict
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from tickwork.core import spec, zones
from tickwork.core.cron import CronSchedule, DstPolicy, DstRepeated, DstSkipped
from tickwork.core.preview import Mark, fire_times

MINUTE = timedelta(minutes=1)
# Wide enough that the other occurrence of any wall time shown in the window, and any
# jump of the clock next to it, is seen (no zone's offset changes by more than 26 h).
MARGIN = timedelta(days=2)
BERLIN = "Europe/Berlin"

COMBINATIONS = [(repeated, skipped) for repeated in DstRepeated for skipped in DstSkipped]
MACROS = {"@daily": "0 0 * * *", "@hourly": "0 * * * *", "@weekly": "0 0 * * 0"}

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


def values(text: str, low: int, high: int) -> set[int]:
    found: set[int] = set()
    for item in text.split(","):
        body, _, step = item.partition("/")
        if body == "*":
            first, last = low, high
        elif "-" in body:
            first, last = (int(part) for part in body.split("-"))
        else:
            first = last = int(body)
        found.update(range(first, last + 1, int(step or 1)))
    return found


def matcher(expression: str) -> tuple[bool, Callable[[datetime], bool]]:
    """(fixed hour, predicate over naive wall times) for minute, hour, day of month,
    month and day of week fields made of values, ranges, steps and lists."""
    fields = MACROS.get(expression, expression).split()
    minute, hour, day, month, weekday = fields
    minutes, hours = values(minute, 0, 59), values(hour, 0, 23)
    days, months = values(day, 1, 31), values(month, 1, 12)
    weekdays = {v % 7 for v in values(weekday, 0, 7)}
    either = not (day.startswith("*") or weekday.startswith("*"))

    def matches(wall: datetime) -> bool:
        if wall.minute not in minutes or wall.hour not in hours or wall.month not in months:
            return False
        by_day = wall.day in days
        by_weekday = (wall.isoweekday() % 7) in weekdays
        return (by_day or by_weekday) if either else (by_day and by_weekday)

    return not hour.startswith("*"), matches


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


def utc(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).astimezone(UTC)


def schedule(
    expression: str,
    zone: str = BERLIN,
    repeated: DstRepeated | None = None,
    skipped: DstSkipped | None = None,
) -> CronSchedule:
    return CronSchedule.parse(expression, zone, DstPolicy(repeated, skipped))


def fires(
    expression: str,
    start: str,
    end: str,
    repeated: DstRepeated | None = None,
    skipped: DstSkipped | None = None,
    zone: str = BERLIN,
) -> list[str]:
    times = schedule(expression, zone, repeated, skipped).between(utc(start), utc(end))
    return [time.strftime("%H:%MZ") for time in times]


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
    st.sampled_from(sorted(MACROS)),
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


# --- the worked example of docs/cron.md: Europe/Berlin, 2026 -----------------------------

SPRING = ("2026-03-28T23:00:00Z", "2026-03-29T22:00:00Z")  # Sunday 29 March, local day
FALL = ("2026-10-24T22:00:00Z", "2026-10-25T23:00:00Z")  # Sunday 25 October, local day


@pytest.mark.parametrize(
    ("repeated", "skipped", "spring", "fall"),
    [
        (None, None, ["01:00Z"], ["00:30Z"]),
        (DstRepeated.first, DstSkipped.shift, ["01:00Z"], ["00:30Z"]),
        (DstRepeated.last, DstSkipped.shift, ["01:00Z"], ["01:30Z"]),
        (DstRepeated.both, DstSkipped.shift, ["01:00Z"], ["00:30Z", "01:30Z"]),
        (DstRepeated.first, DstSkipped.skip, [], ["00:30Z"]),
        (DstRepeated.last, DstSkipped.skip, [], ["01:30Z"]),
        (DstRepeated.both, DstSkipped.skip, [], ["00:30Z", "01:30Z"]),
    ],
)
def test_a_nightly_job_at_0230_in_berlin(
    repeated: DstRepeated | None, skipped: DstSkipped | None, spring: list[str], fall: list[str]
) -> None:
    assert fires("30 2 * * *", *SPRING, repeated, skipped) == spring
    assert fires("30 2 * * *", *FALL, repeated, skipped) == fall


def test_an_hourly_job_in_berlin() -> None:
    # 25 October: 02:00 CEST (00:00Z), 02:00 CET (01:00Z), 03:00 CET (02:00Z).
    night = ("2026-10-24T23:30:00Z", "2026-10-25T02:30:00Z")
    assert fires("0 * * * *", *night) == ["00:00Z", "01:00Z", "02:00Z"]
    assert fires("0 * * * *", *night, DstRepeated.first) == ["00:00Z", "02:00Z"]
    assert fires("0 * * * *", *night, DstRepeated.last) == ["01:00Z", "02:00Z"]
    # 29 March: 01:00 CET (00:00Z), then 03:00 CEST (01:00Z); 02:00 does not exist.
    spring = ("2026-03-28T23:30:00Z", "2026-03-29T01:30:00Z")
    assert fires("0 * * * *", *spring) == ["00:00Z", "01:00Z"]
    assert fires("0 * * * *", *spring, skipped=DstSkipped.shift) == ["00:00Z", "01:00Z"]
    # Every 20 minutes: shift runs 02:00, 02:20, 02:40 once, together with 03:00.
    assert fires("*/20 * * * *", *spring, skipped=DstSkipped.shift) == [
        "23:40Z",
        "00:00Z",
        "00:20Z",
        "00:40Z",
        "01:00Z",
        "01:20Z",
    ]
    assert len(schedule("0 * * * *").between(utc(FALL[0]), utc(FALL[1]))) == 25
    first = schedule("0 * * * *", repeated=DstRepeated.first)
    assert len(first.between(utc(FALL[0]), utc(FALL[1]))) == 24


def test_several_gap_times_of_one_job_run_once_or_not_at_all() -> None:
    assert fires("0,30 2 * * *", *SPRING) == ["01:00Z"]
    assert fires("0,30 2 * * *", *SPRING, skipped=DstSkipped.skip) == []
    # 03:00 is a time of its own: skip drops only the 02:00 that does not exist.
    assert fires("0 2,3 * * *", *SPRING, skipped=DstSkipped.skip) == ["01:00Z"]
    assert fires("0 2,3 * * *", *SPRING) == ["01:00Z"]
    assert fires("0,30 2 * * *", *FALL, DstRepeated.last) == ["01:00Z", "01:30Z"]
    assert fires("0,30 2 * * *", *FALL, DstRepeated.both) == [
        "00:00Z",
        "00:30Z",
        "01:00Z",
        "01:30Z",
    ]


def test_macros_take_the_policy_too() -> None:
    # America/Havana changed its clocks at midnight: 00:00 did not exist on 11 March
    # 2018 and happened twice on 4 November 2018.
    havana = "America/Havana"
    march = ("2018-03-10T12:00:00Z", "2018-03-11T12:00:00Z")
    assert fires("@daily", *march, zone=havana) == ["05:00Z"]  # 01:00 CDT
    assert fires("@daily", *march, skipped=DstSkipped.skip, zone=havana) == []
    november = ("2018-11-03T12:00:00Z", "2018-11-04T12:00:00Z")
    assert fires("@daily", *november, zone=havana) == ["04:00Z"]  # the first, CDT
    assert fires("@daily", *november, DstRepeated.last, zone=havana) == ["05:00Z"]
    assert fires("@midnight", *november, DstRepeated.both, zone=havana) == ["04:00Z", "05:00Z"]
    night = ("2026-10-24T23:30:00Z", "2026-10-25T02:30:00Z")
    hourly = fires("@hourly", *night, DstRepeated.first)
    assert hourly == fires("0 * * * *", *night, DstRepeated.first) == ["00:00Z", "02:00Z"]
    assert schedule("@daily", havana, DstRepeated.last).macro == "@daily"


def test_a_policy_changes_the_schedule_and_survives_pickling() -> None:
    last = schedule("30 2 * * *", repeated=DstRepeated.last)
    assert last != schedule("30 2 * * *")
    assert last.dst == DstPolicy(DstRepeated.last, DstSkipped.shift)
    assert pickle.loads(pickle.dumps(last)) == last
    assert schedule("0 * * * *").dst == DstPolicy(DstRepeated.both, DstSkipped.skip)


# --- the preview's marks say what the policy did ----------------------------------------


def notes(expression: str, after: str, count: int, **policy: str) -> list[tuple[str, str | None]]:
    parsed = CronSchedule.parse(
        expression,
        BERLIN,
        DstPolicy(
            DstRepeated(policy["repeated"]) if "repeated" in policy else None,
            DstSkipped(policy["skipped"]) if "skipped" in policy else None,
        ),
    )
    return [
        (fire.instant.strftime("%m-%dT%H:%MZ"), fire.note)
        for fire in fire_times(parsed, utc(after), count)
        if fire.mark in (Mark.gap, Mark.overlap)
    ]


def test_the_preview_marks_what_each_policy_did() -> None:
    overlap = "02:30 happens twice on Sun 25 Oct (clocks go back)"
    assert notes("30 2 * * *", "2026-10-24T12:00:00Z", 2, repeated="last") == [
        ("10-25T01:30Z", f"{overlap}; runs once, at the second (CET)")
    ]
    assert notes("30 2 * * *", "2026-10-24T12:00:00Z", 3, repeated="both") == [
        ("10-25T00:30Z", f"{overlap}; runs at both, this is the first (CEST)"),
        ("10-25T01:30Z", f"{overlap}; runs at both, this is the second (CET)"),
    ]
    gap = "02:30 does not exist on Sun 29 Mar (clocks go forward 02:00 → 03:00)"
    assert notes("30 2 * * *", "2026-03-28T12:00:00Z", 2, skipped="skip") == [
        ("03-30T00:30Z", f"{gap}; not run")
    ]
    assert notes("30 2 * * *", "2026-03-28T12:00:00Z", 2) == [
        ("03-29T01:00Z", f"{gap}; runs at 03:00 instead")
    ]
    both_gone = "02:00, 02:30 do not exist on Sun 29 Mar (clocks go forward 02:00 → 03:00)"
    assert notes("*/30 * * * *", "2026-03-29T00:15:00Z", 3, skipped="shift") == [
        ("03-29T01:00Z", f"{both_gone}; folded into this run")
    ]
    assert notes("*/30 * * * *", "2026-03-29T00:15:00Z", 3) == [
        ("03-29T01:00Z", f"{both_gone}; not run")
    ]


# --- the JobSpec field -------------------------------------------------------------------


def test_the_spec_stores_a_policy_only_when_it_chooses_something() -> None:
    def stored(dst: object) -> dict[str, object]:
        schedule: dict[str, object] = {"cron": "30 2 * * *", "timeZone": BERLIN}
        if dst is not None:
            schedule["dst"] = dst
        document = spec.parse(spec.JobSpec, {"schedule": schedule}).to_stored()
        result: dict[str, object] = document["schedule"]
        return result

    assert "dst" not in stored(None)
    assert "dst" not in stored({})
    assert "dst" not in stored({"repeated": None})
    assert stored({"skipped": "skip"})["dst"] == {"skipped": "skip"}
    # As written, even a choice the hour field would make: an edit of cron keeps it.
    assert stored({"repeated": "first"})["dst"] == {"repeated": "first"}
    read = spec.JobSpec.model_validate(
        {"schedule": {"cron": "30 2 * * *", "dst": {"repeated": "last"}}}, context=spec.STORED
    )
    assert read.schedule is not None
    assert read.schedule.compile().dst == DstPolicy(DstRepeated.last, DstSkipped.shift)


@pytest.mark.parametrize(
    ("dst", "field"),
    [
        ({"repeated": "second"}, "schedule.dst.repeated"),
        ({"skipped": "skipped"}, "schedule.dst.skipped"),
        ({"repeated_": "first"}, "schedule.dst.repeated_"),
        (["first"], "schedule.dst"),
    ],
)
def test_the_spec_refuses_other_values_naming_the_field(dst: object, field: str) -> None:
    with pytest.raises(ValidationError) as raised:
        spec.parse(spec.JobSpec, {"schedule": {"cron": "30 2 * * *", "dst": dst}})
    assert [spec.error_field(error) for error in raised.value.errors()] == [field]
