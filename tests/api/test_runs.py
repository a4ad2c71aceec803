"""Runs over HTTP: enqueue (idempotent, delayed, overridden), batches, listing, one run
with its attempts, and cancellation."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from typing import Any

from conftest import ApiServer

from api.clients import PROBLEMS, client, instant, lease, make_job, wire_fields
from tickwork.api import models


async def test_enqueue_with_an_idempotency_key_creates_one_run(api_server: ApiServer) -> None:
    await make_job(api_server, "sync")
    async with client(api_server, api_server.team_token) as team:
        first = await team.post("/v1/jobs/sync/runs", headers={"Idempotency-Key": "order-42"})
        assert first.status_code == 201, first.text
        run = first.json()
        assert set(run) == wire_fields(models.EnqueuedRun)
        assert run["job"] == "sync" and run["tenant"] == "acme" and run["queue"] == "default"
        assert run["state"] == "ready" and run["attempt"] == 0 and run["maxAttempts"] == 3
        assert run["idempotencyKey"] == "order-42"
        assert run["priority"] == "default" and run["cancelRequested"] is False

        again = await team.post("/v1/jobs/sync/runs", headers={"Idempotency-Key": "order-42"})
        assert again.status_code == 200, again.text
        assert again.json()["runId"] == run["runId"]
        assert again.json()["createdAt"] == run["createdAt"]

        listed = (await team.get("/v1/jobs/sync/runs")).json()
        assert [item["runId"] for item in listed["items"]] == [run["runId"]]

        # Without a key every call is a new run, keyed tenant/name#runId.
        plain = (await team.post("/v1/jobs/sync/runs")).json()
        assert plain["runId"] != run["runId"]
        assert plain["idempotencyKey"] == f"acme/sync#{plain['runId']}"


async def test_run_at_and_delay_seconds_schedule_the_run(api_server: ApiServer) -> None:
    await make_job(api_server, "later")
    at = (datetime.now(UTC) + timedelta(hours=2)).replace(microsecond=0)
    async with client(api_server, api_server.team_token) as team:
        scheduled = await team.post(
            "/v1/jobs/later/runs", json={"runAt": at.isoformat().replace("+00:00", "Z")}
        )
        assert scheduled.status_code == 201, scheduled.text
        assert scheduled.json()["state"] == "scheduled"
        assert instant(scheduled.json()["readyAt"]) == at
        assert instant(scheduled.json()["dueAt"]) == at

        # An offset other than Z is the same instant.
        berlin = at.astimezone(timezone(timedelta(hours=1)))
        same = await team.post("/v1/jobs/later/runs", json={"runAt": berlin.isoformat()})
        assert instant(same.json()["readyAt"]) == at

        delayed = await team.post("/v1/jobs/later/runs", json={"delaySeconds": 600})
        assert delayed.status_code == 201
        run = delayed.json()
        assert run["state"] == "scheduled"
        assert instant(run["readyAt"]) - instant(run["createdAt"]) == timedelta(seconds=600)

        # A time already past runs now.
        past = await team.post("/v1/jobs/later/runs", json={"runAt": "2020-01-01T00:00:00Z"})
        assert past.json()["state"] == "ready"

        both = await team.post(
            "/v1/jobs/later/runs", json={"runAt": "2030-01-01T00:00:00Z", "delaySeconds": 5}
        )
        assert both.status_code == 400
        assert both.json()["type"] == PROBLEMS + "invalid-request"

    # Nothing scheduled is leased before its time.
    leased = await lease(api_server, max=10)
    assert [item["runId"] for item in leased] == [past.json()["runId"]]


async def test_enqueue_overrides_payload_and_priority(api_server: ApiServer) -> None:
    await make_job(api_server, "mail", payload={"template": "welcome"}, priority="bulk")
    async with client(api_server, api_server.team_token) as team:
        inherited = (await team.post("/v1/jobs/mail/runs")).json()
        assert inherited["payload"] == {"template": "welcome"}
        assert inherited["priority"] == "bulk"
        overridden = (
            await team.post(
                "/v1/jobs/mail/runs",
                json={
                    "payload": {"template": "reset", "to": ["a@example.com"]},
                    "priority": "critical",
                },
            )
        ).json()
        assert overridden["payload"] == {"template": "reset", "to": ["a@example.com"]}
        assert overridden["priority"] == "critical"
        cleared = (await team.post("/v1/jobs/mail/runs", json={"payload": None})).json()
        assert cleared["payload"] is None

    # The worker gets the critical run first, with its own payload.
    [first] = await lease(api_server)
    assert first["runId"] == overridden["runId"]
    assert first["payload"] == {"template": "reset", "to": ["a@example.com"]}
    assert first["priority"] == "critical"


async def test_if_not_running_refuses_while_a_run_is_leased(api_server: ApiServer) -> None:
    await make_job(api_server, "singleton", concurrency=1)
    async with client(api_server, api_server.team_token) as team:
        first = (await team.post("/v1/jobs/singleton/runs", json={"ifNotRunning": True})).json()
        assert first["state"] == "ready"
        [granted] = await lease(api_server)
        assert granted["runId"] == first["runId"]

        refused = await team.post("/v1/jobs/singleton/runs", json={"ifNotRunning": True})
        assert refused.status_code == 409, refused.text
        assert refused.headers["content-type"] == "application/problem+json"
        assert refused.json()["type"] == PROBLEMS + "concurrency-limit"
        assert refused.json()["status"] == 409
        # Without ifNotRunning the run is simply queued.
        assert (await team.post("/v1/jobs/singleton/runs")).status_code == 201

        async with client(api_server, api_server.worker_token) as worker:
            done = await worker.post(
                f"/v1/runs/{first['runId']}/complete",
                json={"fencingToken": granted["fencingToken"], "outcome": "succeeded"},
            )
        assert done.json() == {"state": "succeeded"}
        accepted = await team.post("/v1/jobs/singleton/runs", json={"ifNotRunning": True})
        assert accepted.status_code == 201


async def test_batch_enqueue_answers_per_item_in_order(api_server: ApiServer) -> None:
    await make_job(api_server, "fanout", payload={"default": True})
    at = "2031-06-01T12:00:00Z"
    runs = [
        {"payload": {"n": 0}},
        {"delaySeconds": -5},
        {"runAt": at, "idempotencyKey": "batch-a"},
        {"payload": "x" * (256 * 1024 + 1)},
        {"runAt": "2031-06-01T14:00:00+02:00", "idempotencyKey": "batch-a"},
        {"payload": {"n": 5}, "unexpected": 1},
        {},
        {"idempotencyKey": "batch-a"},
    ]
    async with client(api_server, api_server.team_token) as team:
        response = await team.post("/v1/jobs/fanout/runs:batch", json={"runs": runs})
        assert response.status_code == 200, response.text
        items = response.json()["items"]
        assert len(items) == len(runs)

        assert items[0]["payload"] == {"n": 0} and items[0]["state"] == "ready"
        assert items[1]["problem"]["type"] == PROBLEMS + "invalid-request"
        assert items[1]["problem"]["status"] == 400
        assert items[1]["problem"]["field"] == "runs[1].delaySeconds"
        assert items[2]["state"] == "scheduled" and items[2]["readyAt"] == at
        assert items[2]["idempotencyKey"] == "batch-a"
        assert items[3]["problem"]["type"] == PROBLEMS + "payload-too-large"
        assert items[3]["problem"]["status"] == 413
        # The same key and request (the same instant, spelled otherwise): the same run.
        assert items[4]["runId"] == items[2]["runId"]
        assert items[5]["problem"]["field"] == "runs[5].unexpected"
        assert items[6]["payload"] == {"default": True}
        # The same key for another request is refused, and only that item.
        assert items[7]["problem"]["status"] == 422
        assert items[7]["problem"]["type"] == PROBLEMS + "idempotency-key-reused"
        assert items[7]["problem"]["field"] == "runs[7].idempotencyKey"

        listed = (await team.get("/v1/jobs/fanout/runs")).json()["items"]
        assert sorted(item["runId"] for item in listed) == sorted(
            {items[0]["runId"], items[2]["runId"], items[6]["runId"]}
        )

        for body in [{"runs": []}, {"runs": "no"}, {"items": [{}]}, [1]]:
            bad = await team.post("/v1/jobs/fanout/runs:batch", json=body)
            assert bad.status_code == 400, body
            assert bad.json()["type"] == PROBLEMS + "invalid-request"
        missing = await team.post("/v1/jobs/no-such-job/runs:batch", json={"runs": [{}]})
        assert missing.status_code == 404


async def test_a_plain_batch_answers_the_runs_as_they_are_stored(api_server: ApiServer) -> None:
    """Items of only a payload (or nothing) take the one-statement path: each answer is
    the run as GET shows it, in order, and the job's payload fills the empty items."""
    await make_job(api_server, "plain", payload={"default": True}, priority="critical")
    runs = [{"payload": {"n": 0, "deep": {"b": [1, "x"]}}}, {}, {"payload": None}, {"payload": 7}]
    async with client(api_server, api_server.team_token) as team:
        response = await team.post("/v1/jobs/plain/runs:batch", json={"runs": runs})
        assert response.status_code == 200, response.text
        items = response.json()["items"]
        assert [item["payload"] for item in items] == [
            {"n": 0, "deep": {"b": [1, "x"]}},
            {"default": True},
            None,
            7,
        ]
        assert {item["priority"] for item in items} == {"critical"}
        assert len({item["runId"] for item in items}) == len(runs)
        for item in items:
            shown = (await team.get(f"/v1/runs/{item['runId']}")).json()
            assert shown.pop("attempts") == []
            assert item == shown
        listed = (await team.get("/v1/jobs/plain/runs")).json()["items"]
        assert [item["runId"] for item in listed] == [item["runId"] for item in items][::-1]
        audit = (await team.get("/v1/audit", params={"job": "plain"})).json()["items"]
        assert (audit[0]["action"], audit[0]["detail"]) == ("enqueue", {"runs": len(runs)})
    leased = await lease(api_server, max=10)
    assert [item["runId"] for item in leased] == [item["runId"] for item in items]


async def test_runs_of_a_job_newest_first_by_state_and_cursor(api_server: ApiServer) -> None:
    await make_job(api_server, "ticks")
    async with client(api_server, api_server.team_token) as team:
        made = []
        for n in range(7):
            body: dict[str, Any] = {"payload": {"n": n}}
            if n % 2:
                body["delaySeconds"] = 3600
            made.append((await team.post("/v1/jobs/ticks/runs", json=body)).json())
        newest_first = [run["runId"] for run in reversed(made)]

        seen: list[str] = []
        cursor = None
        while True:
            params: dict[str, Any] = {"limit": 3}
            if cursor is not None:
                params["cursor"] = cursor
            page = (await team.get("/v1/jobs/ticks/runs", params=params)).json()
            assert len(page["items"]) <= 3
            seen += [item["runId"] for item in page["items"]]
            cursor = page["nextCursor"]
            if cursor is None:
                break
        assert seen == newest_first

        scheduled = (await team.get("/v1/jobs/ticks/runs", params={"state": "scheduled"})).json()
        assert [item["runId"] for item in scheduled["items"]] == [
            run["runId"] for run in reversed(made) if run["state"] == "scheduled"
        ]
        assert len(scheduled["items"]) == 3
        ready = (
            await team.get("/v1/jobs/ticks/runs", params={"state": "ready", "limit": 2})
        ).json()
        assert [item["payload"]["n"] for item in ready["items"]] == [6, 4]
        assert ready["nextCursor"] is not None

        bad_state = await team.get("/v1/jobs/ticks/runs", params={"state": "sleeping"})
        assert bad_state.status_code == 400
        assert bad_state.json()["field"] == "state"


async def test_get_run_shows_its_attempts(api_server: ApiServer) -> None:
    await make_job(api_server, "flaky", retry={"maxAttempts": 3, "baseSeconds": 0})
    async with client(api_server, api_server.team_token) as team:
        run = (await team.post("/v1/jobs/flaky/runs")).json()
    async with client(api_server, api_server.worker_token) as worker:
        first = (
            await worker.post("/v1/lease", json={"queues": ["default"], "workerId": "pod-a"})
        ).json()["leases"][0]
        failed = await worker.post(
            f"/v1/runs/{run['runId']}/complete",
            json={
                "fencingToken": first["fencingToken"],
                "outcome": "failed",
                "error": {"message": "timeout talking to the bank", "retryable": True},
            },
        )
        assert failed.json()["state"] == "retry_wait"
        await api_server.scheduler.pass_once()
        second = (
            await worker.post("/v1/lease", json={"queues": ["default"], "workerId": "pod-b"})
        ).json()["leases"][0]
        assert second["attempt"] == 2

    async with client(api_server, api_server.team_token) as team:
        shown = await team.get(f"/v1/runs/{run['runId']}")
    assert shown.status_code == 200
    document = shown.json()
    assert set(document) == wire_fields(models.RunWithAttempts)
    assert document["state"] == "leased" and document["attempt"] == 2
    assert document["lastError"]["message"] == "timeout talking to the bank"
    one, two = document["attempts"]
    two_at_lease = two
    assert set(one) == {"attempt", "workerId", "leasedAt", "finishedAt", "outcome", "error"}
    assert (one["attempt"], one["workerId"], one["outcome"]) == (1, "pod-a", "failed")
    assert one["error"]["message"] == "timeout talking to the bank"
    assert instant(one["finishedAt"]) >= instant(one["leasedAt"])
    assert (two["attempt"], two["workerId"], two["outcome"], two["finishedAt"]) == (
        2,
        "pod-b",
        None,
        None,
    )

    # The attempt that succeeds is read from the finished run (it writes no attempt row).
    async with client(api_server, api_server.worker_token) as worker:
        done = await worker.post(
            f"/v1/runs/{run['runId']}/complete",
            json={"fencingToken": second["fencingToken"], "outcome": "succeeded"},
        )
        assert done.json()["state"] == "succeeded"
    async with client(api_server, api_server.team_token) as team:
        final = (await team.get(f"/v1/runs/{run['runId']}")).json()
    one_again, two = final["attempts"]
    assert one_again == one
    assert (two["attempt"], two["workerId"], two["outcome"], two["error"]) == (
        2,
        "pod-b",
        "succeeded",
        None,
    )
    assert two["finishedAt"] == final["finishedAt"]
    assert instant(two_at_lease["leasedAt"]) == instant(two["leasedAt"])
    assert instant(two["leasedAt"]) <= instant(two["finishedAt"])


async def test_cancel_a_pending_run_and_a_leased_run(api_server: ApiServer) -> None:
    await make_job(api_server, "long")
    async with client(api_server, api_server.team_token) as team:
        pending = (await team.post("/v1/jobs/long/runs", json={"delaySeconds": 60})).json()
        cancelled = await team.post(f"/v1/runs/{pending['runId']}:cancel")
        assert cancelled.status_code == 200, cancelled.text
        assert cancelled.json()["state"] == "cancelled"
        assert cancelled.json()["finishedAt"] is not None
        # Cancelling again answers the same run.
        assert (await team.post(f"/v1/runs/{pending['runId']}:cancel")).json()["state"] == (
            "cancelled"
        )

        running = (await team.post("/v1/jobs/long/runs")).json()
    [granted] = await lease(api_server)
    assert granted["runId"] == running["runId"]
    async with client(api_server, api_server.team_token) as team:
        requested = await team.post(f"/v1/runs/{running['runId']}:cancel")
    assert requested.status_code == 200
    assert requested.json()["state"] == "leased"
    assert requested.json()["cancelRequested"] is True

    async with client(api_server, api_server.worker_token) as worker:
        beat = await worker.post(
            f"/v1/runs/{running['runId']}/heartbeat",
            json={"fencingToken": granted["fencingToken"], "extendSeconds": 30},
        )
        assert beat.status_code == 200
        assert beat.json()["cancelRequested"] is True
        done = await worker.post(
            f"/v1/runs/{running['runId']}/complete",
            json={"fencingToken": granted["fencingToken"], "outcome": "succeeded"},
        )
        assert done.json() == {"state": "cancelled"}

    async with client(api_server, api_server.team_token) as team:
        final = (await team.get(f"/v1/runs/{running['runId']}")).json()
        assert final["state"] == "cancelled"
        assert final["attempts"][0]["outcome"] == "cancelled"
        # Cancelling a cancelled run answers it unchanged; other finished runs are refused.
        repeat = await team.post(f"/v1/runs/{running['runId']}:cancel")
        assert repeat.status_code == 200 and repeat.json()["state"] == "cancelled"
        done_run = (await team.post("/v1/jobs/long/runs")).json()
    [again] = await lease(api_server)
    async with client(api_server, api_server.worker_token) as worker:
        await worker.post(
            f"/v1/runs/{done_run['runId']}/complete",
            json={"fencingToken": again["fencingToken"], "outcome": "succeeded"},
        )
    async with client(api_server, api_server.team_token) as team:
        refused = await team.post(f"/v1/runs/{done_run['runId']}:cancel")
        assert refused.status_code == 409
        assert refused.json()["type"] == PROBLEMS + "invalid-state"
        unknown = await team.post("/v1/runs/r0-999999:cancel")
        assert unknown.status_code == 404
        assert unknown.json()["type"] == PROBLEMS + "not-found"
