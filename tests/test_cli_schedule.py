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
    assert lines[1].split() == ["2024-10-27T00:00:00Z", "2024-10-27", "02:00:00+02:00", "CEST"]
    assert lines[2].split() == ["2024-10-27T01:00:00Z", "2024-10-27", "02:00:00+01:00", "CET"]
    assert lines[3].split() == ["2024-10-27T02:00:00Z", "2024-10-27", "03:00:00+01:00", "CET"]


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
    for option in ("--tz", "--after", "--count", "--jitter-seconds", "--job", "--json"):
        assert option in result.stdout
