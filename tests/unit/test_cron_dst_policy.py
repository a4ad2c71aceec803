"""A job's DST policy (``schedule.dst``): ``repeated`` first | last | both, ``skipped``
shift | skip, on the worked example of docs/cron.md, in the preview's notes and in the
JobSpec field. Every combination is checked against an independent minute walk in
tests/test_cron_dst_policy.py.
"""

from __future__ import annotations

import pickle
from datetime import UTC, datetime

import pytest
from pydantic import ValidationError

from tickwork.core import spec
from tickwork.core.cron import CronSchedule, DstPolicy, DstRepeated, DstSkipped
from tickwork.core.preview import Mark, fire_times

BERLIN = "Europe/Berlin"


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
