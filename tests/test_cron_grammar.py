"""The cron parser accepts exactly the grammar ``docs/cron.md`` states.

A recogniser written here from the documented grammar alone (its own tokenising, its
own range rules, its own calendar walk for "never fires") is compared with
``CronSchedule.parse`` on strings generated around the grammar: valid items, near
misses, foreign characters and separators, extremes.
"""

from __future__ import annotations

import calendar
import re
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from tickwork.core import cron

MAX_LENGTH = 256
FIELDS = ("minute", "hour", "day-of-month", "month", "day-of-week")
RANGES = {"minute": (0, 59), "hour": (0, 23), "day-of-month": (1, 31), "month": (1, 12)}
RANGES["day-of-week"] = (0, 7)
MONTHS = ["jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"]
WEEKDAYS = ["sun", "mon", "tue", "wed", "thu", "fri", "sat"]
NAMES = {
    "month": {name: number for number, name in enumerate(MONTHS, 1)},
    "day-of-week": {name: number for number, name in enumerate(WEEKDAYS)},
}
MACROS = ["@yearly", "@annually", "@monthly", "@weekly", "@daily", "@midnight", "@hourly"]


class Refused(Exception):
    pass


def value_of(text: str, field: str) -> int:
    """``value = 1*DIGIT / 1*ALPHA``; names only in month and day of week."""
    if text and all("0" <= c <= "9" for c in text):
        number = int(text)
    elif text and all(c.isascii() and c.isalpha() for c in text):
        names = NAMES.get(field, {})
        if text.lower() not in names:
            raise Refused(f"{text!r} is not a {field} value")
        number = names[text.lower()]
    else:
        raise Refused(f"{text!r} is not a value")
    low, high = RANGES[field]
    if not low <= number <= high:
        raise Refused(f"{number} outside {low}-{high}")
    return number


def step_of(text: str, field: str) -> int:
    if not text or not all("0" <= c <= "9" for c in text):
        raise Refused("a step is digits")
    step = int(text)
    if not 1 <= step <= RANGES[field][1]:
        raise Refused("step out of range")
    return step


def plain_item(item: str, field: str) -> set[int]:
    """``"*" ["/" step] / value ["-" value ["/" step]]``."""
    low, high = RANGES[field]
    if item == "*":
        return set(range(low, high + 1))
    if item.startswith("*/"):
        return set(range(low, high + 1, step_of(item[2:], field)))
    body, slash, step_text = item.partition("/")
    first_text, dash, last_text = body.partition("-")
    if not dash:
        if slash:
            raise Refused("a step needs a range or '*'")
        return {value_of(first_text, field)}
    first, last = value_of(first_text, field), value_of(last_text, field)
    if first > last:
        raise Refused("backwards")
    return set(range(first, last + 1, step_of(step_text, field) if slash else 1))


@dataclass(frozen=True)
class Days:
    days: frozenset[int]
    last: bool
    weekdays: frozenset[int]
    nth: frozenset[tuple[int, int]]
    last_weekdays: frozenset[int]


def items(text: str) -> list[str]:
    parts = text.split(",")
    if any(part == "" for part in parts):
        raise Refused("empty item")
    return parts


def day_fields(day_text: str, weekday_text: str) -> Days:
    days: set[int] = set()
    last = False
    for item in items(day_text):
        if item in ("L", "l"):
            last = True
        else:
            days |= plain_item(item, "day-of-month")
    weekdays: set[int] = set()
    nth: set[tuple[int, int]] = set()
    last_weekdays: set[int] = set()
    for item in items(weekday_text):
        # Any reading of the item that the grammar allows will do.
        readings: list[Refused] = []
        try:
            weekdays |= {day % 7 for day in plain_item(item, "day-of-week")}
            continue
        except Refused as why:
            readings.append(why)
        if len(item) >= 2 and item[-1] in "Ll":
            try:
                last_weekdays.add(value_of(item[:-1], "day-of-week") % 7)
                continue
            except Refused as why:
                readings.append(why)
        head, hash_sign, week = item.partition("#")
        if hash_sign:
            try:
                weekday = value_of(head, "day-of-week") % 7
                if not week or not all("0" <= c <= "9" for c in week) or not 1 <= int(week) <= 5:
                    raise Refused("week 1-5")
                nth.add((weekday, int(week)))
                continue
            except Refused as why:
                readings.append(why)
        raise readings[-1]
    return Days(
        frozenset(days), last, frozenset(weekdays), frozenset(nth), frozenset(last_weekdays)
    )


def dates(months: frozenset[int]) -> Iterator[tuple[int, int, int, int]]:
    """(day, weekday with Sunday 0, last day of month, month) over 28 years: every
    kind of year (leap or not, times the weekday of 1 January) is among them."""
    for year in range(2000, 2028):
        for month in sorted(months):
            first_weekday, length = calendar.monthrange(year, month)
            for day in range(1, length + 1):
                yield day, (first_weekday + day) % 7, length, month


@cache
def fires(day_text: str, month_text: str, weekday_text: str) -> bool:
    months = frozenset().union(*(plain_item(item, "month") for item in items(month_text)))
    spec = day_fields(day_text, weekday_text)
    both = day_text.startswith("*") or weekday_text.startswith("*")
    for day, weekday, length, _month in dates(months):
        by_day = day in spec.days or (spec.last and day == length)
        by_weekday = (
            weekday in spec.weekdays
            or (weekday, (day - 1) // 7 + 1) in spec.nth
            or (weekday in spec.last_weekdays and day + 7 > length)
        )
        if (by_day and by_weekday) if both else (by_day or by_weekday):
            return True
    return False


def accepts(expression: str) -> bool:
    """The documented grammar, from the text of docs/cron.md."""
    if len(expression) > MAX_LENGTH:
        return False
    if not all(c in " \t" or "!" <= c <= "~" for c in expression):
        return False
    if expression.strip(" \t").lower() in MACROS:  # letters are case-insensitive
        return True
    fields = [part for part in re.split("[ \t]", expression) if part]
    if len(fields) != 5:
        return False
    minute, hour, day, month, weekday = fields
    try:
        for text, name in ((minute, "minute"), (hour, "hour")):
            for item in items(text):
                plain_item(item, name)
        return fires(day, month, weekday)
    except Refused:
        return False


def parser_accepts(expression: str) -> bool:
    try:
        cron.CronSchedule.parse(expression)
    except cron.CronError:
        return False
    return True


# --- strings around the grammar ---

numbers = st.one_of(
    st.integers(0, 65).map(str),
    st.sampled_from(["00", "007", "0" * 40 + "5", "99999", "4294967296", "1" * 30]),
)
names = st.sampled_from(
    [*MONTHS, *WEEKDAYS, "JAN", "Mon", "fRi", "L", "l", "x", "jul", "sunday", "ju", "fril"]
)
values = st.one_of(numbers, numbers, names)
steps = st.one_of(st.integers(0, 70).map(str), st.sampled_from(["", "99999", "00", "x"]))
items_ = st.one_of(
    st.just("*"),
    st.builds(lambda n: f"*/{n}", steps),
    values,
    st.builds(lambda a, b: f"{a}-{b}", values, values),
    st.builds(lambda a, b, n: f"{a}-{b}/{n}", values, values, steps),
    st.builds(lambda a, n: f"{a}/{n}", values, steps),
    st.sampled_from(["L", "l", "5L", "friL", "7l", "0L", "8L", "LL", "L5", "L-5", "*L"]),
    st.builds(lambda a, k: f"{a}#{k}", values, st.integers(0, 7).map(str)),
    st.sampled_from(["", "-", "/", "#", "*-5", "*/", "1-", "-1", "?", "H", "5W", "@daily"]),
    st.sampled_from(["@", "@hourly", "@MIDNIGHT", "@reboot", "@every", "daily", "@*"]),
    st.sampled_from(["٣", "\uff15", "²", "1\u00a02", "1\n2", "é"]),
)
fields_ = st.lists(items_, min_size=1, max_size=4).map(",".join)
blanks = st.sampled_from([" ", " ", " ", "  ", "\t", " \t ", "\n", "\u00a0", "\u2003", ""])
edges = st.sampled_from(["", "", "", " ", "\t", "\n", "\u00a0"])


@st.composite
def expressions(draw: st.DrawFn) -> str:
    fields = draw(st.lists(fields_, min_size=3, max_size=7))
    text = fields[0]
    for field in fields[1:]:
        text += draw(blanks) + field
    return draw(edges) + text + draw(edges)


@st.composite
def macros(draw: st.DrawFn) -> str:
    """A macro alone, in any case, with blanks and near misses around it."""
    name = draw(
        st.one_of(
            st.sampled_from(MACROS),
            st.sampled_from(["@reboot", "@every", "@fortnightly", "@", "@@daily", "@daily2"]),
            st.sampled_from(["daily", "@dail", "@dailyy", "@da1ly", "@ daily", "@\u0131hourly"]),
        )
    )
    upper = draw(st.lists(st.booleans(), min_size=len(name), max_size=len(name)))
    cased = "".join(c.upper() if up else c for c, up in zip(name, upper, strict=True))
    tail = draw(st.sampled_from(["", "", "", " *", " 5m", " 0 0 * * *", "*", ",", "/2"]))
    return draw(edges) + cased + tail + draw(edges)


def listed(pieces: list[str], most: int) -> st.SearchStrategy[str]:
    """A field's list of one to ``most`` of ``pieces``."""
    return st.lists(st.sampled_from(pieces), min_size=1, max_size=most).map(",".join)


@st.composite
def mostly_valid(draw: st.DrawFn) -> str:
    """Five fields from the valid pieces, so the calendar rules get exercised."""
    minute = draw(st.sampled_from(["*", "0", "*/15", "5-50/5", "0,30", "59"]))
    hour = draw(st.sampled_from(["*", "2", "*/3", "9-17", "0,12", "23"]))
    day = draw(listed(["*", "1", "15", "29", "30", "31", "L", "*/10", "1-7", "28-31/3"], 3))
    month = draw(listed(["*", "2", "feb", "4", "jun", "9,11", "*/6", "jan-mar/2", "12"], 2))
    weekday = draw(listed(["*", "0", "7", "mon", "1-5", "5L", "1#5", "sat#5", "*/2", "fri-sat"], 3))
    return f"{minute} {hour} {day} {month} {weekday}"


AGREEMENT = settings(
    max_examples=500,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)


@AGREEMENT
@given(st.one_of(expressions(), mostly_valid(), macros()))
@example("0 0 31 2 *")
@example("0 0 30,31 2 mon")
@example("0 0 * feb mon#5")
@example("0 0 30 2 */1")
@example(" \t0 2 * * *\t")
@example("0 2 * * *\n")
@example("*/59 */23 */31 */12 */7")
@example("0 0 L * 7L")
@example("0 0 ? * *")
@example("@daily")
@example(" \t@WeEkLy\t")
@example("@daily\n")
@example("@daily *")
@example("@every 5m")
@example("@reboot")
@example("@\u0130hourly")
def test_the_parser_agrees_with_the_documented_grammar(expression: str) -> None:
    assert parser_accepts(expression) == accepts(expression), expression


@settings(max_examples=200, deadline=None, derandomize=True, database=None)
@given(st.text(st.characters(codec="utf-8"), max_size=40))
def test_any_text_is_accepted_or_refused_with_a_cron_error(text: str) -> None:
    assert parser_accepts(text) == accepts(text), text
