"""Vixie's cron macros (``@daily`` ...) wherever a cron is accepted: the schedule, the
job spec of the HTTP API and of manifests, ``tickwork schedule preview`` and the
dashboard's words (the HTTP API and the scheduler's runs, which need a database, are in
tests/test_cron_macros.py). A macro is kept as written and fires as the five fields
``docs/cron.md`` says it stands for; ``@reboot`` and ``@every`` are refused with what to
write instead."""

from __future__ import annotations

import json
import pickle
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner
from cron_reference import MACROS
from pydantic import ValidationError

from tickwork.api.ui.words import schedule_in_words
from tickwork.cli import cli
from tickwork.core import cron, spec
from tickwork.core.spec import JobSpec
from tickwork.engine import manifests
from tickwork.operator import crd as crd_module

# Midnight is when Havana changed its clocks in 2018: 00:00 did not exist on 11 March,
# and 00:00-00:59 happened twice on 4 November.
HAVANA = "America/Havana"
ZONES = ["UTC", "Europe/Berlin", HAVANA, "Australia/Lord_Howe", "Pacific/Apia"]
AFTER = [
    datetime(2018, 3, 9, 12, tzinfo=UTC),
    datetime(2018, 11, 2, 12, tzinfo=UTC),
    datetime(2011, 12, 28, tzinfo=UTC),
    datetime(2026, 3, 28, tzinfo=UTC),
]


def utc(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).astimezone(UTC)


def refusal(expression: str) -> str:
    with pytest.raises(cron.CronError) as caught:
        cron.CronSchedule.parse(expression)
    assert caught.value.field == "expression"
    return str(caught.value)


# --- the schedule ------------------------------------------------------------------------


@pytest.mark.parametrize("macro", sorted(MACROS))
def test_a_macro_fires_as_its_five_fields_in_any_zone(macro: str) -> None:
    for zone in ZONES:
        by_macro = cron.CronSchedule.parse(macro, zone)
        by_fields = cron.CronSchedule.parse(MACROS[macro], zone)
        assert by_macro == by_fields
        assert (by_macro.expression, by_macro.macro) == (MACROS[macro], macro)
        assert by_macro.fixed_hour == (macro != "@hourly")
        for after in AFTER:
            assert by_macro.preview(after, 30) == by_fields.preview(after, 30), (zone, after)


def test_macros_follow_the_dst_rules_of_their_fields() -> None:
    daily = cron.CronSchedule.parse("@daily", HAVANA)
    # Spring: 00:00 does not exist; the fixed-hour run is at 01:00 CDT, the gap's end.
    assert daily.preview(utc("2018-03-10T12:00:00Z"), 2) == [
        utc("2018-03-11T05:00:00Z"),
        utc("2018-03-12T04:00:00Z"),
    ]
    # Autumn: 00:00 happens twice; the fixed-hour run is at the first (CDT) only.
    assert daily.preview(utc("2018-11-03T12:00:00Z"), 2) == [
        utc("2018-11-04T04:00:00Z"),
        utc("2018-11-05T05:00:00Z"),
    ]
    # @hourly keeps real-time cadence: both 00:00s, no hour skipped or doubled.
    hourly = cron.CronSchedule.parse("@hourly", HAVANA)
    assert hourly.preview(utc("2018-11-04T03:30:00Z"), 3) == [
        utc("2018-11-04T04:00:00Z"),
        utc("2018-11-04T05:00:00Z"),
        utc("2018-11-04T06:00:00Z"),
    ]


@pytest.mark.parametrize("written", ["@DAILY", "@Daily", " @daily", "@daily\t", " \t@MidNight "])
def test_a_macro_is_read_in_any_case_with_blanks_around_it(written: str) -> None:
    schedule = cron.CronSchedule.parse(written, HAVANA)
    assert schedule.expression == "0 0 * * *"
    assert schedule.macro in ("@daily", "@midnight")


def test_a_schedule_from_a_macro_pickles_as_the_macro() -> None:
    schedule = cron.CronSchedule.parse("@weekly", HAVANA)
    again = pickle.loads(pickle.dumps(schedule))
    assert again == schedule and again.macro == "@weekly"


def test_expand_gives_the_five_fields_of_any_accepted_expression() -> None:
    assert cron.expand("@Annually") == "0 0 1 1 *"
    assert cron.expand(" 0  2 * * *") == "0 2 * * *"
    with pytest.raises(cron.CronError):
        cron.expand("@reboot")


def test_reboot_is_refused_with_what_to_do_instead() -> None:
    assert refusal("@reboot") == (
        "cron expression '@reboot': tickwork has no boot; enqueue a run when your service "
        "starts, or use runAt"
    )
    assert "tickwork has no boot" in refusal("@REBOOT")


@pytest.mark.parametrize(
    ("interval", "step"),
    [
        ("5m", "*/5 * * * *"),
        ("1m", "* * * * *"),
        ("15m", "*/15 * * * *"),
        ("60m", "0 * * * *"),
        ("1h", "0 * * * *"),
        ("2h", "0 */2 * * *"),
        ("1h0m0s", "0 * * * *"),
        ("24h", "0 0 * * *"),
    ],
)
def test_every_is_refused_naming_the_cron_step_that_fires_as_often(
    interval: str, step: str
) -> None:
    message = refusal(f"@every {interval}")
    assert "tickwork fires at clock times, not at intervals" in message
    assert message.endswith(f"write it as the cron step {step!r}")
    # The step named is one tickwork accepts.
    cron.validate(step)


@pytest.mark.parametrize("interval", ["", " 90m", " 7m", " 30s", " 1h30m", " 5h", " 48h", " x"])
def test_every_without_an_exact_step_is_refused_with_an_example(interval: str) -> None:
    message = refusal(f"@every{interval}")
    assert "write it as a cron step such as '*/5 * * * *'" in message
    if interval:
        assert f"no step fires exactly every {interval.strip()!r}" in message


@pytest.mark.parametrize(
    ("expression", "fragment"),
    [
        ("@fortnightly", "unknown macro '@fortnightly'; the macros are @yearly, @annually"),
        ("@", "unknown macro '@'"),
        ("@ daily", "unknown macro '@'"),
        ("@@daily", "unknown macro '@@daily'"),
        ("@daily *", "a macro stands for all five fields; write '@daily' alone"),
        ("@hourly 0 * * * *", "a macro stands for all five fields"),
        ("@daily\n", "holds '\\n' at position 6"),
        ("0 0 * * @daily", "day-of-week field: cannot read '@daily'"),
    ],
)
def test_anything_else_after_an_at_sign_is_refused(expression: str, fragment: str) -> None:
    with pytest.raises(cron.CronError) as caught:
        cron.CronSchedule.parse(expression)
    assert fragment in str(caught.value)


# --- the job spec: the API's body and a ScheduledJob's spec ---------------------------------


def test_the_spec_keeps_the_macro_as_written_and_compiles_its_fields() -> None:
    job = spec.parse(JobSpec, {"schedule": {"cron": "@Daily", "timeZone": HAVANA}})
    assert job.to_document()["schedule"]["cron"] == "@Daily"
    assert job.schedule is not None
    assert job.schedule.compile() == cron.CronSchedule.parse("0 0 * * *", HAVANA)


def test_the_spec_refuses_reboot_naming_schedule_cron() -> None:
    with pytest.raises(ValidationError) as caught:
        spec.parse(JobSpec, {"schedule": {"cron": "@reboot"}})
    (error,) = caught.value.errors()
    assert spec.error_field(error) == "schedule.cron"
    assert error["type"] == "invalid_schedule"
    assert "tickwork has no boot" in spec.error_message(error)


def test_the_crd_and_the_api_describe_the_macros() -> None:
    description = JobSpec.model_json_schema()["$defs"]["Schedule"]["properties"]["cron"]
    text = description["description"]
    for macro, fields in MACROS.items():
        assert f"`{macro}`" in text and f"({fields})" in text
    assert "`@reboot` and `@every` are refused" in text
    # What `kubectl explain scheduledjob.spec.schedule.cron` shows (the chart's copy is
    # checked to be the same file by the CRD tests).
    (crd,) = yaml.safe_load_all((Path(__file__).resolve().parents[2] / crd_module.PATH).read_text())
    (version,) = crd["spec"]["versions"]
    spec_schema = version["schema"]["openAPIV3Schema"]["properties"]["spec"]
    cron_schema = spec_schema["properties"]["schedule"]["properties"]["cron"]
    assert cron_schema["description"] == text
    assert "pattern" not in cron_schema  # nothing in the schema refuses '@'


def test_a_manifest_with_a_macro_loads_as_tickwork_dev_reads_it(tmp_path: Path) -> None:
    folder = tmp_path / "jobs"
    folder.mkdir()
    (folder / "nightly.yaml").write_text(
        "apiVersion: tickwork.dev/v1alpha1\nkind: ScheduledJob\n"
        "metadata: {name: nightly}\nspec: {schedule: {cron: '@midnight'}}\n"
    )
    (folder / "boot.yaml").write_text(
        "apiVersion: tickwork.dev/v1alpha1\nkind: ScheduledJob\n"
        "metadata: {name: boot}\nspec: {schedule: {cron: '@reboot'}}\n"
    )
    loaded, problems = manifests.load_folder(folder)
    assert [(job.name, job.spec.to_document()["schedule"]["cron"]) for job in loaded] == [
        ("nightly", "@midnight")
    ]
    assert len(problems) == 1
    assert "spec.schedule.cron: cron expression '@reboot': tickwork has no boot" in problems[0]


# --- tickwork schedule preview and the dashboard ---------------------------------------------


def preview(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, ["schedule", "preview", *args])
    return result.exit_code, result.output


def test_preview_of_daily_in_berlin_shows_the_expansion_and_local_midnights() -> None:
    code, output = preview(
        "@daily", "--tz", "Europe/Berlin", "--after", "2026-03-28T12:00:00Z", "--count", "3"
    )
    assert code == 0, output
    lines = output.splitlines()
    assert lines[0] == "@daily runs as 0 0 * * *"
    assert [line.split()[:3] for line in lines[2:]] == [
        ["2026-03-28T23:00:00Z", "2026-03-29", "00:00:00+01:00"],
        ["2026-03-29T22:00:00Z", "2026-03-30", "00:00:00+02:00"],
        ["2026-03-30T22:00:00Z", "2026-03-31", "00:00:00+02:00"],
    ]


def test_preview_of_daily_in_berlin_works_without_after() -> None:
    before = datetime.now(UTC)
    code, output = preview("@daily", "--tz", "Europe/Berlin", "--json", "--count", "1")
    assert code == 0, output
    (fire,) = [utc(text) for text in json.loads(output)]
    assert before < fire <= before + timedelta(hours=25)
    assert fire.astimezone(cron.CronSchedule.parse("@daily", "Europe/Berlin").tzinfo).hour == 0


def test_preview_json_of_a_macro_is_its_fields() -> None:
    args = ("--tz", HAVANA, "--after", "2018-11-03T12:00:00Z", "--count", "4", "--json")
    assert preview("@hourly", *args) == preview("0 * * * *", *args)


@pytest.mark.parametrize(
    ("expression", "fragment"),
    [("@reboot", "tickwork has no boot"), ("@every 5m", "'*/5 * * * *'")],
)
def test_preview_refuses_reboot_and_every_with_the_advice(expression: str, fragment: str) -> None:
    code, output = preview(expression)
    assert code == 2
    assert "Invalid value for 'CRON'" in output and fragment in output


@pytest.mark.parametrize("macro", sorted(MACROS))
def test_the_dashboard_words_of_a_macro_are_those_of_its_fields(macro: str) -> None:
    words = schedule_in_words(macro)
    assert words and words == schedule_in_words(MACROS[macro])
    assert schedule_in_words(f" {macro.upper()} ") == words
