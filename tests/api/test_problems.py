"""Every refusal is an RFC 9457 problem with the contract's type, status and field."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from conftest import ApiServer

from api.clients import PROBLEMS, assert_problem, client
from tickwork.core.records import Manager
from tickwork.core.spec import JobSpec

LIMIT = 256 * 1024


async def test_every_problem_type_of_the_contract_has_the_same_shape(
    api_server: ApiServer,
) -> None:
    """One call per slug (quota-exceeded: see test_quota.py)."""
    seen: dict[str, int] = {}
    async with client(api_server, api_server.team_token) as team:
        assert (await team.put("/v1/jobs/one", json={"concurrency": 1})).status_code == 201
        run = (await team.post("/v1/jobs/one/runs")).json()
        responses = [
            await team.put("/v1/jobs/bad", json={"schedule": {"cron": "every day"}}),
            await team.put("/v1/jobs/bad", json={"priority": "urgent"}),
            await team.put("/v1/jobs/bad?tenant=globex", json={}),
            await team.get("/v1/jobs/missing"),
            await team.post("/v1/jobs/one/runs", json={"payload": "x" * LIMIT}),
        ]
        key = {"Idempotency-Key": "k"}
        assert (await team.post("/v1/jobs/one/runs", json={}, headers=key)).status_code == 201
        responses.append(await team.post("/v1/jobs/one/runs", json={"payload": 1}, headers=key))
    async with client(api_server, api_server.worker_token) as worker:
        [granted] = (await worker.post("/v1/lease", json={"queues": ["default"]})).json()["leases"]
        responses.append(
            await worker.post(
                f"/v1/runs/{run['runId']}/heartbeat",
                json={"fencingToken": granted["fencingToken"] + 1},
            )
        )
    await api_server.jobs.put("acme", "declared", JobSpec(), "operator", manager=Manager.kubernetes)
    async with client(api_server, api_server.team_token) as team:
        responses.append(await team.post("/v1/jobs/one/runs", json={"ifNotRunning": True}))
        responses.append(await team.post(f"/v1/dlq/{run['runId']}:replay"))
        responses.append(await team.put("/v1/jobs/declared", json={}))
    async with client(api_server) as anonymous:
        responses.append(await anonymous.get("/v1/jobs"))

    for response in responses:
        slug = response.json()["type"].removeprefix(PROBLEMS)
        seen[slug] = assert_problem(response, response.status_code, slug)["status"]
    assert seen == {
        "invalid-schedule": 400,
        "invalid-request": 400,
        "unauthenticated": 401,
        "forbidden": 403,
        "not-found": 404,
        "stale-lease": 409,
        "concurrency-limit": 409,
        "invalid-state": 409,
        "managed-by-kubernetes": 409,
        "payload-too-large": 413,
        "idempotency-key-reused": 422,
    }


async def test_payloads_over_256_kib_are_refused(api_server: ApiServer) -> None:
    at_limit = "x" * (LIMIT - 2)  # the quotes make it exactly 256 KiB encoded
    over = "x" * (LIMIT - 1)
    async with client(api_server, api_server.team_token) as team:
        refused = await team.put("/v1/jobs/big", json={"payload": over})
        problem = assert_problem(refused, 413, "payload-too-large", "payload")
        assert str(LIMIT) in problem["detail"]
        assert (await team.get("/v1/jobs/big")).status_code == 404

        accepted = await team.put("/v1/jobs/big", json={"payload": at_limit})
        assert accepted.status_code == 201
        assert_problem(
            await team.post("/v1/jobs/big/runs", json={"payload": {"rows": [over]}}),
            413,
            "payload-too-large",
            "payload",
        )
        assert (await team.post("/v1/jobs/big/runs", json={"payload": at_limit})).status_code == 201
        # A request body over the server's limit is refused before it is read whole.
        huge = {"runs": [{"payload": at_limit}] * 17}
        assert_problem(
            await team.post("/v1/jobs/big/runs:batch", json=huge), 413, "payload-too-large"
        )
        assert len((await team.get("/v1/jobs/big/runs")).json()["items"]) == 1

        # Streamed without a Content-Length, the body is cut off as it arrives.
        async def streamed() -> AsyncIterator[bytes]:
            yield b'{"payload": "'
            for _ in range(20):
                yield b"x" * LIMIT
            yield b'"}'

        for method, path in [("PUT", "/v1/jobs/big"), ("POST", "/v1/jobs/big/runs")]:
            response = await team.request(
                method, path, content=streamed(), headers={"content-type": "application/json"}
            )
            assert_problem(response, 413, "payload-too-large")
        assert (await team.get("/v1/jobs/big")).json()["spec"]["payload"] == at_limit
    async with client(api_server, api_server.worker_token) as worker:
        response = await worker.post(
            "/v1/lease", content=streamed(), headers={"content-type": "application/json"}
        )
        assert_problem(response, 413, "payload-too-large")


async def test_invalid_cron_and_zone_are_invalid_schedule(api_server: ApiServer) -> None:
    async with client(api_server, api_server.team_token) as team:
        for cron in ["61 * * * *", "* * * *", "0 25 * * *", "0 0 31 2 mon#6", "hourly", ""]:
            response = await team.put("/v1/jobs/nightly", json={"schedule": {"cron": cron}})
            problem = assert_problem(response, 400, "invalid-schedule", "schedule.cron")
            assert problem["detail"].startswith("schedule.cron")
        for zone in ["Mars/Olympus_Mons", "Europe/Berlinn", "../etc/localtime"]:
            response = await team.put(
                "/v1/jobs/nightly", json={"schedule": {"cron": "0 2 * * *", "timeZone": zone}}
            )
            assert_problem(response, 400, "invalid-schedule", "schedule.timeZone")
        assert (await team.get("/v1/jobs/nightly")).status_code == 404
        good = await team.put(
            "/v1/jobs/nightly",
            json={"schedule": {"cron": "0 2 * * *", "timeZone": "Europe/Berlin"}},
        )
        assert good.status_code == 201


async def test_other_invalid_fields_are_invalid_request_naming_the_field(
    api_server: ApiServer,
) -> None:
    cases: list[tuple[dict[str, Any], str]] = [
        ({"schedule": {"cron": "0 2 * * *", "jitterSeconds": 5000}}, "schedule.jitterSeconds"),
        ({"schedule": {"cron": "0 2 * * *", "jitterSeconds": -1}}, "schedule.jitterSeconds"),
        (
            {"schedule": {"cron": "0 2 * * *", "missedRunPolicy": "maybe"}},
            "schedule.missedRunPolicy",
        ),
        ({"priority": "urgent"}, "priority"),
        ({"retry": {"maxAttempts": 0}}, "retry.maxAttempts"),
        ({"retry": {"maxAttempts": 101}}, "retry.maxAttempts"),
        ({"timeoutSeconds": 0}, "timeoutSeconds"),
        ({"queue": "Not A Queue"}, "queue"),
        ({"concurrency": -1}, "concurrency"),
        ({"colour": "blue"}, "colour"),
        ({"schedule": {"cron": "0 2 * * *", "every": 5}}, "schedule.every"),
        ({"runAt": "tomorrow"}, "runAt"),
        ({"runAt": "2030-01-01T00:00:00"}, "runAt"),  # no offset
        ({"payload": {"text": "nul \u0000 inside"}}, "payload"),
    ]
    async with client(api_server, api_server.team_token) as team:
        for spec, field in cases:
            response = await team.put("/v1/jobs/checked", json=spec)
            problem = assert_problem(response, 400, "invalid-request", field)
            assert field.split(".")[-1] in problem["detail"], problem
        both = await team.put(
            "/v1/jobs/checked",
            json={"schedule": {"cron": "0 2 * * *"}, "runAt": "2030-01-01T00:00:00Z"},
        )
        assert_problem(both, 400, "invalid-request")
        assert_problem(
            await team.put("/v1/jobs/Not_A_Name", json={}), 400, "invalid-request", "name"
        )
        not_json = await team.put(
            "/v1/jobs/checked", content=b"{", headers={"content-type": "application/json"}
        )
        assert_problem(not_json, 400, "invalid-request")
        assert (await team.get("/v1/jobs/checked")).status_code == 404

        assert (await team.put("/v1/jobs/checked", json={})).status_code == 201
        for body, field in [
            ({"delaySeconds": -1}, "delaySeconds"),
            ({"priority": "urgent"}, "priority"),
            ({"runAt": "soon"}, "runAt"),
            ({"ifNotRunning": "perhaps"}, "ifNotRunning"),
            ({"when": "now"}, "when"),
        ]:
            response = await team.post("/v1/jobs/checked/runs", json=body)
            assert_problem(response, 400, "invalid-request", field)
        for params, field in [
            ({"limit": 0}, "limit"),
            ({"limit": 501}, "limit"),
            ({"cursor": "Not A Name"}, "cursor"),
        ]:
            assert_problem(await team.get("/v1/jobs", params=params), 400, "invalid-request", field)
        assert_problem(
            await team.get("/v1/jobs/checked/runs", params={"cursor": "garbage"}),
            400,
            "invalid-request",
            "cursor",
        )
        assert (await team.get("/v1/jobs/checked/runs")).json()["items"] == []


async def test_unknown_jobs_runs_and_paths_are_not_found(api_server: ApiServer) -> None:
    async with client(api_server, api_server.team_token) as team:
        for method, path in [
            ("GET", "/v1/jobs/nope"),
            ("DELETE", "/v1/jobs/nope"),
            ("POST", "/v1/jobs/nope:pause"),
            ("POST", "/v1/jobs/nope:resume"),
            ("POST", "/v1/jobs/nope/runs"),
            ("POST", "/v1/jobs/nope/runs:batch"),
            ("GET", "/v1/runs/r0-424242"),
            ("GET", "/v1/runs/r99-1"),
            ("GET", "/v1/runs/not-a-run"),
            ("POST", "/v1/runs/r1-424242:cancel"),
            ("POST", "/v1/dlq/r2-424242:discard"),
            ("GET", "/v1/no-such-thing"),
        ]:
            body = {"runs": [{}]} if path.endswith(":batch") else None
            response = await team.request(method, path, json=body)
            assert_problem(response, 404, "not-found")
        missing = await team.get("/v1/jobs/nope")
        assert "nope" in missing.json()["detail"]
        wrong_method = await team.patch("/v1/jobs/nope", json={})
        assert wrong_method.status_code == 405
        assert wrong_method.headers["content-type"] == "application/problem+json"
        assert wrong_method.json()["status"] == 405


async def test_input_the_database_cannot_hold_is_refused_not_a_server_error(
    api_server: ApiServer,
) -> None:
    """NUL characters, lone surrogates, numbers past 64 bits, NaN and instants past
    year 9999 get 400 naming the field, and nothing is stored."""
    nul, surrogate = b'"a\\u0000b"', b'"\\ud800"'
    far = b'"9999-12-31T23:59:59-14:00"'
    put_cases = [
        (b'{"payload": ' + nul + b"}", "payload"),
        (b'{"payload": {"k": [' + surrogate + b"]}}", "payload"),
        (b'{"payload": {' + nul + b": 1}}", "payload"),
        (b'{"payload": [100000000000000000000000000000]}', "payload"),
        (b'{"payload": NaN}', "payload"),
        (b'{"payload": 1e400}', "payload"),
        (b'{"runAt": ' + far + b"}", "runAt"),
        (b'{"runAt": "0001-01-01T00:00:00+01:00"}', "runAt"),
        (b'{"concurrency": 100000000000000000000000000000}', "concurrency"),
        (
            b'{"schedule": {"cron": "* * * * *", "startingDeadlineSeconds": 10000000000000}}',
            "schedule.startingDeadlineSeconds",
        ),
    ]
    json_headers = {"content-type": "application/json"}
    async with client(api_server, api_server.team_token) as team:
        for body, field in put_cases:
            response = await team.put("/v1/jobs/hostile", content=body, headers=json_headers)
            assert_problem(response, 400, "invalid-request", field)
        assert (await team.get("/v1/jobs/hostile")).status_code == 404

        assert (await team.put("/v1/jobs/hostile", json={})).status_code == 201
        for body, field in [
            (b'{"payload": ' + nul + b"}", "payload"),
            (b'{"payload": ' + surrogate + b"}", "payload"),
            (b'{"payload": -100000000000000000000000000000}', "payload"),
            (b'{"runAt": ' + far + b"}", "runAt"),
        ]:
            response = await team.post("/v1/jobs/hostile/runs", content=body, headers=json_headers)
            assert_problem(response, 400, "invalid-request", field)
        batch = await team.post(
            "/v1/jobs/hostile/runs:batch",
            content=b'{"runs": [{"idempotencyKey": '
            + nul
            + b'}, {"payload": '
            + nul
            + b'}, {"runAt": '
            + far
            + b"}, {}]}",
            headers=json_headers,
        )
        assert batch.status_code == 200, batch.text
        items = batch.json()["items"]
        assert [item.get("problem", {}).get("field") for item in items] == [
            "runs[0].idempotencyKey",
            "runs[1].payload",
            "runs[2].runAt",
            None,
        ]
        assert items[3]["state"] == "ready"
        assert len((await team.get("/v1/jobs/hostile/runs")).json()["items"]) == 1

        for params in [{"cursor": "\u0000"}, {"cursor": "r0-99999999999999999999"}]:
            listed = await team.get("/v1/jobs/hostile/runs", params=params)
            assert_problem(listed, 400, "invalid-request", "cursor")
        assert_problem(
            await team.get("/v1/jobs", params={"cursor": "\u0000"}),
            400,
            "invalid-request",
            "cursor",
        )
    async with client(api_server, api_server.admin_token) as admin:
        bad_tenant = await admin.get("/v1/jobs", params={"tenant": "\u0000"})
        assert_problem(bad_tenant, 400, "invalid-request", "tenant")
    async with client(api_server, api_server.worker_token) as worker:
        lease = await worker.post(
            "/v1/lease",
            content=b'{"queues": ["default"], "workerId": ' + nul + b"}",
            headers=json_headers,
        )
        assert_problem(lease, 400, "invalid-request", "workerId")
        [granted] = (await worker.post("/v1/lease", json={"queues": ["default"]})).json()["leases"]
        failed = await worker.post(
            f"/v1/runs/{granted['runId']}/complete",
            content=b'{"fencingToken": %d, "outcome": "failed", "error": {"message": %s}}'
            % (granted["fencingToken"], nul),
            headers=json_headers,
        )
        assert_problem(failed, 400, "invalid-request", "error")
        # The run is still leased: the refused completion changed nothing.
        beat = await worker.post(
            f"/v1/runs/{granted['runId']}/heartbeat",
            json={"fencingToken": granted["fencingToken"]},
        )
        assert beat.status_code == 200
