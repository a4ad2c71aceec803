"""Schema version 5 on a populated shard: runs in every state, written under version 3, are
still there after the migration, and the API reads, lists, leases, completes, replays
and deduplicates them as before."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta

import conftest
import httpx
import orjson
import pytest
from conftest import TEAM_TOKEN, TEST_SHARDS, WORKER_TOKEN, scratch_database

from tickwork.api.app import create_app
from tickwork.api.server import HttpServer
from tickwork.api.services import Services
from tickwork.core.shards import ShardMap
from tickwork.core.spec import JobSpec
from tickwork.engine import materialiser
from tickwork.engine.installation import Installation
from tickwork.engine.metrics import Metrics
from tickwork.store import database, migrate
from tickwork.store.database import Database

DAY = datetime(2026, 3, 14, 2, 0, tzinfo=UTC)
STATES = (
    "scheduled",
    "ready",
    "leased",
    "retry_wait",
    "succeeded",
    "dead",
    "cancelled",
    "discarded",
    "skipped",
)

V3_DEFINITION = """
INSERT INTO definitions (tenant, name, spec, queue, priority, next_due_at, created_at,
                         updated_at)
VALUES ('acme', 'report', $1::jsonb, 'default', 1, NULL, $2, $2)
"""
V3_RUN = """
INSERT INTO runs (tenant, job, queue, priority, state, origin, attempt, max_attempts,
                  retry_base, retry_max, timeout_seconds, due_at, ready_at,
                  idempotency_key, fencing_token, lease_owner, leased_at, lease_expires_at,
                  deadline, last_error, created_at, updated_at, finished_at)
VALUES ('acme', 'report', 'default', 1, $1, $2, $3, 3, 1, 10, 600, $4, $4, $5, $6, $7, $8,
        $9, $10, $11::jsonb, $4, $4, $12)
RETURNING id
"""
V3_ATTEMPT = """
INSERT INTO attempts (run_id, attempt, fencing_token, worker_id, leased_at, finished_at,
                      outcome, result_state)
VALUES ($1, 1, $2, 'w-old', $3, $4, $5, $6)
"""


@pytest.fixture
async def version_3_url(server_url: str, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[str]:
    """Every test shard at schema version 3 with one job holding a run in each state."""
    async with scratch_database(server_url, "tickwork_v3") as url:
        everything = migrate.migrations()
        monkeypatch.setattr(migrate, "migrations", lambda: everything[:3])
        shard_map = ShardMap.from_dsns([url], TEST_SHARDS)
        await migrate.migrate_all(shard_map.shards)
        monkeypatch.setattr(migrate, "migrations", lambda: everything)
        conn = await database.connect(shard_map[shard_map.shard_of("acme", "report")])
        try:
            await conn.execute(V3_DEFINITION, orjson.dumps(JobSpec().to_document()).decode(), DAY)
            for n, state in enumerate(STATES):
                await _v3_run(conn, n, state)
        finally:
            await conn.close()
        yield url


async def _v3_run(conn: database.Connection, n: int, state: str) -> None:
    due = DAY + timedelta(minutes=n)
    leased = state not in ("scheduled", "ready", "skipped", "cancelled")
    finished = state in ("succeeded", "dead", "cancelled", "discarded", "skipped")
    token = 100 + n if leased else None
    origin = "cron" if state in ("succeeded", "skipped") else "api"
    key = f"acme/report@{due.isoformat()}" if origin == "cron" else f"key-{state}"
    run_id = await conn.fetchval(
        V3_RUN,
        state,
        origin,
        1 if leased else 0,
        due,
        key,
        token,
        "w-old" if leased else None,
        due if leased else None,
        due + timedelta(days=30) if state == "leased" else None,
        due + timedelta(days=30) if state == "leased" else None,
        '{"message": "boom"}' if state in ("dead", "discarded", "retry_wait") else None,
        due + timedelta(seconds=5) if finished else None,
    )
    if leased and state != "leased":
        outcome = "succeeded" if state == "succeeded" else "failed"
        await conn.execute(
            V3_ATTEMPT,
            run_id,
            token,
            due,
            due + timedelta(seconds=5),
            outcome,
            "retry_wait" if state == "retry_wait" else state,
        )


@pytest.fixture
async def migrated_api(version_3_url: str) -> AsyncIterator[tuple[str, Database]]:
    shard_map = ShardMap.from_dsns([version_3_url], TEST_SHARDS)
    applied = await migrate.migrate_all(shard_map.shards)
    assert all(versions[:2] == [4, 5] for versions in applied.values())
    async with Database(shard_map) as db:
        services = Services(
            engine=Installation.over(db),
            authenticator=conftest.test_tokens(),
            metrics=Metrics(),
        )
        server = HttpServer(create_app(services), port=0)
        url = await server.start()
        try:
            yield url, db
        finally:
            await server.stop()


def _client(url: str, token: str) -> httpx.AsyncClient:
    return httpx.AsyncClient(base_url=url, headers={"Authorization": f"Bearer {token}"})


async def test_runs_of_every_state_survive_the_migration(
    migrated_api: tuple[str, Database],
) -> None:
    url, _ = migrated_api
    async with _client(url, TEAM_TOKEN) as team:
        listed = await team.get("/v1/jobs/report/runs", params={"limit": 50})
        assert listed.status_code == 200, listed.text
        by_state = {run["state"]: run for run in listed.json()["items"]}
        assert set(by_state) == set(STATES)
        for state, run in by_state.items():
            one = await team.get(f"/v1/runs/{run['runId']}")
            assert one.status_code == 200 and one.json()["state"] == state
        succeeded = (await team.get(f"/v1/runs/{by_state['succeeded']['runId']}")).json()
        assert [a["outcome"] for a in succeeded["attempts"]] == ["succeeded"]

        job = (await team.get("/v1/jobs/report")).json()
        assert job["activeRuns"] == 1 and job["deadRuns"] == 1
        assert job["lastRun"] is not None

        dlq = (await team.get("/v1/dlq")).json()["items"]
        assert [run["runId"] for run in dlq] == [by_state["dead"]["runId"]]

        # An Idempotency-Key used before the migration still answers its first run.
        again = await team.post(
            "/v1/jobs/report/runs", json={}, headers={"Idempotency-Key": "key-dead"}
        )
        assert again.status_code == 200 and again.json()["runId"] == by_state["dead"]["runId"]


async def test_migrated_runs_lease_complete_and_replay(
    migrated_api: tuple[str, Database],
) -> None:
    url, _ = migrated_api
    async with _client(url, TEAM_TOKEN) as team, _client(url, WORKER_TOKEN) as worker:
        runs = (await team.get("/v1/jobs/report/runs", params={"limit": 50})).json()["items"]
        by_state = {run["state"]: run for run in runs}

        # The run leased under version 3 completes with its old token.
        leased = by_state["leased"]
        done = await worker.post(
            f"/v1/runs/{leased['runId']}/complete",
            json={"fencingToken": 102, "outcome": "succeeded"},
        )
        assert done.status_code == 200 and done.json()["state"] == "succeeded", done.text
        # ...and a repeat of that completion answers the same.
        repeat = await worker.post(
            f"/v1/runs/{leased['runId']}/complete",
            json={"fencingToken": 102, "outcome": "succeeded"},
        )
        assert repeat.status_code == 200 and repeat.json()["state"] == "succeeded"

        replayed = await team.post(f"/v1/dlq/{by_state['dead']['runId']}:replay")
        assert replayed.status_code == 200 and replayed.json()["state"] == "ready"
        granted = (await worker.post("/v1/lease", json={"queues": ["default"], "max": 10})).json()[
            "leases"
        ]
        assert {g["runId"] for g in granted} == {
            by_state["ready"]["runId"],
            by_state["dead"]["runId"],
        }


async def test_a_cron_run_finished_before_the_migration_is_not_materialised_again(
    migrated_api: tuple[str, Database],
) -> None:
    _, db = migrated_api
    shard = db.shard_map.shard_of("acme", "report")
    due = DAY + timedelta(minutes=STATES.index("succeeded"))
    planned = [
        (
            "acme",
            "report",
            "default",
            1,
            "cron",
            3,
            1.0,
            10.0,
            600,
            due,
            due,
            None,
            f"acme/report@{due.isoformat()}",
            None,
            0,
            0,
            False,  # dry_run
        )
    ]
    async with db.connection(shard) as conn:
        columns = [list(column) for column in zip(*planned, strict=True)]
        inserted = await conn.fetch(materialiser.INSERT_PLANNED_RUNS, *columns, None, [None])
        assert inserted == []
        count = await conn.fetchval(
            "SELECT count(*) FROM runs WHERE job = 'report' AND due_at = $1", due
        )
        assert count == 1
