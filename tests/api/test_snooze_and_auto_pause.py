"""Snooze and auto-pause over HTTP: a snoozed completion (fast path and routed alike,
see test_fast_path), its validation naming the field, the run's history and the metric;
a job pauseAfterFailures paused, as its resource shows it, and resumed through the API
(a managed one included)."""

from __future__ import annotations

from datetime import timedelta

from conftest import ApiServer

from api.clients import (
    assert_problem,
    client,
    complete,
    enqueue,
    get_run,
    instant,
    lease,
    make_job,
)
from tickwork.core.records import Manager
from tickwork.core.spec import JobSpec, Retry


async def test_a_snoozed_run_comes_back_with_the_same_attempt(api_server: ApiServer) -> None:
    await make_job(api_server, "waits")
    run = await enqueue(api_server, "waits")
    [granted] = await lease(api_server)
    response = await complete(api_server, granted, "snoozed", delaySeconds=30)
    assert response.status_code == 200, response.text
    answer = response.json()
    assert answer["state"] == "retry_wait"
    assert instant(answer["nextAttemptAt"]) - instant(granted["leaseExpiresAt"]) <= timedelta(
        seconds=30
    )
    shown = await get_run(api_server, run["runId"])
    assert shown["state"] == "retry_wait" and shown["attempt"] == 0
    assert [(a["attempt"], a["outcome"]) for a in shown["attempts"]] == [(1, "snoozed")]
    # Ready again once the delay passed: the next lease is attempt 1 again.
    await api_server.scheduler_at(instant(answer["nextAttemptAt"])).pass_once()
    [again] = await lease(api_server)
    assert again["runId"] == granted["runId"] and again["attempt"] == 1
    assert again["fencingToken"] > granted["fencingToken"]
    async with client(api_server, api_server.admin_token) as admin:
        text = (await admin.get("/metrics")).text
    assert 'tickwork_completions_total{state="snoozed"} 1.0' in text


async def test_a_snooze_is_validated_naming_the_field(api_server: ApiServer) -> None:
    await make_job(api_server, "waits")
    await enqueue(api_server, "waits")
    [granted] = await lease(api_server)
    for extra, field in (
        ({}, "delaySeconds"),
        ({"delaySeconds": -1}, "delaySeconds"),
        ({"delaySeconds": 7 * 86_400 + 1}, "delaySeconds"),
        ({"delaySeconds": "soon"}, "delaySeconds"),
    ):
        problem = assert_problem(
            await complete(api_server, granted, "snoozed", **extra), 400, "invalid-request"
        )
        assert problem["field"] == field
    problem = assert_problem(
        await complete(api_server, granted, "succeeded", delaySeconds=3), 400, "invalid-request"
    )
    assert problem["field"] == "delaySeconds"
    async with client(api_server, api_server.worker_token) as worker:
        response = await worker.post(
            "/v1/runs:complete",
            json={
                "items": [
                    {
                        "runId": granted["runId"],
                        "fencingToken": granted["fencingToken"],
                        "outcome": "snoozed",
                    }
                ]
            },
        )
    assert_problem(response, 400, "invalid-request")
    assert response.json()["field"] == "items[0].delaySeconds"


async def test_a_job_paused_after_dead_runs_shows_why_and_resumes(api_server: ApiServer) -> None:
    await make_job(api_server, "poison", pauseAfterFailures=2, retry={"maxAttempts": 1})
    runs = [await enqueue(api_server, "poison") for _ in range(2)]
    granted = await lease(api_server, max=2)
    for item in granted:
        response = await complete(
            api_server, item, "failed", error={"message": "credentials revoked"}
        )
        assert response.json()["state"] == "dead"
    async with client(api_server, api_server.team_token) as team:
        job = (await team.get("/v1/jobs/poison")).json()
        assert job["paused"] is True and job["spec"]["paused"] is False
        reason = job["pausedReason"]
        assert reason["consecutiveDeadRuns"] == 2
        assert reason["lastRunId"] in {r["runId"] for r in runs}
        assert reason["lastError"]["message"] == "credentials revoked"
        assert "credentials revoked" in reason["message"]
        assert job["consecutiveDeadRuns"] == 2
        audit = (await team.get("/v1/audit", params={"job": "poison"})).json()["items"]
        assert audit[0]["action"] == "auto-pause" and audit[0]["actor"] == "tickwork"
        resumed = await team.post("/v1/jobs/poison:resume")
        assert resumed.status_code == 200, resumed.text
        body = resumed.json()
        assert body["paused"] is False and body["pausedReason"] is None
        assert body["consecutiveDeadRuns"] == 0


async def test_a_managed_job_tickwork_paused_is_resumed_through_the_api(
    api_server: ApiServer,
) -> None:
    jobs = api_server.jobs
    spec = JobSpec(pause_after_failures=1, retry=Retry(max_attempts=1))
    await jobs.put("acme", "declared", spec, "operator", manager=Manager.kubernetes)
    await enqueue(api_server, "declared")
    [granted] = await lease(api_server)
    await complete(api_server, granted, "failed", error={"message": "boom"})
    async with client(api_server, api_server.team_token) as team:
        assert_problem(await team.post("/v1/jobs/declared:pause"), 409, "managed-by-kubernetes")
        response = await team.post("/v1/jobs/declared:resume")
        assert response.status_code == 200, response.text
        assert response.json()["paused"] is False
        # Not paused by tickwork any more: the declaration is the truth again.
        assert_problem(await team.post("/v1/jobs/declared:resume"), 409, "managed-by-kubernetes")
