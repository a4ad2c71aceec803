"""Queues through the API, the CLI and the metrics: a team pauses its queue while what
its runs call recovers, its workers get nothing meanwhile, enqueues go on, the audit
says who, and resuming hands the waiting runs out."""

from __future__ import annotations

import asyncio
from typing import Any

from click.testing import CliRunner
from conftest import ApiServer

from api.clients import client, lease
from tickwork.cli import cli
from tickwork.engine.metrics import Metrics
from tickwork.engine.observer import ShardObserver


async def test_a_paused_queue_keeps_its_runs_until_resumed(api_server: ApiServer) -> None:
    async with client(api_server, api_server.team_token) as team:
        assert (await team.put("/v1/jobs/invoice", json={"queue": "billing"})).status_code == 201
        paused = await team.post("/v1/queues/billing:pause")
        assert paused.status_code == 200, paused.text
        body = paused.json()
        assert (body["queue"], body["paused"], body["jobs"]) == ("billing", True, 1)
        assert body["pausedBy"] == "acme-team"
        # Enqueues go on; workers get nothing.
        for _ in range(3):
            assert (await team.post("/v1/jobs/invoice/runs")).status_code == 201
        assert await lease(api_server, queues=["billing"], max=10) == []
        listed = (await team.get("/v1/queues")).json()["items"]
        assert [(q["queue"], q["paused"]) for q in listed] == [("billing", True)]
        audit = (await team.get("/v1/audit")).json()["items"]
        queue_entries = [e for e in audit if e["action"].endswith("-queue")]
        assert [e["action"] for e in queue_entries] == ["pause-queue"]
        assert queue_entries[0]["detail"] == {"queue": "billing"}
        assert queue_entries[0]["actor"] == body["pausedBy"]

        resumed = await team.post("/v1/queues/billing:resume")
        assert resumed.json()["paused"] is False
        assert len(await lease(api_server, queues=["billing"], max=10)) == 3
        audit = (await team.get("/v1/audit")).json()["items"]
        actions = [e["action"] for e in audit if e["action"].endswith("-queue")]
        assert actions == ["resume-queue", "pause-queue"]


async def test_who_may_pause_and_what_is_refused(api_server: ApiServer) -> None:
    async with client(api_server, api_server.worker_token) as worker:
        refused = await worker.post("/v1/queues/billing:pause")
        assert refused.status_code == 403
    async with client(api_server, api_server.team_token) as team:
        bad = await team.post("/v1/queues/Not_A_Queue:pause")
        assert bad.status_code == 400
        assert bad.json()["field"] == "queue"
    # Another tenant's pause of its own queue of the same name changes nothing here.
    async with client(api_server, api_server.other_team_token) as other:
        assert (await other.post("/v1/queues/billing:pause")).json()["paused"] is True
    async with client(api_server, api_server.team_token) as team:
        await team.put("/v1/jobs/invoice", json={"queue": "billing"})
        await team.post("/v1/jobs/invoice/runs")
        assert [q["paused"] for q in (await team.get("/v1/queues")).json()["items"]] == [False]
    assert len(await lease(api_server, queues=["billing"], max=10)) == 1


async def test_the_cli_pauses_lists_and_resumes(api_server: ApiServer) -> None:
    def tickwork(*args: str) -> Any:
        env = {"TICKWORK_URL": api_server.url, "TICKWORK_TOKEN": api_server.team_token}
        return CliRunner().invoke(cli, ["queues", *args], env=env)

    paused = await asyncio.to_thread(tickwork, "pause", "billing")
    assert paused.exit_code == 0, paused.output
    header, row = paused.output.splitlines()
    assert header.split() == ["QUEUE", "JOBS", "PAUSED", "SINCE", "BY"]
    assert row.split()[:3] == ["billing", "0", "true"]
    listed = await asyncio.to_thread(tickwork, "list")
    assert "billing" in listed.output and "true" in listed.output
    resumed = await asyncio.to_thread(tickwork, "resume", "billing")
    assert resumed.output.splitlines()[1].split()[:3] == ["billing", "0", "false"]


async def test_the_paused_queue_gauge(api_server: ApiServer) -> None:
    metrics = Metrics()
    observer = ShardObserver(metrics, canary=False)
    database = api_server.database

    async def observe() -> set[tuple[str, str]]:
        async with database.connection(0) as conn:
            now = await conn.fetchval("SELECT now()")
            observer._shards.clear()  # look now, whatever the interval
            await observer.observe(conn, 0, now)
        return {
            (s.labels["tenant"], s.labels["queue"])
            for family in metrics.registry.collect()
            if family.name == "tickwork_queue_paused"
            for s in family.samples
            if s.value == 1
        }

    async with client(api_server, api_server.team_token) as team:
        await team.post("/v1/queues/billing:pause")
        assert await observe() == {("acme", "billing")}
        await team.post("/v1/queues/billing:resume")
        assert await observe() == set()
