"""JobSpec ``unique`` and ``debounce``: enqueues grouped by a key read from the payload,
enforced in the shard's enqueue transaction, so that they hold for concurrent clients
served by two API replicas (two pools) on a real PostgreSQL. Time is the pinned clock
both replicas share (``now`` parameters), never a sleep."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from datetime import timedelta
from typing import Any

import httpx
import pytest
from conftest import TEAM_TOKEN, served
from conftest import test_tokens as tokens

from tickwork.api.services import Services
from tickwork.core.clock import FrozenClock
from tickwork.core.records import Lease, Outcome
from tickwork.core.settings import ApiSettings
from tickwork.core.shards import ShardMap
from tickwork.engine.dispatch import CompleteItem, Dispatcher
from tickwork.engine.installation import Installation
from tickwork.engine.metrics import Metrics
from tickwork.store.database import Database

HEADERS = {"Authorization": f"Bearer {TEAM_TOKEN}"}
PENDING = ["scheduled", "ready", "retry_wait"]


class Unlimited:
    async def admit(self, tenant: str, runs: int) -> None:
        return None


@pytest.fixture
async def replicas(shard_map: ShardMap, clock: FrozenClock) -> AsyncIterator[list[str]]:
    """Two API replicas, each with its own pools, on one pinned clock."""
    async with AsyncExitStack() as stack:
        urls = []
        for _ in range(2):
            database = await stack.enter_async_context(Database(shard_map))
            services = Services(
                engine=Installation.over(database, clock=clock),
                authenticator=tokens(),
                metrics=Metrics(),
                settings=ApiSettings(auth_failure_rate=0),
                # Quotas are not what this is about (and their buckets refill on the
                # clock, which stands still here): every enqueue is admitted.
                quota=Unlimited(),
            )
            urls.append(await stack.enter_async_context(served(services)))
        yield urls


@pytest.fixture
async def teams(replicas: list[str]) -> AsyncIterator[list[httpx.AsyncClient]]:
    async with AsyncExitStack() as stack:
        yield [
            await stack.enter_async_context(
                httpx.AsyncClient(base_url=url, headers=HEADERS, timeout=60)
            )
            for url in replicas
        ]


async def put_job(team: httpx.AsyncClient, name: str, spec: dict[str, Any]) -> None:
    answer = await team.put(f"/v1/jobs/{name}", json=spec)
    assert answer.status_code == 201, answer.text


async def runs_of(team: httpx.AsyncClient, name: str) -> list[dict[str, Any]]:
    answer = await team.get(f"/v1/jobs/{name}/runs", params={"limit": 500})
    assert answer.status_code == 200, answer.text
    items: list[dict[str, Any]] = answer.json()["items"]
    return items


async def test_a_hundred_concurrent_enqueues_of_one_key_make_one_run(
    teams: list[httpx.AsyncClient],
) -> None:
    await put_job(teams[0], "sync-customer", {"unique": {"key": "/customer"}})
    answers = await asyncio.gather(
        *(
            teams[n % 2].post(
                "/v1/jobs/sync-customer/runs", json={"payload": {"customer": 7, "n": n}}
            )
            for n in range(100)
        )
    )
    print([a.text for a in answers if a.status_code == 429][:1])
    assert Counter(a.status_code for a in answers) == {201: 1, 200: 99}
    assert len({a.json()["runId"] for a in answers}) == 1
    for answer in answers:
        assert answer.json().get("deduplicated") is (True if answer.status_code == 200 else None)
    (run,) = await runs_of(teams[0], "sync-customer")
    first = next(a for a in answers if a.status_code == 201).json()
    assert run["payload"] == first["payload"]

    # Another key is another run.
    other = await teams[1].post("/v1/jobs/sync-customer/runs", json={"payload": {"customer": 8}})
    assert other.status_code == 201 and "deduplicated" not in other.json()


async def test_a_debounced_burst_becomes_one_run_with_the_last_payload(
    teams: list[httpx.AsyncClient], clock: FrozenClock
) -> None:
    await put_job(
        teams[0], "reindex", {"debounce": {"key": "/doc", "seconds": 5, "maxSeconds": 60}}
    )
    start = clock.now()
    statuses: Counter[int] = Counter()
    # 191 enqueues over 2 s: ten rounds 0.2 s apart, then the last one. The first round
    # is 100 concurrent ones on both replicas, the race to make the run (as in the
    # unique test above); each later round is 10 concurrent pushes of that run on both
    # replicas, racing for the key too. (It was 100 a round: the pushes queue on the
    # key's row lock, so 900 more only cost seconds, not another case.)
    n = 0
    for size in [100] + [10] * 9:
        answers = await asyncio.gather(
            *(
                teams[k % 2].post(
                    "/v1/jobs/reindex/runs", json={"payload": {"doc": "a", "n": n + k}}
                )
                for k in range(size)
            )
        )
        n += size
        statuses.update(a.status_code for a in answers)
        assert all(a.json().get("debounced") for a in answers if a.status_code == 200)
        clock.advance(0.2)
    last = await teams[0].post("/v1/jobs/reindex/runs", json={"payload": {"doc": "a", "n": n}})
    statuses[last.status_code] += 1
    assert statuses == {201: 1, 200: n}
    assert last.json()["debounced"] is True

    (run,) = await runs_of(teams[1], "reindex")
    assert run["payload"] == {"doc": "a", "n": n}
    assert run["state"] == "scheduled"
    # Five seconds after the last enqueue (made at start + 2 s).
    assert run["readyAt"] == _iso(start + timedelta(seconds=7))


async def test_a_burst_that_never_ends_runs_after_max_seconds(
    teams: list[httpx.AsyncClient], clock: FrozenClock, database: Database
) -> None:
    await put_job(teams[0], "digest", {"debounce": {"seconds": 10, "maxSeconds": 30}})
    start = clock.now()
    made = await teams[0].post("/v1/jobs/digest/runs", json={"payload": {"n": 0}})
    assert made.status_code == 201
    assert made.json()["readyAt"] == _iso(start + timedelta(seconds=10))
    for n in range(1, 6):  # every 5 s: each push would be 10 s on, the cap is start + 30
        clock.advance(5)
        pushed = await teams[n % 2].post("/v1/jobs/digest/runs", json={"payload": {"n": n}})
        assert pushed.status_code == 200 and pushed.json()["debounced"] is True
        expected = min(clock.now() + timedelta(seconds=10), start + timedelta(seconds=30))
        assert pushed.json()["readyAt"] == _iso(expected)
    clock.advance(5)  # start + 30: the cap has come
    due = await teams[0].post("/v1/jobs/digest/runs", json={"payload": {"n": 6}})
    assert (due.status_code, due.json()["state"]) == (200, "ready")
    assert due.json()["payload"] == {"n": 6}

    # Once a worker leased it, the next enqueue starts a new burst.
    leased = await lease(database, clock, "default")
    assert [lease.run_id for lease in leased] == [due.json()["runId"]]
    fresh = await teams[1].post("/v1/jobs/digest/runs", json={"payload": {"n": 7}})
    assert fresh.status_code == 201
    assert fresh.json()["readyAt"] == _iso(clock.now() + timedelta(seconds=10))


async def test_a_run_that_leaves_the_states_gives_its_key_back(
    teams: list[httpx.AsyncClient], clock: FrozenClock, database: Database
) -> None:
    team = teams[0]
    dispatcher = Dispatcher(database, clock)
    # Default states: a run not started yet holds its key; leased, it no longer does.
    await put_job(team, "pending-only", {"unique": {}})
    first = (await team.post("/v1/jobs/pending-only/runs")).json()
    again = await team.post("/v1/jobs/pending-only/runs")
    assert (again.status_code, again.json()["runId"]) == (200, first["runId"])
    await lease(database, clock, "default")
    second = await team.post("/v1/jobs/pending-only/runs")
    assert second.status_code == 201 and second.json()["runId"] != first["runId"]
    # Cancelled, it holds nothing either.
    assert (await team.post(f"/v1/runs/{second.json()['runId']}:cancel")).status_code == 200
    third = await team.post("/v1/jobs/pending-only/runs")
    assert third.status_code == 201

    # With leased and succeeded for 60 s: the run holds its key while it runs and for a
    # minute after it succeeded.
    await put_job(
        team,
        "hourly-report",
        {
            "queue": "reports",
            "unique": {"states": [*PENDING, "leased", "succeeded"], "forSeconds": 60},
        },
    )
    made = (await team.post("/v1/jobs/hourly-report/runs")).json()
    (taken,) = await lease(database, clock, "reports")
    running = await team.post("/v1/jobs/hourly-report/runs")
    assert (running.status_code, running.json()["state"]) == (200, "leased")
    (done,) = await dispatcher.complete(
        [CompleteItem(taken.run_id, taken.fencing_token, Outcome.succeeded)]
    )
    assert not isinstance(done, Exception)
    clock.advance(59)
    finished = await team.post("/v1/jobs/hourly-report/runs")
    assert (finished.status_code, finished.json()["runId"]) == (200, made["runId"])
    assert finished.json()["state"] == "succeeded" and finished.json()["deduplicated"]
    clock.advance(1)
    later = await team.post("/v1/jobs/hourly-report/runs")
    assert later.status_code == 201 and later.json()["runId"] != made["runId"]


async def test_a_payload_without_the_key_is_refused_naming_payload(
    teams: list[httpx.AsyncClient],
) -> None:
    team = teams[0]
    await put_job(team, "per-customer", {"unique": {"key": "/customer/id"}})
    refused = await team.post("/v1/jobs/per-customer/runs", json={"payload": {"customer": {}}})
    assert refused.status_code == 400
    assert refused.json()["field"] == "payload" and "/customer/id" in refused.json()["detail"]
    # No payload at all: the job's (here none) is the run's payload, and has no key.
    assert (await team.post("/v1/jobs/per-customer/runs")).status_code == 400
    batch = await team.post(
        "/v1/jobs/per-customer/runs:batch",
        json={"runs": [{"payload": {"customer": {"id": 1}}}, {"payload": {"other": 1}}]},
    )
    items = batch.json()["items"]
    assert "runId" in items[0] and items[1]["problem"]["field"] == "runs[1].payload"

    # A debounced run starts when its burst ends: it takes no time of its own.
    await put_job(team, "debounced", {"debounce": {"seconds": 5}})
    timed = await team.post("/v1/jobs/debounced/runs", json={"delaySeconds": 30})
    assert (timed.status_code, timed.json()["field"]) == (400, "delaySeconds")


async def test_a_batch_answers_its_duplicates_with_one_run_per_key(
    teams: list[httpx.AsyncClient],
) -> None:
    team = teams[0]
    await put_job(team, "notify", {"unique": {"key": "/user"}})
    payloads = [{"user": 1}, {"user": 2}, {"user": 1, "n": 2}, {"user": 1, "n": 3}]
    batch = await team.post(
        "/v1/jobs/notify/runs:batch", json={"runs": [{"payload": p} for p in payloads]}
    )
    assert batch.status_code == 200, batch.text
    items = batch.json()["items"]
    assert [item["runId"] for item in items] == [items[0]["runId"], items[1]["runId"]] + [
        items[0]["runId"]
    ] * 2
    assert [item.get("deduplicated", False) for item in items] == [False, False, True, True]
    assert len(await runs_of(team, "notify")) == 2
    # A later batch finds the runs of the earlier one.
    again = await team.post("/v1/jobs/notify/runs:batch", json={"runs": [{"payload": {"user": 2}}]})
    assert again.json()["items"][0]["runId"] == items[1]["runId"]

    await put_job(team, "coalesce", {"debounce": {"key": "/user", "seconds": 30}})
    burst = await team.post(
        "/v1/jobs/coalesce/runs:batch",
        json={"runs": [{"payload": {"user": 1, "n": n}} for n in range(5)]},
    )
    (run,) = await runs_of(team, "coalesce")
    assert run["payload"] == {"user": 1, "n": 4}
    assert {item["runId"] for item in burst.json()["items"]} == {run["runId"]}


async def test_an_idempotency_key_and_a_unique_key_work_together(
    teams: list[httpx.AsyncClient], clock: FrozenClock, database: Database
) -> None:
    team = teams[0]
    await put_job(team, "invoice", {"unique": {"key": "/order"}})
    first = await team.post(
        "/v1/jobs/invoice/runs", json={"payload": {"order": 1}}, headers={"Idempotency-Key": "a"}
    )
    assert first.status_code == 201
    # Another request, another Idempotency-Key, the same unique key: deduplicated.
    body = {"payload": {"order": 1, "note": "retry"}}
    other = await team.post("/v1/jobs/invoice/runs", json=body, headers={"Idempotency-Key": "b"})
    assert (other.status_code, other.json()["deduplicated"]) == (200, True)
    assert other.json()["runId"] == first.json()["runId"]

    # The run is leased: the unique key is free, but repeating request "b" still gets
    # the answer it got (the Idempotency-Key's promise); a new request makes a new run.
    await lease(database, clock, "default")
    repeated = await team.post("/v1/jobs/invoice/runs", json=body, headers={"Idempotency-Key": "b"})
    assert repeated.status_code == 200
    assert (repeated.json()["runId"], repeated.json()["deduplicated"]) == (
        first.json()["runId"],
        True,
    )
    misused = await team.post(
        "/v1/jobs/invoice/runs", json={"payload": {"order": 2}}, headers={"Idempotency-Key": "b"}
    )
    assert misused.status_code == 422 and misused.json()["field"] == "Idempotency-Key"
    fresh = await team.post(
        "/v1/jobs/invoice/runs", json={"payload": {"order": 1}}, headers={"Idempotency-Key": "c"}
    )
    assert fresh.status_code == 201 and fresh.json()["runId"] != first.json()["runId"]
    # Repeating the first request answers its own run, not deduplicated.
    replay = await team.post(
        "/v1/jobs/invoice/runs", json={"payload": {"order": 1}}, headers={"Idempotency-Key": "a"}
    )
    assert replay.status_code == 200 and "deduplicated" not in replay.json()
    assert replay.json()["runId"] == first.json()["runId"]


async def test_the_rules_are_refused_naming_the_field(teams: list[httpx.AsyncClient]) -> None:
    team = teams[0]
    cases = {
        "unique.forSeconds": {"unique": {"states": [*PENDING, "dead"]}},
        "unique.states": {"unique": {"states": ["ready"]}},
        "unique.key": {"unique": {"key": "customer"}},
        "debounce.maxSeconds": {"debounce": {"seconds": 60, "maxSeconds": 10}},
        "debounce.seconds": {"debounce": {"seconds": 0}},
        "debounce": {"unique": {}, "debounce": {"seconds": 5}},
    }
    for field, spec in cases.items():
        answer = await team.put("/v1/jobs/refused", json=spec)
        assert (answer.status_code, answer.json()["field"]) == (400, field), answer.text
    made = await team.put(
        "/v1/jobs/kept",
        json={"unique": {"key": "", "states": [*PENDING, "dead"], "forSeconds": 3600}},
    )
    assert made.json()["spec"]["unique"] == {
        "key": "",
        "states": [*PENDING, "dead"],
        "forSeconds": 3600,
    }


async def lease(database: Database, clock: FrozenClock, queue: str) -> list[Lease]:
    return await Dispatcher(database, clock).lease(
        [queue], limit=5, worker_id="w", lease_seconds=30
    )


def _iso(instant: Any) -> str:
    return str(instant.isoformat().replace("+00:00", "Z"))
