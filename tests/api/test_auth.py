"""Who may do what: tokens, tenants, roles and queues, all through HTTP."""

from __future__ import annotations

from typing import Any

from conftest import ApiServer

from api.clients import PROBLEMS, assert_problem, client


async def acme_job_with_a_leased_run(api_server: ApiServer) -> dict[str, Any]:
    async with client(api_server, api_server.team_token) as team:
        assert (await team.put("/v1/jobs/payroll", json={})).status_code == 201
        run = (await team.post("/v1/jobs/payroll/runs")).json()
    async with client(api_server, api_server.worker_token) as worker:
        [granted] = (await worker.post("/v1/lease", json={"queues": ["default"]})).json()["leases"]
    assert granted["runId"] == run["runId"]
    return dict(granted)


PROTECTED = [
    ("GET", "/v1/jobs"),
    ("PUT", "/v1/jobs/anything"),
    ("GET", "/v1/jobs/anything"),
    ("DELETE", "/v1/jobs/anything"),
    ("POST", "/v1/jobs/anything:pause"),
    ("POST", "/v1/jobs/anything/runs"),
    ("POST", "/v1/jobs/anything/runs:batch"),
    ("GET", "/v1/jobs/anything/runs"),
    ("GET", "/v1/runs/r0-1"),
    ("POST", "/v1/runs/r0-1:cancel"),
    ("POST", "/v1/lease"),
    ("POST", "/v1/runs/r0-1/heartbeat"),
    ("POST", "/v1/runs/r0-1/complete"),
    ("POST", "/v1/runs:heartbeat"),
    ("POST", "/v1/runs:complete"),
    ("GET", "/v1/dlq"),
    ("GET", "/v1/audit"),
    ("POST", "/v1/dlq/r0-1:replay"),
    ("POST", "/v1/dlq/r0-1:discard"),
    ("GET", "/metrics"),
    ("GET", "/openapi.json"),
]


async def test_every_call_needs_a_known_bearer_token(api_server: ApiServer) -> None:
    async with client(api_server) as anonymous:
        for authorization in [
            None,
            "Bearer not-a-known-token-at-all",
            "Basic dXNlcjpwYXNz",
            "Bearer",
            api_server.team_token,  # the token without its scheme
        ]:
            headers = {} if authorization is None else {"Authorization": authorization}
            for method, path in PROTECTED:
                response = await anonymous.request(method, path, headers=headers, json={})
                problem = assert_problem(response, 401, "unauthenticated")
                assert problem["title"] == "Unauthenticated", (method, path)


async def test_health_and_readiness_are_open(api_server: ApiServer) -> None:
    async with client(api_server) as anonymous:
        health = await anonymous.get("/healthz")
        assert health.status_code == 200 and health.json() == {"status": "ok"}
        ready = await anonymous.get("/readyz")
        assert ready.status_code == 200
        assert ready.json() == {"status": "ready", "shards": 4}
    async with client(api_server, api_server.other_worker_token) as worker:
        # Every tenant's queue names are in the metrics: not a worker's to read.
        assert_problem(await worker.get("/metrics"), 403, "forbidden")
        document = await worker.get("/openapi.json")
        assert document.status_code == 200
        assert document.json()["info"]["title"] == "tickwork"


async def test_a_team_sees_only_its_own_tenant(api_server: ApiServer) -> None:
    granted = await acme_job_with_a_leased_run(api_server)
    run_id = granted["runId"]
    async with client(api_server, api_server.team_token) as acme:
        queued = (await acme.post("/v1/jobs/payroll/runs", json={"delaySeconds": 60})).json()

    async with client(api_server, api_server.other_team_token) as globex:
        assert_problem(await globex.get("/v1/jobs/payroll"), 404, "not-found")
        assert (await globex.get("/v1/jobs")).json()["items"] == []
        assert_problem(await globex.get(f"/v1/runs/{run_id}"), 404, "not-found")
        assert_problem(await globex.post(f"/v1/runs/{queued['runId']}:cancel"), 404, "not-found")
        assert_problem(await globex.post(f"/v1/dlq/{run_id}:replay"), 404, "not-found")
        assert_problem(await globex.post(f"/v1/dlq/{run_id}:discard"), 404, "not-found")
        assert_problem(await globex.post("/v1/jobs/payroll/runs"), 404, "not-found")
        assert_problem(await globex.delete("/v1/jobs/payroll"), 404, "not-found")
        # The same name in globex is a different job.
        mine = await globex.put("/v1/jobs/payroll", json={"queue": "billing"})
        assert mine.status_code == 201 and mine.json()["tenant"] == "globex"

        for method, path in [
            ("GET", "/v1/jobs/payroll?tenant=acme"),
            ("GET", "/v1/jobs?tenant=acme"),
            ("PUT", "/v1/jobs/payroll?tenant=acme"),
            ("POST", "/v1/jobs/payroll/runs?tenant=acme"),
            ("GET", "/v1/dlq?tenant=acme"),
        ]:
            response = await globex.request(method, path, json={})
            assert assert_problem(response, 403, "forbidden")["field"] == "tenant"

    async with client(api_server, api_server.team_token) as acme:
        # Nothing globex did touched acme's job or runs.
        job = (await acme.get("/v1/jobs/payroll")).json()
        assert job["spec"]["queue"] == "default" and job["activeRuns"] == 1
        assert (await acme.get(f"/v1/runs/{queued['runId']}")).json()["state"] == "scheduled"


async def test_an_admin_acts_for_any_tenant_with_the_tenant_parameter(
    api_server: ApiServer,
) -> None:
    granted = await acme_job_with_a_leased_run(api_server)
    async with client(api_server, api_server.admin_token) as admin:
        job = await admin.get("/v1/jobs/payroll", params={"tenant": "acme"})
        assert job.status_code == 200 and job.json()["tenant"] == "acme"
        listed = (await admin.get("/v1/jobs", params={"tenant": "acme"})).json()
        assert [item["name"] for item in listed["items"]] == ["payroll"]
        # Without ?tenant= an admin acts for its own tenant.
        assert (await admin.get("/v1/jobs")).json()["items"] == []
        assert_problem(await admin.get("/v1/jobs/payroll"), 404, "not-found")

        made = await admin.put("/v1/jobs/audit?tenant=acme", json={"queue": "billing"})
        assert made.status_code == 201 and made.json()["tenant"] == "acme"
        run = await admin.post("/v1/jobs/audit/runs", params={"tenant": "acme"})
        assert run.status_code == 201 and run.json()["tenant"] == "acme"
        assert (await admin.get(f"/v1/runs/{granted['runId']}")).status_code == 200

        bad = await admin.get("/v1/jobs", params={"tenant": "Not A Tenant"})
        assert assert_problem(bad, 400, "invalid-request")["field"] == "tenant"

    async with client(api_server, api_server.team_token) as acme:
        assert (await acme.get("/v1/jobs/audit")).json()["spec"]["queue"] == "billing"


async def test_roles_limit_the_calls_a_token_may_make(api_server: ApiServer) -> None:
    granted = await acme_job_with_a_leased_run(api_server)
    run_id, token = granted["runId"], granted["fencingToken"]
    async with client(api_server, api_server.team_token) as team:
        assert_problem(await team.post("/v1/lease", json={"queues": ["default"]}), 403, "forbidden")
        assert_problem(
            await team.post(f"/v1/runs/{run_id}/heartbeat", json={"fencingToken": token}),
            403,
            "forbidden",
        )
        assert_problem(
            await team.post(
                f"/v1/runs/{run_id}/complete", json={"fencingToken": token, "outcome": "succeeded"}
            ),
            403,
            "forbidden",
        )
        assert_problem(
            await team.post(
                "/v1/runs:complete",
                json={"items": [{"runId": run_id, "fencingToken": token, "outcome": "succeeded"}]},
            ),
            403,
            "forbidden",
        )
    async with client(api_server, api_server.worker_token) as worker:
        assert_problem(await worker.put("/v1/jobs/sneaky", json={}), 403, "forbidden")
        assert_problem(await worker.post("/v1/jobs/payroll/runs"), 403, "forbidden")
        assert_problem(await worker.post(f"/v1/runs/{run_id}:cancel"), 403, "forbidden")
        assert_problem(await worker.get("/v1/dlq"), 403, "forbidden")
        # A worker may read the runs of its tenant.
        assert (await worker.get(f"/v1/runs/{run_id}")).json()["state"] == "leased"
    async with client(api_server, api_server.team_token) as team:
        assert (await team.get(f"/v1/runs/{run_id}")).json()["state"] == "leased"


async def test_a_worker_leases_only_its_queues_and_tenant(api_server: ApiServer) -> None:
    async with client(api_server, api_server.team_token) as acme:
        assert (await acme.put("/v1/jobs/mail", json={"queue": "default"})).status_code == 201
        assert (await acme.put("/v1/jobs/ml", json={"queue": "gpu"})).status_code == 201
        acme_run = (await acme.post("/v1/jobs/mail/runs")).json()
        gpu_run = (await acme.post("/v1/jobs/ml/runs")).json()

    async with client(api_server, api_server.worker_token) as worker:
        outside = await worker.post("/v1/lease", json={"queues": ["default", "gpu"]})
        assert assert_problem(outside, 403, "forbidden")["field"] == "queues"
    async with client(api_server, api_server.other_worker_token) as globex:
        # globex's worker also serves a queue named default, but never acme's runs in it.
        assert (await globex.post("/v1/lease", json={"queues": ["default"], "max": 10})).json() == {
            "leases": []
        }
    async with client(api_server, api_server.admin_token) as admin:
        leased = (await admin.post("/v1/lease", json={"queues": ["gpu"]})).json()["leases"]
        assert [item["runId"] for item in leased] == [gpu_run["runId"]]
    async with client(api_server, api_server.worker_token) as worker:
        # The admin's lease is in a queue this worker may not touch: to it, no such run.
        beat = await worker.post(
            f"/v1/runs/{gpu_run['runId']}/heartbeat",
            json={"fencingToken": leased[0]["fencingToken"]},
        )
        assert_problem(beat, 404, "not-found")
        [mine] = (await worker.post("/v1/lease", json={"queues": ["default"]})).json()["leases"]
        assert mine["runId"] == acme_run["runId"]


async def test_a_worker_of_another_tenant_cannot_touch_a_run(api_server: ApiServer) -> None:
    granted = await acme_job_with_a_leased_run(api_server)
    run_id, token = granted["runId"], granted["fencingToken"]
    async with client(api_server, api_server.other_worker_token) as globex:
        done = await globex.post(
            f"/v1/runs/{run_id}/complete", json={"fencingToken": token, "outcome": "succeeded"}
        )
        assert_problem(done, 404, "not-found")
        beat = await globex.post(f"/v1/runs/{run_id}/heartbeat", json={"fencingToken": token})
        assert_problem(beat, 404, "not-found")
        batch = await globex.post(
            "/v1/runs:complete",
            json={"items": [{"runId": run_id, "fencingToken": token, "outcome": "failed"}]},
        )
        assert batch.status_code == 200
        assert batch.json()["items"][0]["problem"]["type"] == PROBLEMS + "not-found"
        assert_problem(await globex.get(f"/v1/runs/{run_id}"), 404, "not-found")

    async with client(api_server, api_server.team_token) as acme:
        run = (await acme.get(f"/v1/runs/{run_id}")).json()
    assert run["state"] == "leased"
    assert run["attempts"][0]["outcome"] is None
    # The rightful holder still completes it.
    async with client(api_server, api_server.worker_token) as worker:
        done = await worker.post(
            f"/v1/runs/{run_id}/complete", json={"fencingToken": token, "outcome": "succeeded"}
        )
    assert done.json() == {"state": "succeeded"}
