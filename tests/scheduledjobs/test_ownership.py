"""A job a ScheduledJob declares is Kubernetes'. The HTTP API refuses to change or delete
it (409 managed-by-kubernetes, in the OpenAPI document too); runs, reads and DLQ
actions work as for any job."""

from __future__ import annotations

from typing import Any

import httpx
from conftest import ApiServer

from tickwork.core.records import Manager
from tickwork.engine.manifests import ScheduledJob
from tickwork.engine.reconcile import Reconciler

from .conftest import scheduled_job

PROBLEM = "https://tickwork.dev/problems/managed-by-kubernetes"


def team(api_server: ApiServer, token: str | None = None) -> httpx.AsyncClient:
    return httpx.AsyncClient(
        base_url=api_server.url, headers=api_server.headers(token or api_server.team_token)
    )


async def declare(api_server: ApiServer, manager: Manager = Manager.kubernetes) -> None:
    """What the operator does with a ScheduledJob acme/nightly (queue billing)."""
    reconciler = Reconciler(api_server.jobs, manager, "operator")
    document = scheduled_job("nightly", "acme", schedule={"cron": "0 2 * * *"}, queue="billing")
    job = reconciler.parse(document, "ScheduledJob acme/nightly")
    assert isinstance(job, ScheduledJob)
    await reconciler.apply(job)


async def test_put_delete_pause_and_resume_answer_409_managed_by_kubernetes(
    api_server: ApiServer,
) -> None:
    await declare(api_server)
    before = (await api_server.jobs.get("acme", "nightly")).definition
    async with team(api_server) as http:
        answers = [
            await http.put("/v1/jobs/nightly", json={"queue": "other"}),
            await http.delete("/v1/jobs/nightly"),
            await http.post("/v1/jobs/nightly:pause"),
            await http.post("/v1/jobs/nightly:resume"),
        ]
        for answer in answers:
            assert answer.status_code == 409, answer.text
            assert answer.headers["content-type"] == "application/problem+json"
            problem = answer.json()
            assert problem["type"] == PROBLEM
            assert "edit the ScheduledJob acme/nightly" in problem["detail"]
        shown = (await http.get("/v1/jobs/nightly")).json()
    assert shown["managedBy"] == "kubernetes"
    after = (await api_server.jobs.get("acme", "nightly")).definition
    assert (after.generation, after.paused, after.spec) == (
        before.generation,
        before.paused,
        before.spec,
    )


async def test_runs_reads_and_dlq_actions_work_as_for_any_job(api_server: ApiServer) -> None:
    await declare(api_server)
    async with team(api_server) as http, team(api_server, api_server.worker_token) as worker:
        enqueued = await http.post("/v1/jobs/nightly/runs", json={})
        assert enqueued.status_code == 201, enqueued.text
        run_id = enqueued.json()["runId"]
        (lease,) = (await worker.post("/v1/lease", json={"queues": ["billing"]})).json()["leases"]
        assert lease["runId"] == run_id
        failed = await worker.post(
            f"/v1/runs/{run_id}/complete",
            json={
                "fencingToken": lease["fencingToken"],
                "outcome": "failed",
                "error": {"message": "no", "retryable": False},
            },
        )
        assert failed.json()["state"] == "dead"
        dead = (await http.get("/v1/dlq", params={"job": "nightly"})).json()["items"]
        assert [d["runId"] for d in dead] == [run_id]
        replayed = await http.post(f"/v1/dlq/{run_id}:replay")
        assert replayed.status_code == 200 and replayed.json()["state"] == "ready"
        listed = (await http.get("/v1/jobs")).json()["items"]
        assert [(j["name"], j["managedBy"]) for j in listed] == [("nightly", "kubernetes")]


async def test_a_manifest_job_of_tickwork_dev_is_refused_the_same_way(
    api_server: ApiServer,
) -> None:
    await declare(api_server, Manager.manifests)
    async with team(api_server) as http:
        answer = await http.put("/v1/jobs/nightly", json={})
    assert answer.status_code == 409 and answer.json()["type"] == PROBLEM


async def test_api_jobs_stay_the_apis(api_server: ApiServer) -> None:
    async with team(api_server) as http:
        assert (await http.put("/v1/jobs/mine", json={})).status_code == 201
        assert (await http.post("/v1/jobs/mine:pause")).status_code == 200
        assert (await http.get("/v1/jobs/mine")).json()["managedBy"] is None
        assert (await http.delete("/v1/jobs/mine")).status_code == 200


async def test_the_openapi_document_lists_the_409_where_it_can_happen(
    api_server: ApiServer,
) -> None:
    async with team(api_server) as http:
        document: dict[str, Any] = (await http.get("/openapi.json")).json()
    paths = document["paths"]
    for path, method in [
        ("/v1/jobs/{name}", "put"),
        ("/v1/jobs/{name}", "delete"),
        ("/v1/jobs/{name}:pause", "post"),
        ("/v1/jobs/{name}:resume", "post"),
    ]:
        response = paths[path][method]["responses"]["409"]
        assert "managed-by-kubernetes" in response["description"], (path, method)
        assert "application/problem+json" in response["content"], (path, method)
    assert "409" not in paths["/v1/jobs/{name}"]["get"]["responses"]
