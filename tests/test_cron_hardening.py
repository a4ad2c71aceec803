"""Cron expressions and zones from hostile or careless hands: bounded, ASCII, one tz
database, and refused by name before anything costly is read, never guessed at."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from click.testing import CliRunner

from tickwork.cli import cli
from tickwork.core import cron, limits, zones


def utc(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


# Names the host's zoneinfo folder may hold that are not zones of the tz database
# tickwork reads (folders, the leap-second and POSIX copies, build leftovers).
NOT_ZONES = [
    "Europe",
    "America",
    "Etc",
    "America/Argentina",
    "__pycache__",
    "right/UTC",
    "posix/Europe/Berlin",
    "zone.tab",
    "tzdata.zi",
    "localtime",
    "posixrules",
    "Factory",
    "europe/berlin",
    "Europe/Berlin\n",
    "Europe/Berlin/",
    "/Europe/Berlin",
    "Europe/../Europe/Berlin",
    "x" * 10_000,
    "",
]


@pytest.mark.parametrize("zone", NOT_ZONES, ids=lambda zone: repr(zone[:30]))
def test_zones_outside_the_tz_database_are_refused_by_name(zone: str) -> None:
    with pytest.raises(cron.CronError) as caught:
        cron.CronSchedule.parse("0 2 * * *", zone)
    assert caught.value.field == "zone"
    assert len(str(caught.value)) < 200  # a 10 000-character name is not echoed whole


def test_zones_load_from_the_tzdata_package_once() -> None:
    schedule = cron.CronSchedule.parse("0 2 * * *", "Europe/Berlin")
    assert schedule.tzinfo is zones.get("Europe/Berlin")
    assert cron.CronSchedule.parse("30 2 * * *", "Europe/Berlin").tzinfo is schedule.tzinfo
    assert {"UTC", "Europe/Berlin", "America/Argentina/Buenos_Aires"} <= zones.names()
    assert not any(name.startswith(("right/", "posix/")) for name in zones.names())


@pytest.mark.parametrize("zone", ["Europe", "America", "Etc", "right/UTC", "x" * 300])
def test_preview_with_a_bad_zone_exits_2_with_one_clear_line(zone: str) -> None:
    result = CliRunner().invoke(cli, ["schedule", "preview", "0 2 * * *", "--tz", zone])
    assert result.exit_code == 2, result.output
    assert "unknown time zone" in result.output and "--tz" in result.output
    assert "Traceback" not in result.output
    assert not isinstance(result.exception, Exception) or isinstance(result.exception, SystemExit)


@pytest.mark.parametrize(
    ("expression", "fragment"),
    [
        ("٣ * * * *", "'٣'"),  # an Arabic-Indic three
        ("\uff15 * * * *", "'\uff15'"),  # a full-width five
        ("0 0 ² * *", "'²'"),  # str.isdigit() says yes, int() says no
        ("0\n2 * * *", "'\\n'"),
        ("0 2 * * *\n", "'\\n'"),
        ("0\u00a02 * * *", "'\\xa0'"),  # no-break space
        ("0\u20032 * * *", "'\\u2003'"),  # em space
        ("0\u30002 * * *", "'\\u3000'"),  # ideographic space
        ("0 2 * * *\r", "'\\r'"),
        ("0 2 * * *\x00", "'\\x00'"),
    ],
)
def test_only_ascii_with_spaces_or_tabs_between_fields(expression: str, fragment: str) -> None:
    with pytest.raises(cron.CronError, match="printable ASCII") as caught:
        cron.CronSchedule.parse(expression)
    assert caught.value.field == "expression"
    assert fragment in str(caught.value)


def test_spaces_and_tabs_separate_fields() -> None:
    assert cron.CronSchedule.parse(" \t0  2\t* *\t \t*  ").expression == "0 2 * * *"


@pytest.mark.parametrize(
    ("expression", "field"),
    [
        ("*/99999 * * * *", "minute"),
        ("*/60 * * * *", "minute"),
        ("0 */24 * * *", "hour"),
        ("0 0 */32 * *", "day-of-month"),
        ("0 0 * */13 *", "month"),
        ("0 0 * * */8", "day-of-week"),
        ("0-59/60 * * * *", "minute"),
        ("0 0 * jan-dec/13 *", "month"),
    ],
)
def test_steps_are_bounded_by_the_field(expression: str, field: str) -> None:
    with pytest.raises(cron.CronError, match="out of range 1-") as caught:
        cron.CronSchedule.parse(expression)
    assert caught.value.field == field


def test_steps_up_to_the_field_range_are_fine() -> None:
    assert cron.CronSchedule.parse("*/59 */23 */31 */12 */7").fixed_hour is False
    at = cron.CronSchedule.parse("*/59 * * * *").preview(utc("2024-01-01T00:00"), 3)
    assert at == [utc("2024-01-01T00:59"), utc("2024-01-01T01:00"), utc("2024-01-01T01:59")]


def test_long_expressions_are_refused_before_they_are_read() -> None:
    longest = "0" * (limits.MAX_CRON_LENGTH - len(" * * * *")) + " * * * *"
    assert cron.CronSchedule.parse(longest).next_after(utc("2024-01-01T00:30")) == utc(
        "2024-01-01T01:00"
    )
    # Reading one took seconds. Refused for its length alone, whatever else is wrong
    # with it (a foreign digit, six fields, a macro): nothing past the length is read.
    for expression in [
        longest + " ",
        "0," * 1_000_000 + "0 * * * *",
        "0," * 1_000_000 + "\u0663 * * * *",
        "0," * 1_000_000 + "0 * * * * *",
        "@every " + "1" * 1_000_000,
    ]:
        with pytest.raises(cron.CronError) as refused:
            cron.CronSchedule.parse(expression)
        assert str(refused.value) == (
            f"cron expression is {len(expression)} characters long; the limit is 256"
        )
        assert refused.value.field == "expression"


@pytest.mark.parametrize(
    "expression",
    [
        ",".join(str(minute) for minute in range(60)) + " * * * *",
        "0 0 " + ",".join(str(day) for day in range(29, 32)) + " 2 *",  # never fires: OR-free
        "0 0 31 2,4,6,9,11 *",
        "0 0 * * " + ",".join(f"{day}#5" for day in range(7)),
        "0-59/1 0-23/1 1-31/1 1-12/1 0-7/1",
    ],
)
def test_the_costliest_expressions_parse(expression: str) -> None:
    # How long each takes is measured by make bench.
    try:
        cron.CronSchedule.parse(expression, "Europe/Berlin")
    except cron.CronError as error:
        assert "never fires" in str(error)


def test_a_day_lost_to_a_zone_change_runs_once_at_its_end() -> None:
    """Pacific/Apia skipped 2011-12-30: fixed-hour times in it run once, at the first
    instant after the gap, like any DST gap; wildcard-hour times are skipped."""
    daily = cron.CronSchedule.parse("0 12 * * *", "Pacific/Apia")
    assert daily.between(utc("2011-12-29T12:00"), utc("2011-12-31T12:00")) == [
        utc("2011-12-29T22:00"),  # 29 Dec 12:00 -10:00
        utc("2011-12-30T10:00"),  # 30 Dec 12:00 never happened: 31 Dec 00:00 +14:00
        utc("2011-12-30T22:00"),  # 31 Dec 12:00 +14:00
    ]
    several = cron.CronSchedule.parse("0 9,12,18 * * *", "Pacific/Apia")
    lost_day = several.between(utc("2011-12-30T09:59"), utc("2011-12-30T10:01"))
    assert lost_day == [utc("2011-12-30T10:00")]  # three times collapse into one run
    hourly = cron.CronSchedule.parse("0 * * * *", "Pacific/Apia")
    assert hourly.between(utc("2011-12-30T09:00"), utc("2011-12-30T11:00")) == [
        utc("2011-12-30T10:00"),  # 31 Dec 00:00 +14:00, a real hour after 23:00 -10:00
        utc("2011-12-30T11:00"),
    ]
