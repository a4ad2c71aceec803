"""``tickwork bulk | operations`` against the real API: a dry run's count, an operation
followed with its progress bar to the end, listing and cancelling."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime, timedelta

import pytest
from bulk_seeding import TENANT, seed_dead, states
from click.testing import CliRunner, Result
from conftest import ApiServer

from tickwork.cli import cli
from tickwork.cli import operations as cli_operations

DIED = datetime.now(UTC) - timedelta(hours=1)


def invoke(api_server: ApiServer, *args: str) -> Result:
    environment = {"TICKWORK_URL": api_server.url, "TICKWORK_TOKEN": api_server.team_token}
    return CliRunner().invoke(cli, list(args), env=environment)


async def tickwork(api_server: ApiServer, *args: str) -> Result:
    """Run the CLI in a thread: the server answers on this test's event loop."""
    return await asyncio.to_thread(invoke, api_server, *args)


async def test_dry_run_follow_list_and_cancel(
    api_server: ApiServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(cli_operations, "POLL_SECONDS", 0.05)
    await seed_dead(api_server.database, TENANT, "export-a", 12, DIED, "Timeout")
    await seed_dead(api_server.database, TENANT, "report", 3, DIED, "boom")

    counted = await tickwork(api_server, "bulk", "replay", "--job-pattern", "export-*", "--dry-run")
    assert counted.exit_code == 0, counted.output
    assert counted.output.strip() == "12 run(s) would be replayed"
    bad = await tickwork(api_server, "bulk", "replay", "--min-attempts", "-1")
    assert bad.exit_code != 0 and "minAttempts" in bad.output

    following = asyncio.create_task(
        tickwork(api_server, "bulk", "replay", "--error-contains", "timeout")
    )
    while not following.done():
        await api_server.scheduler.pass_once()
        await asyncio.sleep(0.05)
    followed = following.result()
    assert followed.exit_code == 0, followed.output
    assert "done" in followed.output and " 12 " in followed.output
    assert await states(api_server.database, TENANT) == {"ready": 12, "dead": 3}

    listed = await tickwork(api_server, "bulk", "list", "--state", "dead", "--json")
    assert {item["job"] for item in json.loads(listed.output)["items"]} == {"report"}
    started = await tickwork(api_server, "bulk", "discard", "--no-wait", "--json")
    operation = json.loads(started.output)
    assert (operation["state"], operation["total"]) == ("running", 3)
    stopped = await tickwork(api_server, "operations", "cancel", operation["id"])
    assert stopped.exit_code == 0 and "cancelled" in stopped.output
    history = await tickwork(api_server, "operations", "list")
    assert history.output.splitlines()[0].split()[:3] == ["OPERATION", "ACTION", "STATE"]
    assert len(history.output.splitlines()) == 3
