"""Cron fire times: a Vixie cron expression read in an IANA zone, answered in UTC.

Everything here is pure: no clock is read, the instant is always a parameter and
must be timezone-aware. croniter does the calendar arithmetic on naive *local*
wall times; this module adds what the product promises on top of it (see
``docs/cron.md``):

* a strict Vixie grammar (the one ``docs/cron.md`` states, and a test compares
  with). croniter also accepts ``H``, ``W``, ``?``, 6 and 7 fields, wrapping ranges,
  and reads ``5-5`` as the whole field; a scheduler must refuse what it would
  otherwise have to guess, and name the field that is wrong. The expression is
  bounded and ASCII before any of it is read, so no input costs more than a few
  milliseconds;
* the day-of-month / day-of-week rule by field *text* (a field starting with
  ``*`` is unrestricted), expressed to croniter as a union of plain
  intersections so its own OR handling (which keeps ``#`` and ``L`` as
  intersections) is never used;
* the DST layer. croniter's own zone handling has known bugs, so it only ever
  sees naive wall times and each matching wall time is mapped to instants here;
* a job's DST policy (``DstPolicy``): which occurrence of a repeated local time
  fires and whether a local time inside a gap fires at the gap's end. Unset, each
  follows the hour field, as ``docs/cron.md`` says;
* Vixie's macros (``@daily`` ...), read as the five fields they stand for, so they
  follow the same DST rules. ``@reboot`` and ``@every`` are refused with what to
  write instead: tickwork has no boot, and fires at clock times, not intervals.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from itertools import islice
from types import MappingProxyType
from typing import Any, Final
from zoneinfo import ZoneInfo

from croniter import croniter
from croniter.croniter import CroniterError

from tickwork.core import limits, zones

__all__ = [
    "MACROS",
    "CronError",
    "CronSchedule",
    "DstPolicy",
    "DstRepeated",
    "DstSkipped",
    "expand",
    "validate",
]

# No zone's offset changes by more than 26 hours in total, so looking this far
# ahead (or back) of an instant is enough to see any fall-back that makes local
# wall time run backwards near it.
_OFFSET_HORIZON: Final = timedelta(hours=27)

# One search visits at most the matches in a window of about a day of wall time
# (the fall-back slack) plus one; a minutely job has 1440 matches a day.
_MAX_STEPS: Final = 10_000

# The 28 years from 2000 hold every one of the 14 kinds of Gregorian year (leap or
# not, times the weekday of 1 January), so a day pattern that matches no date in
# them -- 31 February, the 30th of February -- matches no date ever. 8 years would
# wrongly refuse "fifth Monday of February" (2016, then 2044).
_PROBE_START: Final = datetime(2000, 1, 1)
_PROBE_YEARS: Final = 28

_MINUTE: Final = timedelta(minutes=1)

_FIELD_NAMES: Final = ("minute", "hour", "day-of-month", "month", "day-of-week")
_BOUNDS: Final = ((0, 59), (0, 23), (1, 31), (1, 12), (0, 7))
_MONTH_NAMES: Final = {
    name: number
    for number, name in enumerate(
        ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"),
        start=1,
    )
}
_WEEKDAY_NAMES: Final = {
    name: number for number, name in enumerate(("sun", "mon", "tue", "wed", "thu", "fri", "sat"))
}
_NAMES: Final[tuple[dict[str, int], ...]] = ({}, {}, {}, _MONTH_NAMES, _WEEKDAY_NAMES)

# ASCII only: ``\d`` and ``str.isdigit`` would also take Arabic-Indic or full-width
# digits, which no other cron reads.
_VALUE: Final = r"([0-9]+|[a-zA-Z]+)"
_RANGE_RE: Final = re.compile(rf"{_VALUE}(?:-{_VALUE})?(?:/([0-9]+))?")
_STAR_RE: Final = re.compile(r"\*(?:/([0-9]+))?")
_LAST_WEEKDAY_RE: Final = re.compile(rf"{_VALUE}[lL]")
_NTH_WEEKDAY_RE: Final = re.compile(rf"{_VALUE}#([0-9]+)")
_DIGITS_RE: Final = re.compile(r"[0-9]+")
# Fields are separated by ASCII spaces and tabs only: a newline, a no-break or an em
# space between fields is a pasting accident, not a separator. Other printable ASCII
# is left to the field grammar, which names the field it is in.
_SEPARATOR_RE: Final = re.compile(r"[ \t]+")
_FOREIGN_RE: Final = re.compile(r"[^\x21-\x7e \t]")

# Vixie cron's macros and the five fields each stands for (cronie's entry.c sets the
# same bits). @hourly's hour field starts with '*' there too, so it keeps real-time
# cadence on DST nights while the others run once a day.
MACROS: Final[Mapping[str, str]] = MappingProxyType(
    {
        "@yearly": "0 0 1 1 *",
        "@annually": "0 0 1 1 *",
        "@monthly": "0 0 1 * *",
        "@weekly": "0 0 * * 0",
        "@daily": "0 0 * * *",
        "@midnight": "0 0 * * *",
        "@hourly": "0 * * * *",
    }
)
_MACRO_LIST: Final = ", ".join(MACROS)
# Go's durations as Kubernetes CronJobs and robfig/cron write ``@every``: 1h30m, 5m, 90s.
_DURATION_RE: Final = re.compile(r"(?:([0-9]{1,6})h)?(?:([0-9]{1,6})m)?(?:([0-9]{1,6})s)?")


class CronError(ValueError):
    """A cron expression or time zone that tickwork refuses.

    ``field`` names the part that is wrong (``minute`` .. ``day-of-week``,
    ``expression`` for the shape of the whole, ``zone``); ``value`` is the
    offending text when there is one.
    """

    def __init__(self, message: str, *, field: str, value: str | None = None) -> None:
        super().__init__(message)
        self.field = field
        self.value = value


class DstRepeated(enum.StrEnum):
    """Which occurrence of a local time that happens twice (fall back) fires."""

    first = "first"
    last = "last"
    both = "both"


class DstSkipped(enum.StrEnum):
    """What a local time that does not exist (spring forward) does."""

    shift = "shift"  # fires once, at the first instant after the gap
    skip = "skip"  # does not fire that day


@dataclass(frozen=True, slots=True)
class DstPolicy:
    """A job's choice on DST nights; ``None`` is the hour field's rule (``docs/cron.md``):
    fixed-hour schedules ``first`` and ``shift``, wildcard-hour ones ``both`` and
    ``skip``."""

    repeated: DstRepeated | None = None
    skipped: DstSkipped | None = None

    def resolved(self, fixed_hour: bool) -> DstPolicy:
        """Both choices made: an unset one by the hour field's rule."""
        return DstPolicy(
            self.repeated or (DstRepeated.first if fixed_hour else DstRepeated.both),
            self.skipped or (DstSkipped.shift if fixed_hour else DstSkipped.skip),
        )


_HOUR_FIELD_RULE: Final = DstPolicy()


@dataclass(frozen=True)
class _DayFields:
    """Parsed day-of-month and day-of-week, in the forms croniter understands."""

    days: tuple[int, ...]
    last_day: bool
    weekdays: tuple[int, ...]
    # (weekday, n) for ``weekday#n``; n is 1..5
    nth_weekdays: tuple[tuple[int, int], ...]
    # weekday for ``weekdayL``
    last_weekdays: tuple[int, ...]


def _fail(index: int, message: str, value: str) -> CronError:
    return CronError(
        f"{_FIELD_NAMES[index]} field: {message}", field=_FIELD_NAMES[index], value=value
    )


def _value(index: int, text: str, item: str) -> int:
    low, high = _BOUNDS[index]
    if _DIGITS_RE.fullmatch(text):
        number = int(text)
    else:
        names = _NAMES[index]
        if text.lower() not in names:
            if names:
                hint = f"expected a number {low}-{high} or a name like {next(iter(names))!r}"
            elif index == 2:
                hint = f"expected a number {low}-{high}, or 'L' as a list item of its own"
            else:
                hint = f"expected a number {low}-{high}"
            where = "" if text == item else f" in {item!r}"
            raise _fail(index, f"{text!r}{where} is not a value ({hint})", item)
        number = names[text.lower()]
    if not low <= number <= high:
        where = "" if text == item else f" in {item!r}"
        raise _fail(index, f"{number}{where} is out of range {low}-{high}", item)
    return number


def _step(index: int, text: str | None, item: str) -> int:
    if text is None:
        return 1
    step = int(text)
    high = _BOUNDS[index][1]
    if not 1 <= step <= high:
        raise _fail(index, f"step {step} in {item!r} is out of range 1-{high}", item)
    return step


def _expand_item(index: int, item: str) -> range:
    """The values of one list item that is ``*``, a value or a range, with a step."""
    low, high = _BOUNDS[index]
    star = _STAR_RE.fullmatch(item)
    if star:
        return range(low, high + 1, _step(index, star.group(1), item))
    matched = _RANGE_RE.fullmatch(item)
    if not matched:
        raise _fail(index, f"cannot read {item!r}", item)
    first_text, last_text, step_text = matched.groups()
    first = _value(index, first_text, item)
    if last_text is None:
        if step_text is not None:
            # Vixie cron only steps through a range; "5/15" is Quartz syntax and
            # would have to be guessed.
            raise _fail(
                index,
                f"a step needs a range or '*' in {item!r} "
                f"(write '{first_text}-{high}/{step_text}' or '*/{step_text}')",
                item,
            )
        return range(first, first + 1)
    last = _value(index, last_text, item)
    if first > last:
        raise _fail(index, f"range {item!r} runs backwards ({first} > {last})", item)
    return range(first, last + 1, _step(index, step_text, item))


def _items(index: int, text: str) -> list[str]:
    items = text.split(",")
    if any(not item for item in items):
        raise _fail(index, f"empty list item in {text!r}", text)
    return items


def _parse_plain(index: int, text: str) -> tuple[int, ...]:
    values: set[int] = set()
    for item in _items(index, text):
        values.update(_expand_item(index, item))
    return tuple(sorted(values))


def _parse_days(day_text: str, weekday_text: str) -> _DayFields:
    day_index, weekday_index = 2, 4
    days: set[int] = set()
    last_day = False
    for item in _items(day_index, day_text):
        if item in ("L", "l"):
            last_day = True
        else:
            days.update(_expand_item(day_index, item))

    weekdays: set[int] = set()
    nth: set[tuple[int, int]] = set()
    last_weekdays: set[int] = set()
    for item in _items(weekday_index, weekday_text):
        if item in ("L", "l"):
            # Quartz reads a bare L here as Saturday; Vixie has no such thing.
            raise _fail(
                weekday_index, "'L' needs a weekday here, e.g. '5L' for the last Friday", item
            )
        last_match = _LAST_WEEKDAY_RE.fullmatch(item)
        nth_match = _NTH_WEEKDAY_RE.fullmatch(item)
        if last_match and not (item.isalpha() and item.lower() in _WEEKDAY_NAMES):
            last_weekdays.add(_value(weekday_index, last_match.group(1), item) % 7)
        elif nth_match:
            weekday = _value(weekday_index, nth_match.group(1), item) % 7
            number = int(nth_match.group(2))
            if not 1 <= number <= 5:
                raise _fail(weekday_index, f"{item!r}: the week number must be 1-5", item)
            nth.add((weekday, number))
        else:
            # Sunday is both 0 and 7.
            weekdays.update(value % 7 for value in _expand_item(weekday_index, item))
    return _DayFields(
        days=tuple(sorted(days)),
        last_day=last_day,
        weekdays=tuple(sorted(weekdays)),
        nth_weekdays=tuple(sorted(nth)),
        last_weekdays=tuple(sorted(last_weekdays)),
    )


def _join(values: tuple[int, ...], full: int) -> str:
    if len(values) == full:
        return "*"
    return ",".join(str(value) for value in values)


def _clause_expressions(fields: list[str]) -> list[str]:
    """croniter expressions whose union is the schedule of ``fields``.

    Each is evaluated with ``day_or=False``, so croniter intersects its day fields.
    """
    minute_text, hour_text, day_text, month_text, weekday_text = fields
    minutes = _join(_parse_plain(0, minute_text), 60)
    hours = _join(_parse_plain(1, hour_text), 24)
    months = _join(_parse_plain(3, month_text), 12)
    day_fields = _parse_days(day_text, weekday_text)

    day_parts = [str(day) for day in day_fields.days]
    if day_fields.last_day:
        day_parts.append("L")
    days = "*" if len(day_fields.days) == 31 else ",".join(day_parts)

    # croniter refuses a day-of-week list that mixes plain weekdays with "#"/"L"
    # items; a list is a union, so it becomes one clause per kind.
    weekday_groups: list[str] = []
    if day_fields.weekdays:
        weekday_groups.append(_join(day_fields.weekdays, 7))
    special = [f"{weekday}#{number}" for weekday, number in day_fields.nth_weekdays]
    special += [f"L{weekday}" for weekday in day_fields.last_weekdays]
    if special:
        weekday_groups.append(",".join(special))

    prefix = f"{minutes} {hours}"
    if day_text.startswith("*") or weekday_text.startswith("*"):
        # Vixie: either field starting with '*' makes the two an intersection.
        return [f"{prefix} {days} {months} {group}" for group in weekday_groups]
    # Both restricted: a day matching either field fires.
    return [f"{prefix} {days} {months} *"] + [
        f"{prefix} * {months} {group}" for group in weekday_groups
    ]


def _clause_fires(expression: str) -> bool:
    probe = croniter(expression, _PROBE_START, day_or=False, max_years_between_matches=_PROBE_YEARS)
    try:
        probe.get_next(datetime)
    except CroniterError:
        return False
    return True


def _fresh(template: Any) -> Any:
    """A croniter that shares ``template``'s parsed fields but not its position.

    get_next moves the object it is called on, so concurrent callers must not
    share one; this is ``copy.copy`` without its generic dispatch, a few times
    cheaper on the hot path.
    """
    clone = object.__new__(type(template))
    clone.__dict__.update(template.__dict__)
    return clone


def _load_zone(zone: str) -> ZoneInfo:
    try:
        return zones.get(zone)
    except zones.UnknownZone as error:
        raise CronError(str(error), field="zone", value=zone) from None


def _step_for(interval: str) -> str | None:
    """The cron step that fires every ``interval`` (a Go duration), if one does.

    A step fires at clock times: only an interval that divides the hour or the day
    evenly keeps its spacing across the hour or the midnight it crosses.
    """
    matched = _DURATION_RE.fullmatch(interval)
    if not interval or matched is None:
        return None
    hours, minutes, seconds = (int(part or 0) for part in matched.groups())
    total = hours * 3600 + minutes * 60 + seconds
    if total == 0 or total % 60:
        return None  # a minute is cron's finest step
    every_minutes = total // 60
    if every_minutes == 1:
        return "* * * * *"
    if every_minutes < 60:
        return f"*/{every_minutes} * * * *" if 60 % every_minutes == 0 else None
    if every_minutes % 60:
        return None
    every_hours = every_minutes // 60
    if every_hours == 1:
        return "0 * * * *"
    if every_hours < 24:
        return f"0 */{every_hours} * * *" if 24 % every_hours == 0 else None
    return "0 0 * * *" if every_hours == 24 else None


def _macro_fields(text: str, expression: str) -> list[str]:
    """The five fields a macro stands for; ``text`` is the stripped expression.

    Case does not matter, as for every other letter of an expression. cronie and
    Kubernetes only read lowercase, so nothing written for them is read differently.
    """
    words = _SEPARATOR_RE.split(text)
    name = words[0].lower()
    if name == "@reboot":
        raise CronError(
            f"cron expression {expression!r}: tickwork has no boot; enqueue a run when "
            "your service starts, or use runAt",
            field="expression",
            value=expression,
        )
    if name == "@every":
        interval = " ".join(words[1:])
        step = _step_for(interval.lower()) if len(words) == 2 else None
        advice = "write it as a cron step such as '*/5 * * * *'"
        if step is not None:
            advice = f"write it as the cron step {step!r}"
        elif interval:
            advice += (
                f"; no step fires exactly every {interval!r} (a step's interval divides "
                "the hour or the day)"
            )
        raise CronError(
            f"cron expression {expression!r}: tickwork fires at clock times, not at "
            f"intervals from a start; {advice}",
            field="expression",
            value=expression,
        )
    if name not in MACROS:
        raise CronError(
            f"cron expression {expression!r}: unknown macro {words[0]!r}; the macros are "
            f"{_MACRO_LIST}, or write the five fields",
            field="expression",
            value=expression,
        )
    if len(words) > 1:
        raise CronError(
            f"cron expression {expression!r}: a macro stands for all five fields; write "
            f"{name!r} alone or the five fields",
            field="expression",
            value=expression,
        )
    return MACROS[name].split(" ")


def _fields(expression: str) -> list[str]:
    """The five field texts, or ``CronError`` before anything costly is read."""
    if len(expression) > limits.MAX_CRON_LENGTH:
        raise CronError(
            f"cron expression is {len(expression)} characters long; the limit is "
            f"{limits.MAX_CRON_LENGTH}",
            field="expression",
        )
    foreign = _FOREIGN_RE.search(expression)
    if foreign is not None:
        raise CronError(
            f"cron expression {expression!r} holds {foreign.group()!r} at position "
            f"{foreign.start()}: an expression is printable ASCII, its fields separated "
            "by spaces or tabs",
            field="expression",
            value=expression,
        )
    stripped = expression.strip(" \t")
    if stripped.startswith("@"):
        return _macro_fields(stripped, expression)
    fields = _SEPARATOR_RE.split(stripped) if stripped else []
    if len(fields) != 5:
        raise CronError(
            f"cron expression {' '.join(fields)!r} has {len(fields)} fields, expected 5 "
            "(minute hour day-of-month month day-of-week)",
            field="expression",
            value=expression,
        )
    return fields


def _require_aware(value: datetime, name: str) -> datetime:
    if value.tzinfo is None or value.utcoffset() is None:
        raise ValueError(f"{name} must be a timezone-aware datetime, got naive {value!r}")
    return value.astimezone(UTC)


@dataclass(frozen=True)
class CronSchedule:
    """A parsed cron expression in a zone; build it with :meth:`parse`.

    ``expression`` is stored with its whitespace normalised to single spaces, and a
    macro as the five fields it stands for (``macro`` keeps its name, lowercase), so
    ``@daily`` and ``0 0 * * *`` are equal schedules. ``fixed_hour`` is true when the
    hour field does not start with ``*``: it decides how DST gaps and overlaps are
    treated (see ``docs/cron.md``) where ``dst`` leaves the choice to it. ``dst`` is
    kept resolved (both choices made), so a policy that says what the hour field
    says gives an equal schedule.

    Instances are immutable and safe to share between threads.
    """

    expression: str
    zone: str = "UTC"
    dst: DstPolicy = _HOUR_FIELD_RULE
    fixed_hour: bool = field(init=False)
    macro: str | None = field(init=False, compare=False)
    _tz: ZoneInfo = field(init=False, repr=False, compare=False)
    # croniter objects keep their position as state; each call works on a copy.
    _clauses: tuple[Any, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        fields = _fields(self.expression)
        normalised = " ".join(fields)
        tz = _load_zone(self.zone)
        try:
            expressions = _clause_expressions(fields)
        except CronError as error:
            raise CronError(
                f"invalid cron expression {normalised!r}: {error}",
                field=error.field,
                value=error.value,
            ) from None
        try:
            living = [expression for expression in expressions if _clause_fires(expression)]
        except CroniterError as error:  # pragma: no cover - the grammar above is stricter
            raise CronError(
                f"invalid cron expression {normalised!r}: {error}",
                field="expression",
                value=self.expression,
            ) from None
        if not living:
            raise CronError(
                f"cron expression {normalised!r} never fires: no calendar date matches "
                "its day-of-month, month and day-of-week fields",
                field="expression",
                value=self.expression,
            )
        written = self.expression.strip(" \t").lower()
        object.__setattr__(self, "macro", written if written in MACROS else None)
        object.__setattr__(self, "expression", normalised)
        fixed_hour = not fields[1].startswith("*")
        object.__setattr__(self, "fixed_hour", fixed_hour)
        object.__setattr__(self, "dst", self.dst.resolved(fixed_hour))
        object.__setattr__(self, "_tz", tz)
        object.__setattr__(
            self,
            "_clauses",
            tuple(croniter(expression, _PROBE_START, day_or=False) for expression in living),
        )

    def __reduce__(self) -> tuple[Any, tuple[str, str, DstPolicy]]:
        # Zones come from the tzdata package and pickle by name, not by file.
        return (CronSchedule.parse, (self.macro or self.expression, self.zone, self.dst))

    @classmethod
    def parse(
        cls, expression: str, zone: str = "UTC", dst: DstPolicy = _HOUR_FIELD_RULE
    ) -> CronSchedule:
        """Validate ``expression`` in ``zone``; raise :class:`CronError` if refused."""
        return cls(expression, zone, dst)

    @property
    def tzinfo(self) -> ZoneInfo:
        return self._tz

    def next_after(self, instant: datetime) -> datetime | None:
        """The first fire instant strictly after ``instant``, in UTC.

        ``None`` only when the calendar runs out (past year 9999).
        """
        after = _require_aware(instant, "instant")
        try:
            return self._next_after(after)
        except OverflowError:
            return None  # the last day of year 9999: nothing after it can be told

    def _next_after(self, after: datetime) -> datetime | None:
        tz = self._tz
        # Instants after ``after`` can show a wall time earlier than ``after``'s own
        # only if a fall-back follows soon; start the wall-time search that much
        # earlier.
        lowest_offset = min(zones.offset(after, tz), zones.offset(after + _OFFSET_HORIZON, tz))
        start_wall = after.replace(tzinfo=None) + lowest_offset
        cursor = start_wall.replace(second=0, microsecond=0) - _MINUTE

        best: datetime | None = None
        for _ in range(_MAX_STEPS):
            wall = self._next_wall(cursor)
            if wall is None:
                return best
            for candidate in self._instants(wall):
                if candidate > after and (best is None or candidate < best):
                    best = candidate
            if best is not None and wall >= self._last_useful_wall(after, best):
                return best
            cursor = wall
        raise RuntimeError(  # pragma: no cover - bounded by the fall-back slack
            f"no fire time of {self.expression!r} found after {after.isoformat()}"
        )

    def iter_after(self, instant: datetime) -> Iterator[datetime]:
        """Fire instants strictly after ``instant``, in increasing UTC order."""
        current: datetime | None = _require_aware(instant, "instant")
        while current is not None:
            current = self.next_after(current)
            if current is not None:
                yield current

    def between(self, start: datetime, end: datetime) -> list[datetime]:
        """Fire instants in ``(start, end]``."""
        limit = _require_aware(end, "end")
        result: list[datetime] = []
        for instant in self.iter_after(start):
            if instant > limit:
                break
            result.append(instant)
        return result

    def preview(self, after: datetime, count: int) -> list[datetime]:
        """The next ``count`` fire instants after ``after``."""
        if count < 0:
            raise ValueError(f"count must not be negative, got {count}")
        return list(islice(self.iter_after(after), count))

    def _next_wall(self, after_wall: datetime) -> datetime | None:
        """The first matching naive local wall time strictly after ``after_wall``."""
        best: datetime | None = None
        for template in self._clauses:
            try:
                wall: datetime = _fresh(template).get_next(datetime, start_time=after_wall)
            except (CroniterError, OverflowError, ValueError):
                continue  # this clause has no match left before year 9999
            if best is None or wall < best:
                best = wall
        return best

    def _instants(self, wall: datetime) -> tuple[datetime, ...]:
        """The fire instants a matching local wall time stands for, in UTC order."""
        tz = self._tz
        first = wall.replace(tzinfo=tz).astimezone(UTC)
        second = wall.replace(tzinfo=tz, fold=1).astimezone(UTC)
        if first == second:
            return (first,)
        if first < second:
            # Repeated wall time (fall-back): fold=0 is the first occurrence.
            repeated = self.dst.repeated
            if repeated is DstRepeated.first:
                return (first,)
            return (second,) if repeated is DstRepeated.last else (first, second)
        # Wall time inside a gap: fold=0 read it with the offset before the gap
        # (an instant after the jump), fold=1 with the one after (an instant before).
        # A gap of any length, a DST hour or Pacific/Apia's lost day, shifts a time to
        # its end: several times of one gap become that one instant.
        if self.dst.skipped is DstSkipped.shift:
            return (self._gap_end(second, first),)
        return ()

    def _gap_end(self, before: datetime, after: datetime) -> datetime:
        """The instant of the offset change between ``before`` and ``after``."""
        tz = self._tz
        offset_before = zones.offset(before, tz)
        # At most 26 hours apart.
        return zones.first_second(before, after, lambda at: zones.offset(at, tz) != offset_before)

    def _last_useful_wall(self, after: datetime, best: datetime) -> datetime:
        """Past this wall time no match can give an instant in ``(after, best)``.

        Such an instant ``u`` shows a wall time at most the highest one shown during
        ``(after, best]``: ``best``'s own, unless a fall-back in that window made
        the clock run backwards, by at most the drop in offset.
        """
        tz = self._tz
        offset_best = zones.offset(best, tz)
        earlier = max(after, best - _OFFSET_HORIZON)
        drop = max(zones.offset(earlier, tz) - offset_best, timedelta(0))
        return best.replace(tzinfo=None) + offset_best + drop


def validate(expression: str, zone: str = "UTC") -> None:
    """Raise :class:`CronError` if ``expression`` in ``zone`` would be refused."""
    CronSchedule.parse(expression, zone)


def expand(expression: str) -> str:
    """The five fields ``expression`` stands for, whitespace normalised: a macro's
    expansion, any other expression as written. Raise :class:`CronError` if refused."""
    return CronSchedule.parse(expression).expression
