"""A schedule's next fire times, each marked where DST moves or repeats the local clock.

The instants are ``CronSchedule.preview``'s, under the schedule's own DST policy: this
module never decides when a job fires. It asks the zone what the local clock did
between one fire time and the next, and asks the schedule whether it fires at the other
occurrence of a repeated local time, so the marks cannot disagree with what the
scheduler will do.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, tzinfo
from typing import Final

from tickwork.core import zones
from tickwork.core.cron import CronSchedule, DstSkipped

_SECOND: Final = timedelta(seconds=1)
# How many local times a note names before it says "and N more".
_NAMED: Final = 3


class Mark(enum.StrEnum):
    gap = "gap"  # local times did not exist (spring forward) just before this fire time
    overlap = "overlap"  # this local time happens twice (fall back)
    shift = "shift"  # the zone's offset changed since the previous fire time


@dataclass(frozen=True, slots=True)
class FireTime:
    instant: datetime  # UTC
    local: datetime  # the same instant in the schedule's zone
    mark: Mark | None = None
    note: str | None = None


def fire_times(schedule: CronSchedule, after: datetime, count: int) -> list[FireTime]:
    """The next ``count`` fire times after ``after``, marked."""
    previous = after.astimezone(UTC)
    marked = []
    for instant in schedule.preview(after, count):
        marked.append(_marked(schedule, previous, instant))
        previous = instant
    return marked


def _clock(value: datetime) -> str:
    return value.strftime("%H:%M")


def _names(walls: list[datetime]) -> str:
    named = ", ".join(_clock(wall) for wall in walls[:_NAMED])
    if len(walls) > _NAMED:
        named += f" and {len(walls) - _NAMED} more"
    return named


def _hours(delta: timedelta) -> str:
    minutes = abs(int(delta.total_seconds())) // 60
    hours, rest = divmod(minutes, 60)
    return f"{hours} h" if not rest else f"{hours} h {rest} min"


def _transition(before: datetime, after: datetime, zone: tzinfo) -> datetime:
    """The first instant in ``(before, after]`` with ``after``'s offset (to the second)."""
    target = zones.offset(after, zone)
    return zones.first_second(before, after, lambda at: zones.offset(at, zone) == target)


def _fires_at(schedule: CronSchedule, instant: datetime) -> bool:
    return schedule.next_after(instant - _SECOND) == instant


def _marked(schedule: CronSchedule, previous: datetime, instant: datetime) -> FireTime:
    zone = schedule.tzinfo
    local = instant.astimezone(zone)
    wall = local.replace(tzinfo=None)
    first = wall.replace(tzinfo=zone, fold=0).astimezone(UTC)
    second = wall.replace(tzinfo=zone, fold=1).astimezone(UTC)
    if first < second:
        return _overlap(schedule, instant, local, first, second)
    before, now = zones.offset(previous, zone), zones.offset(instant, zone)
    if now > before:
        return _gap(schedule, previous, instant, local, before, now)
    if now < before:
        day = instant.astimezone(zone).strftime("%a %d %b")
        note = f"clocks went back {_hours(before - now)} by {day} since the previous fire time"
        return FireTime(instant, local, Mark.shift, note)
    return FireTime(instant, local)


def _overlap(
    schedule: CronSchedule,
    instant: datetime,
    local: datetime,
    first: datetime,
    second: datetime,
) -> FireTime:
    is_first = instant == first
    other = second if is_first else first
    which = "first" if is_first else "second"
    day = local.strftime("%a %d %b")
    note = f"{_clock(local)} happens twice on {day} (clocks go back)"
    if _fires_at(schedule, other):
        note += f"; runs at both, this is the {which} ({local.tzname()})"
    else:
        note += f"; runs once, at the {which} ({local.tzname()})"
    return FireTime(instant, local, Mark.overlap, note)


def _gap(
    schedule: CronSchedule,
    previous: datetime,
    instant: datetime,
    local: datetime,
    before: timedelta,
    now: timedelta,
) -> FireTime:
    change = _transition(previous, instant, schedule.tzinfo)
    # The local times the clock jumped over: [change + old offset, change + new offset).
    start = (change + before).replace(tzinfo=None)
    end = (change + now).replace(tzinfo=None)
    # Which of them the cron fields name: the same expression read where no DST exists.
    fields = CronSchedule.parse(schedule.expression, "UTC")
    window = (start.replace(tzinfo=UTC) - _SECOND, end.replace(tzinfo=UTC) - _SECOND)
    missing = [moment.replace(tzinfo=None) for moment in fields.between(*window)]
    jump = f"clocks go forward {_clock(start)} → {_clock(end)}"
    day = start.strftime("%a %d %b")
    if not missing:
        note = f"clocks went forward {_hours(now - before)} on {day} since the previous fire time"
        return FireTime(instant, local, Mark.shift, note)
    verb = "does" if len(missing) == 1 else "do"
    gone = f"{_names(missing)} {verb} not exist on {day} ({jump})"
    if instant != change:
        return FireTime(instant, local, Mark.gap, f"{gone}; not run")
    if not _fires_at(fields, local.replace(tzinfo=UTC)):
        # This instant is no time the fields name: it is the gap's run, moved.
        return FireTime(instant, local, Mark.gap, f"{gone}; runs at {_clock(local)} instead")
    # The end of the gap is also a time of its own: the gap's run folded into it
    # (skipped: shift), or the gap was not run (skipped: skip).
    outcome = "folded into this run" if schedule.dst.skipped is DstSkipped.shift else "not run"
    return FireTime(instant, local, Mark.gap, f"{gone}; {outcome}")
