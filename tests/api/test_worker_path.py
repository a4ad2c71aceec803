"""The worker path over HTTP: lease, heartbeat, complete (singly and in batches), fencing,
retries into the DLQ and back out, and the metrics a lease leaves behind."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from conftest import ApiServer

from api.clients import (
    PROBLEMS,
    assert_problem,
    client,
    complete,
    enqueue,
    get_run,
    heartbeat,
    instant,
    lease,
    make_job,
    wire_fields,
)
from tickwork.api import models
from tickwork.core.clock import FrozenClock
from tickwork.engine.scheduler import Scheduler


async def test_lease_hands_out_runs_with_exactly_the_contract_fields(api_server: ApiServer) -> None:
    await make_job(
        api_server,
        "export-invoices",
        queue="billing",
        priority="critical",
        timeoutSeconds=900,
        payload={"format": "csv"},
    )
    await make_job(api_server, "thumbnails")
    billing = [await enqueue(api_server, "export-invoices") for _ in range(3)]
    other = await enqueue(api_server, "thumbnails")

    granted = await lease(
        api_server, queues=["billing"], max=2, leaseSeconds=45, workerId="pod-abc"
    )
    assert len(granted) == 2
    assert [item["runId"] for item in granted] == [run["runId"] for run in billing[:2]]
    first = granted[0]
    assert set(first) == wire_fields(models.Lease)
    assert first["job"] == "export-invoices" and first["tenant"] == "acme"
    assert first["queue"] == "billing" and first["priority"] == "critical"
    assert first["attempt"] == 1
    assert first["payload"] == {"format": "csv"}
    assert first["idempotencyKey"] == f"acme/export-invoices#{first['runId']}"
    assert isinstance(first["fencingToken"], int) and first["fencingToken"] > 0
    assert first["dueAt"] == billing[0]["dueAt"]
    assert granted[0]["fencingToken"] != granted[1]["fencingToken"]

    run = await get_run(api_server, first["runId"])
    assert run["state"] == "leased"
    [attempt] = run["attempts"]
    assert attempt["workerId"] == "pod-abc"
    leased_at = instant(attempt["leasedAt"])
    assert instant(first["leaseExpiresAt"]) - leased_at == timedelta(seconds=45)
    assert instant(first["deadline"]) - leased_at == timedelta(seconds=900)

    # The rest of the billing queue, then nothing; the default queue is separate.
    rest = await lease(api_server, queues=["billing"], max=100)
    assert [item["runId"] for item in rest] == [billing[2]["runId"]]
    assert await lease(api_server, queues=["billing"], max=100) == []
    assert [item["runId"] for item in await lease(api_server, max=5)] == [other["runId"]]


async def test_lease_request_is_validated(api_server: ApiServer) -> None:
    async with client(api_server, api_server.worker_token) as worker:
        for body, field in [
            ({}, "queues"),
            ({"queues": []}, "queues"),
            ({"queues": ["default"], "max": 0}, "max"),
            ({"queues": ["default"], "max": 101}, "max"),
            ({"queues": ["default"], "max": 1.5}, "max"),
            ({"queues": ["default"], "max": 5.0}, "max"),
            ({"queues": ["default"], "leaseSeconds": 0}, "leaseSeconds"),
            ({"queues": ["default"], "leaseSeconds": 21_601}, "leaseSeconds"),
            ({"queues": ["default"], "waitSeconds": 21}, "waitSeconds"),
            ({"queues": ["default"], "workerId": 7}, "workerId"),
            ({"queues": ["default"], "colour": "red"}, "colour"),
        ]:
            response = await worker.post("/v1/lease", json=body)
            problem = assert_problem(response, 400, "invalid-request")
            assert problem["field"] == field, body
        not_json = await worker.post(
            "/v1/lease", content=b"{", headers={"content-type": "application/json"}
        )
        assert_problem(not_json, 400, "invalid-request")


async def test_heartbeat_extends_the_lease_up_to_the_deadline(api_server: ApiServer) -> None:
    await make_job(api_server, "crunch", timeoutSeconds=120)
    await enqueue(api_server, "crunch")
    [granted] = await lease(api_server, leaseSeconds=10)
    run_id, token = granted["runId"], granted["fencingToken"]

    beat = await heartbeat(api_server, run_id, token, extend=60)
    assert beat.status_code == 200, beat.text
    assert set(beat.json()) == {"leaseExpiresAt", "cancelRequested"}
    assert beat.json()["cancelRequested"] is False
    extended = instant(beat.json()["leaseExpiresAt"])
    assert extended > instant(granted["leaseExpiresAt"])
    assert extended < instant(granted["deadline"])

    # No extension goes past the attempt's deadline (timeoutSeconds).
    capped = await heartbeat(api_server, run_id, token, extend=3600)
    assert instant(capped.json()["leaseExpiresAt"]) == instant(granted["deadline"])

    assert_problem(await heartbeat(api_server, run_id, token, extend=0), 400, "invalid-request")
    assert_problem(await heartbeat(api_server, "r0-424242", token), 404, "not-found")
    assert_problem(await heartbeat(api_server, "not-a-run", token), 404, "not-found")


async def test_complete_succeeded_failed_and_not_retryable(api_server: ApiServer) -> None:
    await make_job(api_server, "steps", retry={"maxAttempts": 3, "baseSeconds": 60})
    ok, retry, fatal = [await enqueue(api_server, "steps") for _ in range(3)]
    leases = {item["runId"]: item for item in await lease(api_server, max=3)}

    done = await complete(api_server, leases[ok["runId"]])
    assert done.status_code == 200 and done.json() == {"state": "succeeded"}

    failed = await complete(
        api_server, leases[retry["runId"]], "failed", error={"message": "bank down"}
    )
    assert failed.json()["state"] == "retry_wait"
    next_at = instant(failed.json()["nextAttemptAt"])
    finished = await get_run(api_server, retry["runId"])
    assert finished["state"] == "retry_wait"
    assert instant(finished["readyAt"]) == next_at
    leased_at = instant(finished["attempts"][0]["leasedAt"])
    assert leased_at <= next_at <= leased_at + timedelta(seconds=61)

    dead = await complete(
        api_server,
        leases[fatal["runId"]],
        "failed",
        error={"message": "bad input", "retryable": False},
    )
    assert dead.json() == {"state": "dead"}
    assert (await get_run(api_server, fatal["runId"]))["lastError"]["message"] == "bad input"

    succeeded = await get_run(api_server, ok["runId"])
    assert succeeded["state"] == "succeeded" and succeeded["finishedAt"] is not None
    assert succeeded["attempts"][0]["outcome"] == "succeeded"


async def test_repeating_a_completion_with_the_same_token_gives_the_same_answer(
    api_server: ApiServer,
) -> None:
    await make_job(api_server, "repeat", retry={"maxAttempts": 3, "baseSeconds": 600})
    ok, retry = await enqueue(api_server, "repeat"), await enqueue(api_server, "repeat")
    leases = {item["runId"]: item for item in await lease(api_server, max=2)}

    first = await complete(api_server, leases[ok["runId"]])
    second = await complete(api_server, leases[ok["runId"]])
    assert first.status_code == second.status_code == 200
    assert first.json() == second.json() == {"state": "succeeded"}

    failed = await complete(api_server, leases[retry["runId"]], "failed", error={"message": "x"})
    again = await complete(api_server, leases[retry["runId"]], "failed", error={"message": "x"})
    assert again.status_code == 200
    assert again.json() == failed.json()
    assert failed.json()["state"] == "retry_wait"
    # The repeat recorded nothing new.
    assert len((await get_run(api_server, retry["runId"]))["attempts"]) == 1


async def test_a_stale_fencing_token_is_refused_after_the_lease_expired(
    api_server: ApiServer,
) -> None:
    await make_job(api_server, "slow", retry={"maxAttempts": 3, "baseSeconds": 0})
    # The scheduler's first pass takes its shards over (reap, then catch up and flip);
    # from the next one on a pass flips before it reaps, as below.
    await api_server.scheduler.pass_once()
    run = await enqueue(api_server, "slow")
    [old] = await lease(api_server, leaseSeconds=1, workerId="pod-slow")
    # A scheduler whose clock we move: its first pass takes the shards over while the
    # lease still runs; then its clock stands past the one-second lease.
    expires = datetime.fromisoformat(old["leaseExpiresAt"])
    clock = FrozenClock(expires - timedelta(seconds=0.5))
    later = Scheduler(api_server.database, clock=clock)
    await later.pass_once()
    clock.advance(1.5)
    await later.pass_once()  # the reaper: leased -> retry_wait
    gone = await get_run(api_server, run["runId"])
    assert gone["state"] == "retry_wait"
    assert gone["attempts"][0]["outcome"] == "lease-expired"
    # With no lease at all the old token is stale too.
    assert_problem(
        await heartbeat(api_server, run["runId"], old["fencingToken"]), 409, "stale-lease"
    )

    await later.pass_once()  # the due flip: retry_wait -> ready
    [new] = await lease(api_server, workerId="pod-fast")
    assert new["runId"] == run["runId"] and new["attempt"] == 2
    assert new["fencingToken"] > old["fencingToken"]

    problem = assert_problem(
        await heartbeat(api_server, run["runId"], old["fencingToken"]), 409, "stale-lease"
    )
    assert problem["title"] and problem["detail"]
    assert_problem(await complete(api_server, old), 409, "stale-lease")
    assert_problem(await complete(api_server, old, "failed"), 409, "stale-lease")
    current = await get_run(api_server, run["runId"])
    assert current["state"] == "leased"
    assert current["attempts"][-1]["workerId"] == "pod-fast"

    # The current holder is unaffected.
    assert (await heartbeat(api_server, run["runId"], new["fencingToken"])).status_code == 200
    assert (await complete(api_server, new)).json() == {"state": "succeeded"}


async def jobs_on_distinct_shards(api_server: ApiServer, count: int) -> list[str]:
    names: dict[int, str] = {}
    n = 0
    while len(names) < count:
        job = await make_job(api_server, f"spread-{n}", retry={"maxAttempts": 3, "baseSeconds": 0})
        names.setdefault(job["shard"], job["name"])
        n += 1
    return list(names.values())


async def test_batch_heartbeat_and_complete_answer_per_item_in_order(
    api_server: ApiServer,
) -> None:
    one, two, three = await jobs_on_distinct_shards(api_server, 3)
    runs = [await enqueue(api_server, name) for name in (one, two, three, one)]
    leases = {item["runId"]: item for item in await lease(api_server, max=10)}
    assert set(leases) == {run["runId"] for run in runs}
    a, b, c, d = (leases[run["runId"]] for run in runs)
    # d's lease is gone: it succeeded already.
    assert (await complete(api_server, d)).status_code == 200

    async with client(api_server, api_server.worker_token) as worker:
        beats = await worker.post(
            "/v1/runs:heartbeat",
            json={
                "items": [
                    {"runId": a["runId"], "fencingToken": a["fencingToken"], "extendSeconds": 60},
                    {"runId": "r0-987654321", "fencingToken": 5, "extendSeconds": 60},
                    {"runId": b["runId"], "fencingToken": b["fencingToken"] + 1000},
                    {"runId": d["runId"], "fencingToken": d["fencingToken"]},
                    {"runId": c["runId"], "fencingToken": c["fencingToken"], "extendSeconds": 60},
                    {"runId": "garbage", "fencingToken": 5},
                ]
            },
        )
    assert beats.status_code == 200, beats.text
    items = beats.json()["items"]
    assert [item["runId"] for item in items] == [
        a["runId"],
        "r0-987654321",
        b["runId"],
        d["runId"],
        c["runId"],
        "garbage",
    ]
    assert set(items[0]) == {"runId", "leaseExpiresAt", "cancelRequested"}
    assert instant(items[0]["leaseExpiresAt"]) > instant(a["leaseExpiresAt"])
    assert items[1]["problem"]["type"] == PROBLEMS + "not-found"
    assert items[1]["problem"]["status"] == 404
    assert items[2]["problem"]["type"] == PROBLEMS + "stale-lease"
    assert items[2]["problem"]["status"] == 409
    assert items[3]["problem"]["type"] == PROBLEMS + "stale-lease"
    assert "leaseExpiresAt" in items[4]
    assert items[5]["problem"]["type"] == PROBLEMS + "not-found"

    async with client(api_server, api_server.worker_token) as worker:
        done = await worker.post(
            "/v1/runs:complete",
            json={
                "items": [
                    {
                        "runId": b["runId"],
                        "fencingToken": b["fencingToken"] + 1000,
                        "outcome": "succeeded",
                    },
                    {
                        "runId": a["runId"],
                        "fencingToken": a["fencingToken"],
                        "outcome": "succeeded",
                    },
                    {"runId": "r1-987654321", "fencingToken": 9, "outcome": "succeeded"},
                    {
                        "runId": c["runId"],
                        "fencingToken": c["fencingToken"],
                        "outcome": "failed",
                        "error": {"message": "disk full", "retryable": False},
                    },
                    {
                        "runId": d["runId"],
                        "fencingToken": d["fencingToken"],
                        "outcome": "succeeded",
                    },
                ]
            },
        )
    assert done.status_code == 200, done.text
    results = done.json()["items"]
    assert [item["runId"] for item in results] == [
        b["runId"],
        a["runId"],
        "r1-987654321",
        c["runId"],
        d["runId"],
    ]
    assert results[0]["problem"]["type"] == PROBLEMS + "stale-lease"
    assert results[1] == {"runId": a["runId"], "state": "succeeded"}
    assert results[2]["problem"]["type"] == PROBLEMS + "not-found"
    assert results[3] == {"runId": c["runId"], "state": "dead"}
    assert results[4] == {"runId": d["runId"], "state": "succeeded"}  # an idempotent repeat

    states = {run["runId"]: (await get_run(api_server, run["runId"]))["state"] for run in runs}
    assert states == {
        a["runId"]: "succeeded",
        b["runId"]: "leased",  # the stale item changed nothing
        c["runId"]: "dead",
        d["runId"]: "succeeded",
    }

    async with client(api_server, api_server.worker_token) as worker:
        for path in ("/v1/runs:heartbeat", "/v1/runs:complete"):
            empty = await worker.post(path, json={"items": []})
            assert_problem(empty, 400, "invalid-request")
            too_many = await worker.post(
                path, json={"items": [{"runId": a["runId"], "fencingToken": 1}] * 101}
            )
            assert_problem(too_many, 400, "invalid-request")
        bad = await worker.post(
            "/v1/runs:complete",
            json={"items": [{"runId": a["runId"], "fencingToken": 1, "outcome": "maybe"}]},
        )
        assert assert_problem(bad, 400, "invalid-request")["field"] == "items[0].outcome"


async def test_swapped_tokens_in_a_batch_change_nothing(api_server: ApiServer) -> None:
    await make_job(api_server, "swap")
    first, second = await enqueue(api_server, "swap"), await enqueue(api_server, "swap")
    leases = {item["runId"]: item for item in await lease(api_server, max=2)}
    a, b = leases[first["runId"]], leases[second["runId"]]
    async with client(api_server, api_server.worker_token) as worker:
        done = await worker.post(
            "/v1/runs:complete",
            json={
                "items": [
                    {
                        "runId": a["runId"],
                        "fencingToken": b["fencingToken"],
                        "outcome": "succeeded",
                    },
                    {
                        "runId": b["runId"],
                        "fencingToken": a["fencingToken"],
                        "outcome": "succeeded",
                    },
                ]
            },
        )
    assert [item["problem"]["type"] for item in done.json()["items"]] == [
        PROBLEMS + "stale-lease"
    ] * 2
    assert (await get_run(api_server, a["runId"]))["state"] == "leased"
    assert (await get_run(api_server, b["runId"]))["state"] == "leased"


async def test_a_job_at_its_concurrency_limit_is_not_leased_again(api_server: ApiServer) -> None:
    await make_job(api_server, "one-at-a-time", concurrency=1)
    first = await enqueue(api_server, "one-at-a-time")
    await enqueue(api_server, "one-at-a-time")
    granted = await lease(api_server, max=2)
    assert [item["runId"] for item in granted] == [first["runId"]]
    # The second run waits in ready until the first completes.
    assert await lease(api_server, max=2) == []
    assert (await complete(api_server, granted[0])).status_code == 200
    assert len(await lease(api_server, max=2)) == 1


async def test_retries_end_in_the_dlq_and_replay_and_discard_work(api_server: ApiServer) -> None:
    await make_job(api_server, "import", retry={"maxAttempts": 2, "baseSeconds": 0})
    run = await enqueue(api_server, "import", payload={"file": "a.csv"})
    run_id = run["runId"]

    [first] = await lease(api_server)
    failed = await complete(api_server, first, "failed", error={"message": "first"})
    assert failed.json()["state"] == "retry_wait"
    assert "nextAttemptAt" in failed.json()
    await api_server.scheduler.pass_once()  # retry_wait -> ready
    [second] = await lease(api_server)
    assert (second["runId"], second["attempt"]) == (run_id, 2)
    dead = await complete(api_server, second, "failed", error={"message": "second"})
    assert dead.json() == {"state": "dead"}

    async with client(api_server, api_server.team_token) as team:
        dlq = (await team.get("/v1/dlq")).json()
        assert [item["runId"] for item in dlq["items"]] == [run_id]
        assert dlq["nextCursor"] is None
        entry = dlq["items"][0]
        assert entry["state"] == "dead" and entry["attempt"] == 2
        assert entry["lastError"]["message"] == "second"
        assert entry["payload"] == {"file": "a.csv"}
        assert [
            i["runId"]
            for i in (await team.get("/v1/dlq", params={"job": "import"})).json()["items"]
        ] == [run_id]
        assert (await team.get("/v1/dlq", params={"job": "other"})).json()["items"] == []
        assert (await team.get("/v1/jobs/import")).json()["deadRuns"] == 1

        replayed = await team.post(f"/v1/dlq/{run_id}:replay")
        assert replayed.status_code == 200, replayed.text
        assert replayed.json()["state"] == "ready"
        assert replayed.json()["attempt"] == 0
        assert replayed.json()["finishedAt"] is None
        assert (await team.get("/v1/dlq")).json()["items"] == []
        # The same replay again (the answer was lost) answers the revived run; a discard
        # of a run that is not dead is refused.
        repeated = await team.post(f"/v1/dlq/{run_id}:replay")
        assert repeated.status_code == 200, repeated.text
        assert (repeated.json()["runId"], repeated.json()["state"]) == (run_id, "ready")
        assert_problem(await team.post(f"/v1/dlq/{run_id}:discard"), 409, "invalid-state")

    [third] = await lease(api_server)
    assert (third["runId"], third["attempt"]) == (run_id, 1)  # a fresh attempt budget
    again = await complete(
        api_server, third, "failed", error={"message": "third", "retryable": False}
    )
    assert again.json() == {"state": "dead"}

    async with client(api_server, api_server.team_token) as team:
        assert [item["runId"] for item in (await team.get("/v1/dlq")).json()["items"]] == [run_id]
        discarded = await team.post(f"/v1/dlq/{run_id}:discard")
        assert discarded.status_code == 200
        assert discarded.json()["state"] == "discarded"
        assert (await team.get("/v1/dlq")).json()["items"] == []
        assert (await team.post(f"/v1/dlq/{run_id}:discard")).json()["state"] == "discarded"
        assert_problem(await team.post(f"/v1/dlq/{run_id}:replay"), 409, "invalid-state")
        assert_problem(await team.post("/v1/dlq/r0-999999:replay"), 404, "not-found")
        history = (await team.get(f"/v1/runs/{run_id}")).json()
        assert history["state"] == "discarded"
        assert [a["error"]["message"] for a in history["attempts"]] == ["first", "second", "third"]
    assert await lease(api_server) == []


async def test_dlq_pages_across_shards_newest_death_first(api_server: ApiServer) -> None:
    names = await jobs_on_distinct_shards(api_server, 3)
    dead: list[str] = []
    for name in names * 2:
        run = await enqueue(api_server, name)
        [granted] = await lease(api_server)
        assert granted["runId"] == run["runId"]
        response = await complete(
            api_server, granted, "failed", error={"message": "no", "retryable": False}
        )
        assert response.json()["state"] == "dead"
        dead.append(run["runId"])

    seen: list[dict[str, Any]] = []
    cursor = None
    async with client(api_server, api_server.team_token) as team:
        while True:
            params: dict[str, Any] = {"limit": 4}
            if cursor:
                params["cursor"] = cursor
            response = await team.get("/v1/dlq", params=params)
            assert response.status_code == 200, response.text
            seen += response.json()["items"]
            cursor = response.json()["nextCursor"]
            if cursor is None:
                break
        assert_problem(await team.get("/v1/dlq", params={"cursor": "%%%"}), 400, "invalid-request")
    assert [item["runId"] for item in seen] == list(reversed(dead))
    finished = [instant(item["finishedAt"]) for item in seen]
    assert finished == sorted(finished, reverse=True)


async def test_metrics_count_leases_and_start_lag(api_server: ApiServer) -> None:
    await make_job(api_server, "measured", priority="critical")
    await enqueue(api_server, "measured")
    [granted] = await lease(api_server)
    assert (await complete(api_server, granted)).status_code == 200
    async with client(api_server, api_server.admin_token) as admin:
        response = await admin.get("/metrics")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain")
    text = response.text
    # Queue names are each tenant's own: the series says whose queue it is.
    leases = 'tickwork_leases_total{priority="critical",queue="default",tenant="acme"} 1.0'
    assert leases in text
    assert 'tickwork_start_lag_seconds_count{priority="critical"} 1.0' in text
    assert "tickwork_start_lag_seconds_bucket" in text
    assert 'tickwork_schedule_lag_seconds_count{priority="critical"} 1.0' in text
    # No job opted in to per-job series: the lease counts under _other.
    assert 'tickwork_job_leases_total{priority="critical",tickwork_job="_other"} 1.0' in text
    assert 'tickwork_completions_total{state="succeeded"} 1.0' in text
