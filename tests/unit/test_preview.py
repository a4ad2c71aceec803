"""DST marks of previewed fire times: asked of the zone, never decided here."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from tickwork.core.cron import CronSchedule
from tickwork.core.preview import Mark, fire_times

BERLIN = "Europe/Berlin"


def at(text: str) -> datetime:
    return datetime.fromisoformat(text).astimezone(UTC)


def marked(cron: str, after: str, count: int, zone: str = BERLIN) -> list[tuple[str, Mark | None]]:
    schedule = CronSchedule.parse(cron, zone)
    return [
        (fire.instant.strftime("%Y-%m-%dT%H:%MZ"), fire.mark)
        for fire in fire_times(schedule, at(after), count)
    ]


def test_the_instants_are_the_schedules_own() -> None:
    schedule = CronSchedule.parse("*/7 1-3 * * *", BERLIN)
    after = at("2026-03-28T23:00:00Z")
    assert [f.instant for f in fire_times(schedule, after, 30)] == schedule.preview(after, 30)


def test_a_fixed_hour_job_in_the_spring_gap_runs_at_its_end() -> None:
    fires = fire_times(CronSchedule.parse("30 2 * * *", BERLIN), at("2026-03-28T12:00:00Z"), 2)
    assert fires[0].instant == at("2026-03-29T01:00:00Z")
    assert fires[0].mark is Mark.gap
    assert fires[0].note == (
        "02:30 does not exist on Sun 29 Mar (clocks go forward 02:00 → 03:00); "
        "runs at 03:00 instead"
    )
    assert fires[0].local.tzname() == "CEST"
    assert fires[1].mark is None


def test_a_wildcard_hour_job_skips_the_gap() -> None:
    assert marked("*/30 * * * *", "2026-03-29T00:00:00Z", 3) == [
        ("2026-03-29T00:30Z", None),
        ("2026-03-29T01:00Z", Mark.gap),
        ("2026-03-29T01:30Z", None),
    ]
    fires = fire_times(CronSchedule.parse("*/30 * * * *", BERLIN), at("2026-03-29T00:45Z"), 1)
    assert fires[0].note is not None and fires[0].note.endswith("not run")
    assert "02:00, 02:30 do not exist" in fires[0].note


def test_a_fixed_hour_job_runs_once_in_the_autumn_overlap() -> None:
    fires = fire_times(CronSchedule.parse("30 2 * * *", BERLIN), at("2026-10-24T12:00:00Z"), 2)
    assert fires[0].instant == at("2026-10-25T00:30:00Z")  # 02:30 CEST, the first
    assert fires[0].mark is Mark.overlap
    assert fires[0].note is not None and fires[0].note.endswith("runs once, at the first (CEST)")
    assert fires[1].instant == at("2026-10-26T01:30:00Z")
    assert fires[1].mark is Mark.shift  # clocks went back since the previous fire time


def test_an_hourly_job_runs_at_both_occurrences() -> None:
    fires = fire_times(CronSchedule.parse("0 * * * *", BERLIN), at("2026-10-24T23:30:00Z"), 3)
    assert [f.mark for f in fires] == [Mark.overlap, Mark.overlap, None]
    assert fires[0].note is not None and "runs at both, this is the first (CEST)" in fires[0].note
    assert fires[1].note is not None and "this is the second (CET)" in fires[1].note


@pytest.mark.parametrize("zone", ["UTC", "Asia/Tokyo"])
def test_zones_without_dst_mark_nothing(zone: str) -> None:
    assert all(mark is None for _, mark in marked("30 2 * * *", "2026-03-01T00:00Z", 40, zone))


def test_a_macro_is_marked_as_its_five_fields() -> None:
    # Havana changed its clocks at midnight in 2018: @daily's 00:00 did not exist on
    # 11 March and happened twice on 4 November.
    spring = fire_times(CronSchedule.parse("@daily", "America/Havana"), at("2018-03-10T12:00Z"), 2)
    assert spring[0].instant == at("2018-03-11T05:00:00Z")
    assert spring[0].mark is Mark.gap
    assert spring[0].note == (
        "00:00 does not exist on Sun 11 Mar (clocks go forward 00:00 → 01:00); "
        "runs at 01:00 instead"
    )
    autumn = fire_times(CronSchedule.parse("@daily", "America/Havana"), at("2018-11-03T12:00Z"), 2)
    assert autumn[0].instant == at("2018-11-04T04:00:00Z")
    assert (
        autumn[0].note
        == "00:00 happens twice on Sun 04 Nov (clocks go back); runs once, at the first (CDT)"
    )
    assert marked("@hourly", "2018-11-04T03:30:00Z", 2, "America/Havana") == [
        ("2018-11-04T04:00Z", Mark.overlap),
        ("2018-11-04T05:00Z", Mark.overlap),
    ]
