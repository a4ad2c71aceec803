"""``tickwork jobs | runs | dlq`` against the real API."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from click.testing import CliRunner, Result
from conftest import ApiServer

from tickwork.cli import cli

MANIFEST = """\
apiVersion: tickwork.dev/v1
kind: ScheduledJob
metadata:
  name: nightly
spec:
  schedule: {cron: "30 2 * * *", timeZone: Europe/Berlin}
  queue: billing
"""


async def tickwork(api_server: ApiServer, *args: str) -> Result:
    """Run the CLI in a thread: the server answers on this test's event loop."""
    runner = CliRunner()
    env = {"TICKWORK_URL": api_server.url, "TICKWORK_TOKEN": api_server.team_token}
    return await asyncio.to_thread(runner.invoke, cli, list(args), env=env)


async def test_apply_list_run_and_inspect(api_server: ApiServer, tmp_path: Path) -> None:
    manifest = tmp_path / "nightly.yaml"
    manifest.write_text(MANIFEST)
    applied = await tickwork(api_server, "jobs", "apply", "-f", str(manifest))
    assert applied.exit_code == 0, applied.output
    listed = await tickwork(api_server, "jobs", "list")
    assert listed.exit_code == 0
    header, row = listed.output.splitlines()[:2]
    assert header.split()[:3] == ["NAME", "SPEC.SCHEDULE.CRON", "SPEC.QUEUE"]
    assert row.split()[0] == "nightly" and "billing" in row

    enqueued = await tickwork(
        api_server, "jobs", "run", "nightly", "--payload", '{"day": 1}', "--json"
    )
    assert enqueued.exit_code == 0, enqueued.output
    run = json.loads(enqueued.output)
    assert (run["state"], run["payload"]) == ("ready", {"day": 1})

    runs = json.loads((await tickwork(api_server, "runs", "list", "nightly", "--json")).output)
    assert [item["runId"] for item in runs["items"]] == [run["runId"]]
    cancelled = await tickwork(api_server, "runs", "cancel", run["runId"])
    assert cancelled.exit_code == 0 and "cancelled" in cancelled.output
    shown = await tickwork(api_server, "runs", "get", run["runId"], "--json")
    assert json.loads(shown.output)["state"] == "cancelled"


async def test_problems_are_one_line_and_exit_non_zero(api_server: ApiServer) -> None:
    missing = await tickwork(api_server, "jobs", "get", "nope")
    assert missing.exit_code == 1
    assert "404 Not found: no job 'nope' in tenant 'acme'" in missing.output
    bad = await tickwork(api_server, "jobs", "run", "nope", "--payload", "{not json")
    assert bad.exit_code == 2 and "--payload" in bad.output
    empty = await tickwork(api_server, "dlq", "list")
    assert empty.exit_code == 0 and empty.output.split()[0] == "RUNID"
