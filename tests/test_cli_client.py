"""``tickwork jobs | runs | dlq`` against the real API."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from click.testing import CliRunner, Result
from conftest import ApiServer

from tickwork.cli import cli
from tickwork.core.errors import NotFound

MANIFEST = """\
apiVersion: tickwork.dev/v1alpha1
kind: ScheduledJob
metadata:
  name: nightly
spec:
  schedule: {cron: "30 2 * * *", timeZone: Europe/Berlin}
  queue: billing
"""


async def tickwork(api_server: ApiServer, *args: str, env: dict[str, str] | None = None) -> Result:
    """Run the CLI in a thread: the server answers on this test's event loop."""
    runner = CliRunner()
    environment = {"TICKWORK_URL": api_server.url, "TICKWORK_TOKEN": api_server.team_token}
    return await asyncio.to_thread(runner.invoke, cli, list(args), env=environment | (env or {}))


async def test_apply_list_run_and_inspect(api_server: ApiServer, tmp_path: Path) -> None:
    manifest = tmp_path / "nightly.yaml"
    manifest.write_text(MANIFEST)
    applied = await tickwork(api_server, "jobs", "apply", "-f", str(manifest))
    assert applied.exit_code == 0, applied.output
    listed = await tickwork(api_server, "jobs", "list")
    assert listed.exit_code == 0
    header, row = listed.output.splitlines()[:2]
    assert header.split() == [
        *("NAME", "CRON", "ZONE", "QUEUE", "PRIORITY", "PAUSED", "NEXT", "LAST"),
        *("ACTIVE", "DEAD"),
    ]
    assert row.split()[:2] == ["nightly", "30"] and "Europe/Berlin  billing" in row
    assert " false " in row  # JSON's words, not Python's
    assert header == header.rstrip()

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
    assert empty.exit_code == 0 and empty.output.split() == [
        "RUN",
        "JOB",
        "ATTEMPT",
        "DIED",
        "ERROR",
    ]


def in_namespace(namespace: str) -> str:
    return MANIFEST.replace("  name: nightly\n", f"  name: nightly\n  namespace: {namespace}\n")


async def test_apply_acts_for_the_manifests_namespace(
    api_server: ApiServer, tmp_path: Path
) -> None:
    manifest = tmp_path / "nightly.yaml"
    manifest.write_text(in_namespace("globex"))
    env = {"TICKWORK_TOKEN": api_server.admin_token}
    applied = await tickwork(api_server, "jobs", "apply", "-f", str(manifest), env=env)
    assert applied.exit_code == 0, applied.output
    assert (await api_server.jobs.get("globex", "nightly")).definition.spec.queue == "billing"
    listed = await tickwork(api_server, "jobs", "list", "--tenant", "ops", env=env)
    assert "nightly" not in listed.output  # not in the admin's own tenant

    # A team token applies its own namespace, and refuses another one, saying why.
    manifest.write_text(in_namespace("acme"))
    mine = await tickwork(api_server, "jobs", "apply", "-f", str(manifest))
    assert mine.exit_code == 0, mine.output
    assert (await api_server.jobs.get("acme", "nightly")).definition.tenant == "acme"
    manifest.write_text(in_namespace("initech"))
    refused = await tickwork(api_server, "jobs", "apply", "-f", str(manifest))
    assert refused.exit_code == 1
    assert f"{manifest}: nightly is in namespace 'initech'" in refused.output
    assert "may not act for that tenant" in refused.output
    with pytest.raises(NotFound):
        await api_server.jobs.get("initech", "nightly")


async def test_audit_lists_who_changed_what(api_server: ApiServer, tmp_path: Path) -> None:
    manifest = tmp_path / "nightly.yaml"
    manifest.write_text(MANIFEST)
    assert (await tickwork(api_server, "jobs", "apply", "-f", str(manifest))).exit_code == 0
    assert (await tickwork(api_server, "jobs", "pause", "nightly")).exit_code == 0
    listed = await tickwork(api_server, "audit", "--job", "nightly")
    assert listed.exit_code == 0, listed.output
    header, *rows = listed.output.splitlines()
    assert header.split() == ["AT", "JOB", "ACTION", "RUN", "ACTOR", "DETAIL"]
    assert [row.split()[1:5] for row in rows] == [
        ["nightly", "pause", "-", "acme-team"],
        ["nightly", "create", "-", "acme-team"],
    ]
    assert rows[1].endswith('{"generation":1}')
