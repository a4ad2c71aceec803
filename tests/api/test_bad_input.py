"""Bad input through HTTP, one regression per way it used to get a 500, be coerced or be
stored: zones, nesting, names with a trailing newline, coercion, reused idempotency
keys, a worker reading other queues' runs, credentials in payloads."""

from __future__ import annotations

from typing import Any

import httpx
from conftest import ApiServer

from api.clients import PROBLEMS, assert_problem, client
from tickwork.core import limits
from tickwork.core.spec import JobSpec

JSON = {"content-type": "application/json"}


def nested(depth: int, leaf: Any = 1) -> Any:
    value = leaf
    for level in range(depth):
        value = [value] if level % 2 else {"k": value}
    return value


def nested_text(depth: int) -> bytes:
    return b"[" * depth + b"1" + b"]" * depth


async def run_count(api_server: ApiServer) -> int:
    total = 0
    for shard in range(api_server.database.shard_count):
        async with api_server.database.connection(shard) as conn:
            total += await conn.fetchval("SELECT count(*) FROM runs")
    return total


ZONES = ["Europe", "America", "Etc", "__pycache__", "x" * 10_000, "right/UTC"]
ZONES += ["posix/Europe/Berlin", "Europe/Berlin\n", "localtime"]


async def test_a_zone_outside_the_tz_database_is_invalid_schedule(api_server: ApiServer) -> None:
    async with client(api_server, api_server.team_token) as team:
        for zone in ZONES:
            response = await team.put(
                "/v1/jobs/zoned", json={"schedule": {"cron": "0 2 * * *", "timeZone": zone}}
            )
            assert_problem(response, 400, "invalid-schedule", "schedule.timeZone")
            assert len(response.text) < 1000
            # The connection is still good, and nothing was stored.
            assert (await team.get("/v1/jobs/zoned")).status_code == 404


# Arabic-Indic three, full-width five, newline, no-break space, em space.
CRONS = ["\u0663 * * * *", "\uff15 * * * *", "0\n2 * * *", "0\u00a02 * * *", "0\u20032 * * *"]


async def test_cron_outside_the_grammar_is_invalid_schedule(api_server: ApiServer) -> None:
    async with client(api_server, api_server.team_token) as team:
        for cron in [*CRONS, "*/99999 * * * *"]:
            response = await team.put("/v1/jobs/ticks", json={"schedule": {"cron": cron}})
            assert_problem(response, 400, "invalid-schedule", "schedule.cron")


async def test_a_two_megabyte_cron_is_refused_for_its_length(api_server: ApiServer) -> None:
    # Once read whole (6.7 s, the event loop blocked for 2): refused for its length, it
    # is not read at all, so its other faults (here: six fields) go unmentioned.
    async with client(api_server, api_server.team_token) as team:
        for cron in ("0," * 1_000_000 + "0 * * * *", "0," * 1_000_000 + "0 * * * * *"):
            response = await team.put("/v1/jobs/ticks", json={"schedule": {"cron": cron}})
            problem = assert_problem(response, 400, "invalid-schedule", "schedule.cron")
            assert problem["detail"] == (
                f"schedule.cron: cron expression is {len(cron)} characters long; "
                f"the limit is {limits.MAX_CRON_LENGTH}"
            )
            assert len(response.content) < 1000
        assert (await team.get("/v1/jobs/ticks")).status_code == 404


async def test_deep_json_is_refused_naming_the_field_everywhere(api_server: ApiServer) -> None:
    deep, too_deep = nested(limits.MAX_JSON_DEPTH), nested(limits.MAX_JSON_DEPTH + 1)
    async with client(api_server, api_server.team_token) as team:
        for value in (nested(254), too_deep):
            response = await team.put("/v1/jobs/deep", json={"payload": value})
            assert_problem(response, 400, "invalid-request", "payload")
        for raw, field in [
            (b'{"payload": ' + nested_text(254) + b"}", "payload"),
            (b'{"payload": ' + nested_text(5000) + b"}", "payload"),
            (b'{"schedule": ' + nested_text(5000) + b"}", "schedule"),
            (nested_text(100_000), "body"),
        ]:
            response = await team.put("/v1/jobs/deep", content=raw, headers=JSON)
            assert_problem(response, 400, "invalid-request", field)
        assert (await team.get("/v1/jobs/deep")).status_code == 404
        assert (await team.put("/v1/jobs/deep", json={"payload": deep})).status_code == 201

        before = await run_count(api_server)
        for value in (nested(254), too_deep):
            response = await team.post("/v1/jobs/deep/runs", json={"payload": value})
            assert_problem(response, 400, "invalid-request", "payload")
        deep_batch = b'{"runs": [{}, {"payload": ' + nested_text(5000) + b"}]}"
        response = await team.post("/v1/jobs/deep/runs:batch", content=deep_batch, headers=JSON)
        assert_problem(response, 400, "invalid-request", "runs[1].payload")
        response = await team.post(
            "/v1/jobs/deep/runs:batch", json={"runs": [{}, {"payload": too_deep}]}
        )
        assert response.status_code == 200
        [ok, refused] = response.json()["items"]
        assert ok["state"] == "ready"
        assert refused["problem"]["field"] == "runs[1].payload"
        assert await run_count(api_server) == before + 1

    async with client(api_server, api_server.worker_token) as worker:
        [granted] = (await worker.post("/v1/lease", json={"queues": ["default"]})).json()["leases"]
        run_id, token = granted["runId"], granted["fencingToken"]
        for error in (nested(254, "x"), {"message": "m", "detail": too_deep}):
            body = {"fencingToken": token, "outcome": "failed", "error": error}
            response = await worker.post(f"/v1/runs/{run_id}/complete", json=body)
            assert_problem(response, 400, "invalid-request", "error")
            items = {"items": [{"runId": run_id, **body}]}
            response = await worker.post("/v1/runs:complete", json=items)
            assert_problem(response, 400, "invalid-request", "items[0].error")
        raw = b'{"fencingToken": %d, "outcome": "failed", "error": %s}' % (
            token,
            nested_text(100_000),
        )
        response = await worker.post(f"/v1/runs/{run_id}/complete", content=raw, headers=JSON)
        assert_problem(response, 400, "invalid-request", "error")
        # Nothing of it was recorded: the lease is intact and completes normally.
        done = await worker.post(
            f"/v1/runs/{run_id}/complete", json={"fencingToken": token, "outcome": "succeeded"}
        )
        assert done.json() == {"state": "succeeded"}


async def test_a_trailing_newline_passes_no_name_check(api_server: ApiServer) -> None:
    async with client(api_server, api_server.team_token) as team:
        assert_problem(await team.put("/v1/jobs/abc%0A", json={}), 400, "invalid-request", "name")
        assert_problem(await team.get("/v1/jobs/abc%0A"), 404, "not-found", "name")
        queue = await team.put("/v1/jobs/abc", json={"queue": "q\n"})
        assert_problem(queue, 400, "invalid-request", "queue")
        assert (await team.get("/v1/jobs/abc")).status_code == 404
    async with client(api_server, api_server.admin_token) as admin:
        listed = await admin.get("/v1/jobs", params={"tenant": "acme\n"})
        assert_problem(listed, 400, "invalid-request", "tenant")
        lease = await admin.post("/v1/lease", json={"queues": ["default\n"]})
        assert_problem(lease, 400, "invalid-request", "queues[0]")


async def test_a_name_that_is_no_dns_subdomain_is_refused_naming_it(
    api_server: ApiServer,
) -> None:
    # "a..b" could never be a ScheduledJob's name: an empty label between the dots.
    async with client(api_server, api_server.team_token) as team:
        for name in ("a..b", "a.-b", "a-.b"):
            response = await team.put(f"/v1/jobs/{name}", json={})
            problem = assert_problem(response, 400, "invalid-request", "name")
            assert "DNS-1123 subdomain" in problem["detail"]
            assert (await team.get("/v1/jobs")).json()["items"] == []


COERCED = [
    ({"paused": "yes"}, "paused"),
    ({"paused": 1}, "paused"),
    ({"retry": {"maxAttempts": True}}, "retry.maxAttempts"),
    ({"retry": {"maxAttempts": 2.0}}, "retry.maxAttempts"),
    ({"retry": {"baseSeconds": "30"}}, "retry.baseSeconds"),
    ({"timeoutSeconds": "60"}, "timeoutSeconds"),
    ({"concurrency": False}, "concurrency"),
    ({"queue": 7}, "queue"),
    ({"runAt": 1700000000}, "runAt"),
    ({"runAt": "1700000000"}, "runAt"),
    ({"runAt": "2030-01-01"}, "runAt"),
    ({"schedule": {"cron": "0 2 * * *", "jitterSeconds": "5"}}, "schedule.jitterSeconds"),
    ({"schedule": {"cron": 5}}, "schedule.cron"),
    ({"timeout_seconds": 60}, "timeout_seconds"),
    ({"retry": {"max_attempts": 2}}, "retry.max_attempts"),
    ({"schedule": {"cron": "0 2 * * *", "time_zone": "UTC"}}, "schedule.time_zone"),
]


async def test_team_routes_take_input_as_given(api_server: ApiServer) -> None:
    async with client(api_server, api_server.team_token) as team:
        for body, field in COERCED:
            response = await team.put("/v1/jobs/strict", json=body)
            assert_problem(response, 400, "invalid-request", field)
        assert (await team.get("/v1/jobs/strict")).status_code == 404
        snake = await team.put("/v1/jobs/strict", json={"timeout_seconds": 60})
        assert "timeoutSeconds" in snake.json()["detail"]

        spec = {
            "runAt": "2030-01-01T01:00:00+01:00",
            "retry": {"maxAttempts": 2, "baseSeconds": 10, "maxSeconds": 60.5},
            "timeoutSeconds": 60,
            "paused": True,
        }
        created = await team.put("/v1/jobs/strict", json=spec)
        assert created.status_code == 201, created.text
        assert created.json()["spec"] == {
            "runAt": "2030-01-01T01:00:00+01:00",
            "queue": "default",
            "priority": "default",
            "timeoutSeconds": 60,
            "retry": {"maxAttempts": 2, "baseSeconds": 10.0, "maxSeconds": 60.5},
            "concurrency": 0,
            "overlapPolicy": "Allow",
            "paused": True,
            "dryRun": False,
        }
        for body, field in [
            ({"delaySeconds": "10"}, "delaySeconds"),
            ({"delaySeconds": True}, "delaySeconds"),
            ({"runAt": 1700000000}, "runAt"),
            ({"ifNotRunning": 1}, "ifNotRunning"),
            ({"if_not_running": True}, "if_not_running"),
            ({"delay_seconds": 5}, "delay_seconds"),
        ]:
            response = await team.post("/v1/jobs/strict/runs", json=body)
            assert_problem(response, 400, "invalid-request", field)
        batch = await team.post(
            "/v1/jobs/strict/runs:batch",
            json={
                "runs": [
                    {"delaySeconds": "10"},
                    {"idempotency_key": "k"},
                    {"idempotencyKey": 5},
                    {"delaySeconds": 10},
                ]
            },
        )
        fields = [item.get("problem", {}).get("field") for item in batch.json()["items"]]
        assert fields == [
            "runs[0].delaySeconds",
            "runs[1].idempotency_key",
            "runs[2].idempotencyKey",
            None,
        ]
        delayed = await team.post("/v1/jobs/strict/runs", json={"delaySeconds": 10})
        assert delayed.status_code == 201 and delayed.json()["state"] == "scheduled"


async def test_an_idempotency_key_reused_for_another_request_is_422(
    api_server: ApiServer,
) -> None:
    async with client(api_server, api_server.team_token) as team:
        assert (await team.put("/v1/jobs/once", json={})).status_code == 201
        key = {"Idempotency-Key": "invoice-42"}
        first = await team.post("/v1/jobs/once/runs", json={"payload": {"n": 1}}, headers=key)
        assert first.status_code == 201
        again = await team.post("/v1/jobs/once/runs", json={"payload": {"n": 1}}, headers=key)
        assert again.status_code == 200 and again.json()["runId"] == first.json()["runId"]
        other = await team.post("/v1/jobs/once/runs", json={"payload": {"n": 2}}, headers=key)
        problem = assert_problem(other, 422, "idempotency-key-reused", "Idempotency-Key")
        assert first.json()["runId"] in problem["detail"]
        for body in [{}, {"payload": {"n": 1}, "delaySeconds": 5}, {"payload": {"n": 1.0}}]:
            response = await team.post("/v1/jobs/once/runs", json=body, headers=key)
            assert_problem(response, 422, "idempotency-key-reused", "Idempotency-Key")

        # The same request spelled differently is the same request.
        at = {"Idempotency-Key": "at"}
        made = await team.post(
            "/v1/jobs/once/runs", json={"runAt": "2031-01-01T01:00:00+01:00"}, headers=at
        )
        same = await team.post(
            "/v1/jobs/once/runs",
            json={"runAt": "2031-01-01T00:00:00Z", "ifNotRunning": False},
            headers=at,
        )
        assert same.status_code == 200 and same.json()["runId"] == made.json()["runId"]

        # A batch item with a key the single enqueue used, and within one batch.
        batch = await team.post(
            "/v1/jobs/once/runs:batch",
            json={
                "runs": [
                    {"payload": {"n": 1}, "idempotencyKey": "invoice-42"},
                    {"payload": {"n": 3}, "idempotencyKey": "invoice-42"},
                    {"payload": {"n": 4}, "idempotencyKey": "new"},
                    {"payload": {"n": 5}, "idempotencyKey": "new"},
                ]
            },
        )
        items = batch.json()["items"]
        assert items[0]["runId"] == first.json()["runId"]
        assert items[1]["problem"]["status"] == 422
        assert items[1]["problem"]["field"] == "runs[1].idempotencyKey"
        assert items[2]["state"] == "ready"
        assert items[3]["problem"]["type"] == PROBLEMS + "idempotency-key-reused"
        runs = (await team.get("/v1/jobs/once/runs")).json()["items"]
        assert len(runs) == 3  # invoice-42, at, new


async def test_a_worker_reads_only_the_runs_of_its_queues(api_server: ApiServer) -> None:
    async with client(api_server, api_server.team_token) as team:
        assert (await team.put("/v1/jobs/gpu-job", json={"queue": "gpu"})).status_code == 201
        assert (await team.put("/v1/jobs/mail", json={"queue": "billing"})).status_code == 201
        gpu = (await team.post("/v1/jobs/gpu-job/runs", json={"payload": {"k": 1}})).json()
        mail = (await team.post("/v1/jobs/mail/runs")).json()
        assert (await team.get(f"/v1/runs/{gpu['runId']}")).status_code == 200
    async with client(api_server, api_server.worker_token) as worker:  # default, billing
        hidden = await worker.get(f"/v1/runs/{gpu['runId']}")
        problem = assert_problem(hidden, 404, "not-found", "runId")
        assert "payload" not in hidden.text and problem["detail"] == f"no run {gpu['runId']!r}"
        assert (await worker.get(f"/v1/runs/{mail['runId']}")).status_code == 200
    async with client(api_server, api_server.admin_token) as admin:
        assert (await admin.get(f"/v1/runs/{gpu['runId']}")).status_code == 200


SECRETS = [
    ({"db": {"password": "hunter2"}}, "payload.db.password"),
    ({"Authorization": "Bearer abcdef0123456789abcdef"}, "payload.Authorization"),
    (
        {"key": "-----BEGIN RSA PRIVATE KEY-----\nMIIE...\n-----END RSA PRIVATE KEY-----"},
        "payload.key",
    ),
    ({"aws": ["us-east-1", "AKIAIOSFODNN7EXAMPLE"]}, "payload.aws[1]"),
    (
        "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U",
        "payload",
    ),
    ({"url": "postgres://app:s3cret@db.internal/billing"}, "payload.url"),
]


async def test_a_payload_with_a_credential_is_refused_naming_its_path(
    api_server: ApiServer,
) -> None:
    async with client(api_server, api_server.team_token) as team:
        for payload, field in SECRETS:
            refused = await team.put("/v1/jobs/leaky", json={"payload": payload})
            problem = assert_problem(refused, 400, "invalid-request", field)
            assert "secretRef" in problem["detail"]
        assert (await team.get("/v1/jobs/leaky")).status_code == 404
        assert (await team.put("/v1/jobs/leaky", json={})).status_code == 201
        for payload, field in SECRETS:
            single = await team.post("/v1/jobs/leaky/runs", json={"payload": payload})
            assert_problem(single, 400, "invalid-request", field)
            batch = await team.post(
                "/v1/jobs/leaky/runs:batch", json={"runs": [{}, {"payload": payload}]}
            )
            assert batch.json()["items"][1]["problem"]["field"] == "runs[1]." + field
        assert await run_count(api_server) == len(SECRETS)  # the batches' first items


async def test_a_secret_passed_by_reference_is_fine(api_server: ApiServer) -> None:
    payload = {"db": {"host": "db.billing", "password": {"secretRef": "billing-db"}}}
    async with client(api_server, api_server.team_token) as team:
        response = await team.put("/v1/jobs/tidy", json={"payload": payload})
        assert response.status_code == 201, response.text
        run = await team.post("/v1/jobs/tidy/runs", json={"payload": payload | {"token": ""}})
        assert run.status_code == 201 and run.json()["payload"]["db"] == payload["db"]


async def test_a_job_stored_under_an_earlier_releases_looser_name_stays_reachable(
    api_server: ApiServer,
) -> None:
    # "a..b" was a job name before names became DNS-1123 subdomains: such a job, stored
    # then, can still be read, run and deleted, but no new one is made.
    spec = JobSpec.model_validate({"queue": "default"})
    await api_server.jobs.put("acme", "a..b", spec, "earlier-release")
    headers = api_server.headers(api_server.team_token)
    async with httpx.AsyncClient(base_url=api_server.url, headers=headers) as team:
        assert (await team.get("/v1/jobs/a..b")).status_code == 200
        assert (await team.post("/v1/jobs/a..b/runs")).status_code == 201
        listed = await team.get("/v1/jobs", params={"cursor": "a..b"})
        assert listed.status_code == 200, listed.text
        assert (await team.put("/v1/jobs/c..d", json={})).status_code == 400
        assert (await team.delete("/v1/jobs/a..b")).status_code == 200
