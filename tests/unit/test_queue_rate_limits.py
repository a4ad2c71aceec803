"""Queue-wide rate limits set on the dispatcher (``--queue-rate-limit``): a value the
dispatcher or ``tickwork dev`` cannot use stops it before it starts, naming the option
(the limits at work are in tests/test_queue_rate_limits.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from tickwork.cli import cli


@pytest.mark.parametrize(
    ("value", "says"),
    [
        ("reports=0/60", "the limit must be 1 to"),
        ("reports=10", "is not QUEUE=LIMIT/SECONDS"),
        ("Reports=10/60", "queue must be"),
        ("reports=10/0.5", "the period must be 1 to"),
        ("reports=10/60 reports=5/1", "given two rate limits"),
    ],
)
def test_a_bad_queue_rate_limit_stops_the_dispatcher_naming_the_option(
    value: str, says: str
) -> None:
    nowhere = "postgresql://127.0.0.1:1/nothing"
    result = CliRunner().invoke(
        cli,
        ["dispatcher", "--database-url", nowhere, "--port", "0"],
        env={"TICKWORK_QUEUE_RATE_LIMITS": value},
    )
    assert result.exit_code == 2, result.output
    assert "--queue-rate-limit" in result.output
    assert says in result.output


def test_tickwork_dev_takes_the_option_and_refuses_a_bad_value(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        cli,
        ["dev", "--data-dir", str(tmp_path), "--queue-rate-limit", "reports=100/0"],
    )
    assert result.exit_code == 2, result.output
    assert "--queue-rate-limit" in result.output
    assert "the period must be 1 to 86400 s" in result.output
    assert not any(tmp_path.iterdir())  # refused before anything started
