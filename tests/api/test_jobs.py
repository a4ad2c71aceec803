"""Job definitions over HTTP: create/replace, status, delete, paging, pause/resume."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from conftest import ApiServer

from api.clients import client, instant, lease

SPEC: dict[str, Any] = {
    "schedule": {"cron": "0 2 * * *", "timeZone": "UTC", "jitterSeconds": 0},
    "queue": "billing",
    "priority": "critical",
    "timeoutSeconds": 900,
    "retry": {"maxAttempts": 5, "baseSeconds": 30, "maxSeconds": 1800},
    "concurrency": 1,
    "payload": {"format": "csv"},
}


async def test_the_reference_designs_own_definition_is_taken_with_its_name(
    api_server: ApiServer,
) -> None:
    """Section 4.2 of the reference design writes the job with its name in the body."""
    # The design's example is SPEC on Berlin time, with the missed-run policy spelled out.
    schedule = {**SPEC["schedule"], "timeZone": "Europe/Berlin", "missedRunPolicy": "run_once"}
    document = {"name": "billing.export-invoices", **SPEC, "schedule": schedule}
    async with client(api_server, api_server.team_token) as team:
        created = await team.put("/v1/jobs/billing.export-invoices", json=document)
        assert created.status_code == 201, created.text
        assert created.json()["name"] == "billing.export-invoices"
        assert "name" not in created.json()["spec"]
        other = await team.put("/v1/jobs/billing.other", json=document)
        assert other.status_code == 400
        assert other.json()["type"].endswith("/invalid-request")
        assert other.json()["field"] == "name"
        assert "must be the name in the path ('billing.other')" in other.json()["detail"]
        assert (await team.get("/v1/jobs/billing.other")).status_code == 404


async def test_put_creates_then_replaces_and_get_shows_the_job(api_server: ApiServer) -> None:
    async with client(api_server, api_server.team_token) as team:
        created = await team.put("/v1/jobs/export-invoices", json=SPEC)
        assert created.status_code == 201, created.text
        assert created.headers["content-type"] == "application/json"
        job = created.json()
        assert job["name"] == "export-invoices"
        assert job["tenant"] == "acme"
        assert job["paused"] is False
        assert job["spec"]["schedule"]["cron"] == "0 2 * * *"
        assert job["spec"]["queue"] == "billing"
        assert job["spec"]["priority"] == "critical"
        assert job["spec"]["retry"] == {"maxAttempts": 5, "baseSeconds": 30, "maxSeconds": 1800}
        assert job["spec"]["payload"] == {"format": "csv"}
        assert job["activeRuns"] == 0 and job["deadRuns"] == 0 and job["lastRun"] is None
        assert isinstance(job["shard"], int)
        # The next fire time: 02:00 UTC strictly after the job was created.
        created_at = instant(job["createdAt"])
        expected = created_at.replace(hour=2, minute=0, second=0, microsecond=0)
        if expected <= created_at:
            expected += timedelta(days=1)
        assert instant(job["nextRunAt"]) == expected

        replaced = await team.put(
            "/v1/jobs/export-invoices",
            json=SPEC | {"queue": "default", "priority": "bulk", "payload": {"format": "json"}},
        )
        assert replaced.status_code == 200, replaced.text
        again = replaced.json()
        assert again["spec"]["queue"] == "default"
        assert again["spec"]["priority"] == "bulk"
        assert again["spec"]["payload"] == {"format": "json"}
        assert again["createdAt"] == job["createdAt"]
        assert instant(again["updatedAt"]) >= instant(job["updatedAt"])
        # The schedule did not change, so neither does the next fire time.
        assert again["nextRunAt"] == job["nextRunAt"]

        fetched = await team.get("/v1/jobs/export-invoices")
        assert fetched.status_code == 200
        assert fetched.json()["spec"] == again["spec"]
        assert set(fetched.json()) == {
            "name",
            "tenant",
            "spec",
            "paused",
            "pausedReason",
            "consecutiveDeadRuns",
            "nextRunAt",
            "lastRun",
            "activeRuns",
            "deadRuns",
            "missedRunsDropped",
            "overlapSkipped",
            "shard",
            "managedBy",
            "createdAt",
            "updatedAt",
        }


async def test_job_status_counts_active_and_dead_runs_and_shows_the_last_run(
    api_server: ApiServer,
) -> None:
    spec = {"queue": "default", "retry": {"maxAttempts": 1, "baseSeconds": 0}}
    async with client(api_server, api_server.team_token) as team:
        assert (await team.put("/v1/jobs/reports", json=spec)).status_code == 201
        job = (await team.get("/v1/jobs/reports")).json()
        assert job["nextRunAt"] is None  # no schedule: runs only when enqueued

        first = (await team.post("/v1/jobs/reports/runs")).json()
        [granted] = await lease(api_server)
        assert granted["runId"] == first["runId"]
        job = (await team.get("/v1/jobs/reports")).json()
        assert job["activeRuns"] == 1 and job["deadRuns"] == 0 and job["lastRun"] is None

        async with client(api_server, api_server.worker_token) as worker:
            done = await worker.post(
                f"/v1/runs/{first['runId']}/complete",
                json={
                    "fencingToken": granted["fencingToken"],
                    "outcome": "failed",
                    "error": {"message": "boom"},
                },
            )
        assert done.json()["state"] == "dead"
        job = (await team.get("/v1/jobs/reports")).json()
        assert job["activeRuns"] == 0 and job["deadRuns"] == 1
        assert job["lastRun"]["runId"] == first["runId"]
        assert job["lastRun"]["state"] == "dead"
        assert job["lastRun"]["dueAt"] == first["dueAt"]
        assert instant(job["lastRun"]["finishedAt"]) >= instant(first["createdAt"])


async def test_delete_cancels_pending_runs_and_keeps_their_history(api_server: ApiServer) -> None:
    async with client(api_server, api_server.team_token) as team:
        assert (await team.put("/v1/jobs/cleanup", json={"queue": "default"})).status_code == 201
        ready = (await team.post("/v1/jobs/cleanup/runs")).json()
        later = (await team.post("/v1/jobs/cleanup/runs", json={"delaySeconds": 3600})).json()
        assert (ready["state"], later["state"]) == ("ready", "scheduled")
        leased_run = (await team.post("/v1/jobs/cleanup/runs")).json()
        # Lease both ready runs: one finishes, the other is still running at delete.
        async with client(api_server, api_server.worker_token) as worker:
            response = await worker.post("/v1/lease", json={"queues": ["default"], "max": 10})
        leases = {item["runId"]: item for item in response.json()["leases"]}
        assert set(leases) == {ready["runId"], leased_run["runId"]}
        async with client(api_server, api_server.worker_token) as worker:
            await worker.post(
                f"/v1/runs/{ready['runId']}/complete",
                json={
                    "fencingToken": leases[ready["runId"]]["fencingToken"],
                    "outcome": "succeeded",
                },
            )
        pending = (await team.post("/v1/jobs/cleanup/runs")).json()

        deleted = await team.delete("/v1/jobs/cleanup")
        assert deleted.status_code == 200, deleted.text
        assert deleted.json()["cancelledRuns"] == 2
        assert deleted.json()["cancelRequestedRuns"] == 1

        assert (await team.get("/v1/jobs/cleanup")).status_code == 404
        assert (await team.delete("/v1/jobs/cleanup")).status_code == 404
        for run_id, state in [
            (ready["runId"], "succeeded"),
            (later["runId"], "cancelled"),
            (pending["runId"], "cancelled"),
            (leased_run["runId"], "leased"),
        ]:
            history = await team.get(f"/v1/runs/{run_id}")
            assert history.status_code == 200, history.text
            assert history.json()["state"] == state
        assert (await team.get(f"/v1/runs/{leased_run['runId']}")).json()["cancelRequested"]
        # A later enqueue of the deleted job is refused.
        assert (await team.post("/v1/jobs/cleanup/runs")).status_code == 404


async def test_list_pages_through_every_job_of_the_tenant_across_shards(
    api_server: ApiServer,
) -> None:
    names = [f"job-{n:02d}" for n in range(12)]
    async with client(api_server, api_server.team_token) as team:
        for name in reversed(names):
            assert (await team.put(f"/v1/jobs/{name}", json={})).status_code == 201
    async with client(api_server, api_server.other_team_token) as other:
        assert (await other.put("/v1/jobs/job-99", json={})).status_code == 201

    seen: list[str] = []
    shards: set[int] = set()
    pages = 0
    cursor: str | None = None
    async with client(api_server, api_server.team_token) as team:
        while True:
            params: dict[str, str | int] = {"limit": 5}
            if cursor is not None:
                params["cursor"] = cursor
            response = await team.get("/v1/jobs", params=params)
            assert response.status_code == 200, response.text
            page = response.json()
            assert len(page["items"]) <= 5
            seen += [item["name"] for item in page["items"]]
            shards |= {item["shard"] for item in page["items"]}
            assert all(item["tenant"] == "acme" for item in page["items"])
            pages += 1
            cursor = page["nextCursor"]
            if cursor is None:
                break
    assert seen == names  # by name, each once, nothing from globex
    assert pages == 3
    assert len(shards) > 1

    async with client(api_server, api_server.team_token) as team:
        everything = (await team.get("/v1/jobs")).json()
    assert [item["name"] for item in everything["items"]] == names
    assert everything["nextCursor"] is None


async def test_pause_and_resume_are_idempotent(api_server: ApiServer) -> None:
    async with client(api_server, api_server.team_token) as team:
        assert (await team.put("/v1/jobs/nightly", json=SPEC)).status_code == 201
        first = await team.post("/v1/jobs/nightly:pause")
        assert first.status_code == 200, first.text
        assert first.json()["paused"] is True
        assert first.json()["spec"]["paused"] is True
        second = await team.post("/v1/jobs/nightly:pause")
        assert second.status_code == 200
        assert second.json()["paused"] is True
        assert second.json()["updatedAt"] == first.json()["updatedAt"]
        assert (await team.get("/v1/jobs/nightly")).json()["paused"] is True

        resumed = await team.post("/v1/jobs/nightly:resume")
        assert resumed.status_code == 200
        assert resumed.json()["paused"] is False
        assert resumed.json()["spec"].get("paused", False) is False
        assert (await team.post("/v1/jobs/nightly:resume")).json()["paused"] is False
        assert (await team.get("/v1/jobs/nightly")).json()["paused"] is False

        missing = await team.post("/v1/jobs/no-such-job:pause")
        assert missing.status_code == 404
        assert missing.json()["type"] == "https://tickwork.dev/problems/not-found"
