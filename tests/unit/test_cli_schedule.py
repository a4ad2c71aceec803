"""``tickwork schedule preview`` through the real click entry point."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest
from click.testing import CliRunner, Result

from tickwork.cli import cli
from tickwork.core import hashing


def run(*args: str) -> Result:
    return CliRunner().invoke(cli, ["schedule", "preview", *args])


def test_json_output_is_exact() -> None:
    result = run(
        "30 2 * * *", "--tz", "Europe/Berlin", "--after", "2024-03-30T00:00:00Z",
        "--count", "3", "--json",
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert result.stdout == (
        '["2024-03-30T01:30:00Z", "2024-03-31T01:00:00Z", "2024-04-01T00:30:00Z"]\n'
    )


def test_default_count_is_five_and_zone_is_utc() -> None:
    result = run("0 0 * * *", "--after", "2024-01-01T00:00:00Z", "--json")
    assert json.loads(result.stdout) == [f"2024-01-0{day}T00:00:00Z" for day in range(2, 7)]


def test_after_accepts_any_offset() -> None:
    result = run("0 * * * *", "--after", "2024-01-01T05:30:00+05:30", "--count", "1", "--json")
    assert json.loads(result.stdout) == ["2024-01-01T01:00:00Z"]


def test_after_defaults_to_now() -> None:
    before = datetime.now(UTC)
    result = run("* * * * *", "--count", "1", "--json")
    assert result.exit_code == 0, result.output
    (first,) = json.loads(result.stdout)
    fire = datetime.fromisoformat(first)
    assert (
        before < fire <= datetime.now(UTC).replace(second=0, microsecond=0) + timedelta(minutes=1)
    )


def test_table_shows_utc_and_local_wall_time() -> None:
    result = run(
        "0 * * * *", "--tz", "Europe/Berlin", "--after", "2024-10-26T23:30:00Z", "--count", "3"
    )
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[0].split() == ["UTC", "local", "(Europe/Berlin)"]
    # The two 02:00 say they are the two occurrences of a repeated local time.
    assert lines[1].split()[:4] == ["2024-10-27T00:00:00Z", "2024-10-27", "02:00:00+02:00", "CEST"]
    assert lines[2].split()[:4] == ["2024-10-27T01:00:00Z", "2024-10-27", "02:00:00+01:00", "CET"]
    assert lines[3].split() == ["2024-10-27T02:00:00Z", "2024-10-27", "03:00:00+01:00", "CET"]
    assert lines[1].endswith("runs at both, this is the first (CEST)")
    assert lines[2].endswith("runs at both, this is the second (CET)")


def test_jitter_shifts_every_instant_by_the_job_offset() -> None:
    offset = hashing.jitter_offset("acme", "nightly", 600)
    assert 0 < offset < 600  # a zero offset would make this test say nothing
    result = run(
        "0 0 * * *", "--after", "2024-01-01T00:00:00Z", "--count", "2",
        "--jitter-seconds", "600", "--job", "acme/nightly", "--json",
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    minutes, seconds = divmod(offset, 60)
    assert json.loads(result.stdout) == [
        f"2024-01-0{day}T00:{minutes:02d}:{seconds:02d}Z" for day in (2, 3)
    ]


def test_jitter_is_named_in_the_table() -> None:
    offset = hashing.jitter_offset("acme", "nightly", 600)
    result = run(
        "0 0 * * *", "--after", "2024-01-01T00:00:00Z", "--count", "1",
        "--jitter-seconds", "600", "--job", "acme/nightly",
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert f"+{offset}s for acme/nightly" in result.stdout.splitlines()[0]


def test_zero_jitter_pins_the_exact_time() -> None:
    result = run(
        "0 0 * * *", "--after", "2024-01-01T00:00:00Z", "--count", "1",
        "--jitter-seconds", "0", "--job", "acme/nightly", "--json",
    )  # fmt: skip
    assert json.loads(result.stdout) == ["2024-01-02T00:00:00Z"]


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["0 0 31 2 *"], "never fires"),
        (["61 * * * *"], "minute field: 61 is out of range 0-59"),
        (["* * * *"], "has 4 fields, expected 5"),
        (["0 0 * * *", "--tz", "Mars/Olympus"], "unknown time zone 'Mars/Olympus'"),
        (["0 0 * * *", "--after", "2024-01-01"], "'2024-01-01' is not an RFC 3339 instant"),
        (["0 0 * * *", "--after", "2024-01-01T00:00:00"], "is not an RFC 3339 instant"),
        (["0 0 * * *", "--after", "2024-13-01T00:00:00Z"], "'--after'"),
        (["0 0 * * *", "--job", "acme/x", "--jitter-seconds", "-1"], "'--jitter-seconds'"),
        (["0 0 * * *", "--job", "acme/x", "--jitter-seconds", "3601"], "'--jitter-seconds'"),
        (["0 0 * * *", "--jitter-seconds", "60"], "--jitter-seconds needs --job"),
        (["0 0 * * *", "--job", "acme/x"], "add --jitter-seconds"),
        (["0 0 * * *", "--job", "acme", "--jitter-seconds", "60"], "'acme' is not TENANT/NAME"),
        (["0 0 * * *", "--job", "a/b/c", "--jitter-seconds", "60"], "is not TENANT/NAME"),
        (["0 0 * * *", "--job", "/b", "--jitter-seconds", "60"], "is not TENANT/NAME"),
        (["0 0 * * *", "--count", "0"], "'--count'"),
    ],
)
def test_invalid_input_exits_2_with_one_clear_line(args: list[str], fragment: str) -> None:
    result = run(*args)
    assert result.exit_code == 2, result.output
    assert result.stdout == ""
    errors = [line for line in result.stderr.splitlines() if line.startswith("Error:")]
    assert len(errors) == 1
    assert fragment in errors[0]


def test_error_for_the_zone_points_at_the_option() -> None:
    result = run("0 0 * * *", "--tz", "Nowhere/Atall")
    assert "Invalid value for '--tz'" in result.stderr


def test_help_lists_the_options() -> None:
    result = run("--help")
    assert result.exit_code == 0
    for option in (
        "--tz",
        "--after",
        "--count",
        "--jitter-seconds",
        "--job",
        "--dst-repeated",
        "--dst-skipped",
        "--json",
    ):
        assert option in result.stdout


# --- the DST policy: --dst-repeated, --dst-skipped --------------------------------------


def table(*args: str) -> list[str]:
    result = run(*args)
    assert result.exit_code == 0, result.output
    return result.stdout.splitlines()


BERLIN_FALL = ("30 2 * * *", "--tz", "Europe/Berlin", "--after", "2026-10-24T12:00:00Z")
BERLIN_SPRING = ("30 2 * * *", "--tz", "Europe/Berlin", "--after", "2026-03-28T12:00:00Z")


def test_the_preview_shows_what_the_policy_did_on_each_night() -> None:
    overlap = "DST overlap: 02:30 happens twice on Sun 25 Oct (clocks go back)"
    assert table(*BERLIN_FALL, "--count", "2", "--dst-repeated", "last") == [
        "DST policy: repeated last; skipped shift (the default for a fixed-hour schedule)",
        "UTC                   local (Europe/Berlin)",
        f"2026-10-25T01:30:00Z  2026-10-25 02:30:00+01:00 CET  {overlap}; runs once, at the "
        "second (CET)",
        "2026-10-26T01:30:00Z  2026-10-26 02:30:00+01:00 CET",
    ]
    both = table(*BERLIN_FALL, "--count", "3", "--dst-repeated", "both")
    assert both[2] == (
        f"2026-10-25T00:30:00Z  2026-10-25 02:30:00+02:00 CEST  {overlap}; runs at both, "
        "this is the first (CEST)"
    )
    assert both[3] == (
        f"2026-10-25T01:30:00Z  2026-10-25 02:30:00+01:00 CET   {overlap}; runs at both, "
        "this is the second (CET)"
    )
    gap = "DST gap: 02:30 does not exist on Sun 29 Mar (clocks go forward 02:00 → 03:00)"
    assert table(*BERLIN_SPRING, "--count", "2", "--dst-skipped", "skip") == [
        "DST policy: repeated first (the default for a fixed-hour schedule); skipped skip",
        "UTC                   local (Europe/Berlin)",
        f"2026-03-30T00:30:00Z  2026-03-30 02:30:00+02:00 CEST  {gap}; not run",
        "2026-03-31T00:30:00Z  2026-03-31 02:30:00+02:00 CEST",
    ]
    # Without a choice: the hour field's rule, and no policy line.
    assert table(*BERLIN_SPRING, "--count", "1") == [
        "UTC                   local (Europe/Berlin)",
        f"2026-03-29T01:00:00Z  2026-03-29 03:00:00+02:00 CEST  {gap}; runs at 03:00 instead",
    ]


def test_the_policy_applies_to_json_and_to_macros() -> None:
    hourly = ("--tz", "Europe/Berlin", "--after", "2026-10-24T23:30:00Z", "--count", "3", "--json")
    assert json.loads(run("@hourly", *hourly).stdout) == [
        "2026-10-25T00:00:00Z",
        "2026-10-25T01:00:00Z",
        "2026-10-25T02:00:00Z",
    ]
    assert json.loads(run("@hourly", *hourly, "--dst-repeated", "first").stdout) == [
        "2026-10-25T00:00:00Z",
        "2026-10-25T02:00:00Z",
        "2026-10-25T03:00:00Z",
    ]
    spring = ("--tz", "Europe/Berlin", "--after", "2026-03-28T12:00:00Z", "--count", "1", "--json")
    assert json.loads(run("*/30 2 * * *", *spring, "--dst-skipped", "skip").stdout) == [
        "2026-03-30T00:00:00Z"
    ]


def test_an_unknown_choice_is_refused_naming_the_option() -> None:
    result = run("30 2 * * *", "--dst-repeated", "second")
    assert result.exit_code == 2
    assert "Invalid value for '--dst-repeated'" in result.stderr
    assert "'first', 'last', 'both'" in result.stderr
    result = run("30 2 * * *", "--dst-skipped", "later")
    assert result.exit_code == 2 and "'--dst-skipped'" in result.stderr
